"""``tracecomm.analyze``: the CLI's analysis for notebooks and scripts, one call."""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from tracecomm.analysis.build import Analysis
from tracecomm.analysis.compare import Comparison
from tracecomm.analysis.report import Report
from tracecomm.run.discover import Discovery
from tracecomm.run.executors import open_executor
from tracecomm.run.options import SPECS, AnalyzeOptions
from tracecomm.run.pool import SPAWNED_POOL_MIN_BYTES
from tracecomm.run.request import Request, request_of
from tracecomm.run.session import analyze_run

if TYPE_CHECKING:
    from typing_extensions import Unpack

_F = TypeVar("_F", bound=Callable[..., Any])


def _type_text(python: Any) -> str:
    """A type as written (``str | Sequence[str]``), for help() to show."""
    text = python.__name__ if isinstance(python, type) else repr(python)
    return re.sub(r"\b(?:collections\.abc|pathlib|typing)\.", "", text)


def _options_in_signature(*left_out: str) -> Callable[[_F], _F]:
    """The options as keyword-only parameters of the function's signature, so that help()
    and a notebook's completion show every one (``AnalyzeOptions``, the one list of names)."""

    def decorate(fn: _F) -> _F:
        signature = inspect.signature(fn)
        kept = [p for p in signature.parameters.values() if p.kind is not p.VAR_KEYWORD]
        named = {p.name for p in kept}
        kept += [
            inspect.Parameter(
                name,
                inspect.Parameter.KEYWORD_ONLY,
                default=None,
                annotation=_type_text(spec.python),
            )
            for name, spec in SPECS.items()
            if name not in named and name not in left_out
        ]
        fn.__signature__ = signature.replace(parameters=kept)  # type: ignore[attr-defined]
        return fn

    return decorate


@_options_in_signature()
def analyze(paths: str | Path | Sequence[str | Path], **options: Unpack[AnalyzeOptions]) -> Report:
    """Analyze a run folder (or trace files, URLs, ``ingest`` summaries) as ``tracecomm
    analyze`` does, with its options as keywords of the same names::

        report = tracecomm.analyze("run/", steps="3:7", model_flops_per_step=3.16e15)
        report.ranks          # one row per rank (polars), see Report.ranks_frame
        report.stragglers     # the typed sections, as the JSON document has them

    Works alike in a notebook, in a plain script (no ``if __name__ == "__main__":`` guard
    needed), under ``python -c`` and from ``python -``. The ranks are parsed on threads of this
    process, one per core (polars and the inflation release the GIL), unless the run reaches
    1 GiB or ``jobs=N`` asks for N worker processes: fresh interpreters, started per call, that
    import tracecomm but never the caller's script or notebook (each costs about half a
    CPU-second before its first rank). ``jobs=1`` parses one rank at a time; the figures are
    the same either way.

    The options are ``AnalyzeOptions`` (typed for a type checker; help() lists them).
    Raises ``tracecomm.errors.UsageError`` for a bad option or path and
    ``tracecomm.errors.NoUsableInput`` when nothing can be analyzed."""
    return _analyze(request_of(paths, **options)).report


@_options_in_signature()
def compare(
    paths: Sequence[str | Path], weak: bool = False, keep_order: bool = False, **options: Any
) -> Comparison:
    """Compare runs as ``tracecomm compare`` does (metrics.md §18): run folders, ``ingest``
    summaries or saved analyze JSON documents; ``options``: ``analyze``'s keywords, applied to
    every run folder::

        result = tracecomm.compare(["n64/", "n128/", "n256/"], tokens_per_step=4_194_304)
        result.runs[-1].scaling_efficiency
        result.pairs[-1].decomposition     # where the time went, adding up to the ns

    Works in a notebook and in a plain script alike, each run folder parsed as ``analyze``
    parses it (threads of this process, or worker processes for 1 GiB or with ``jobs=N``,
    which never import the caller's script).

    Raises ``tracecomm.errors.UsageError`` (a bad option, path or saved report) and
    ``tracecomm.errors.NoUsableInput``."""
    from tracecomm.run.compare import compare_runs

    return compare_runs(
        list(paths), weak=weak, keep_order=keep_order, analyze_run=_analyze, **options
    )


def _analyze(request: Request, discovery: Discovery | None = None) -> Analysis:
    """A worker process here is a fresh interpreter (polars is loaded: no fork), which pays
    for itself only on a large run: below ``SPAWNED_POOL_MIN_BYTES`` the ranks go to threads."""
    executor = open_executor(request.executor, request.jobs, pool_min_bytes=SPAWNED_POOL_MIN_BYTES)
    try:
        return analyze_run(request, executor=executor, discovery=discovery)
    finally:
        executor.close()
