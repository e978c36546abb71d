"""Run HolisticTraceAnalysis itself on a run folder (``tracecomm crosscheck``); its import,
logging, slowness and failures stay inside this module.

Whichever HTA is installed runs: 0.6.x (PyPI ``traceinsight``, what ``tracecomm[hta]``
installs) or 0.5.0 (PyPI ``holistictraceanalysis``); both provide the ``hta`` module, so only one
can be installed at a time. Its figures are compared with the --compat mode of that release.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import io
import logging
import math
import os
import re
import traceback
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tracecomm.compat.hta import HtaFigures
from tracecomm.compat.rules import mode_for_release

FIGURES = ("comm_comp_overlap_pct", "idle_us", "compute_us", "non_compute_us", "kernel_time_us")
_DISTRIBUTIONS = ("traceinsight", "holistictraceanalysis")  # 0.6 and later / up to 0.5.0
_MESSAGE_CHARS = 400


class HtaMissing(RuntimeError):
    """The optional extra is not installed."""


class HtaFailed(RuntimeError):
    """HTA raised while analyzing the run: a limit of HTA, reported as HTA's, in one line."""

    def __init__(self, version: str, run: Path, exc: BaseException) -> None:
        self.version, self.run, self.exc = version, run, exc
        super().__init__(f"HTA {version} failed on {run}: {one_line(exc)}")


@dataclass(frozen=True)
class InstalledHta:
    version: str  # hta.__version__ of the importable module
    mode: str  # the --compat value with that release's definitions
    notes: tuple[str, ...] = ()  # e.g. a release tracecomm does not reproduce exactly


@dataclass(frozen=True)
class Comparison:
    rank: int
    figure: str
    tracecomm: float | None
    hta: float | None

    @property
    def agrees(self) -> bool:
        """Equal to the printed precision: 2 decimals for the overlap, whole µs otherwise."""
        if self.tracecomm is None or self.hta is None:
            return self.tracecomm is None and self.hta is None
        digits = 2 if self.figure == "comm_comp_overlap_pct" else 0
        return round(self.tracecomm, digits) == round(self.hta, digits)


@dataclass(frozen=True)
class Crosscheck:
    """tracecomm's --compat figures beside HTA's own, on one run folder."""

    run: str
    mode: str  # the --compat mode compared with
    version: str  # the HTA release that ran
    rows: tuple[Comparison, ...]


def installed() -> InstalledHta:
    """The HTA that ``import hta`` gives, its version and the matching --compat mode."""
    try:
        import hta
        import hta.trace_analysis  # what run_hta needs (fails on a broken install)
    except ImportError as exc:
        raise HtaMissing(
            "crosscheck runs HolisticTraceAnalysis itself: pip install 'tracecomm[hta]'"
        ) from exc
    version = str(getattr(hta, "__version__", "") or _distribution_version() or "unknown")
    mode, note = mode_for_release(version)
    notes = [note] if note else []
    both = [d for d in _DISTRIBUTIONS if _has_distribution(d)]
    if len(both) > 1:
        notes.append(
            f"{' and '.join(both)} are both installed and share the hta module; "
            f"the one that imports says {version} (pip uninstall one of them)"
        )
    return InstalledHta(version, mode, tuple(notes))


def _has_distribution(name: str) -> bool:
    try:
        importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def _distribution_version() -> str | None:
    for name in _DISTRIBUTIONS:
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            return importlib.metadata.version(name)
    return None


def one_line(exc: BaseException) -> str:
    """``ExceptionType: message`` on one line; an empty message names where HTA raised."""
    message = re.sub(r"\s+", " ", str(exc)).strip()
    if not message:
        frames = traceback.extract_tb(exc.__traceback__)
        inside = [f for f in frames if "/hta/" in f.filename.replace("\\", "/")] or frames
        if inside:
            where = inside[-1]
            path = where.filename.replace("\\", "/")
            short = path[path.rindex("/hta/") + 1 :] if "/hta/" in path else path
            message = f"(no message; raised in {short}:{where.lineno}, {where.name})"
        else:
            message = "(no message)"
    if len(message) > _MESSAGE_CHARS:
        message = message[: _MESSAGE_CHARS - 1] + "…"
    return f"{type(exc).__name__}: {message}"


def run_hta(
    run: Path, version: str = "", files: Mapping[int, str] | None = None
) -> dict[int, HtaFigures]:
    """HTA's get_comm_comp_overlap and get_temporal_breakdown with HTA's defaults:
    ``TraceAnalysis(trace_dir=run)``, or on the given rank → file map (the files tracecomm read,
    so both tools analyze the same files). Anything HTA raises becomes HtaFailed."""
    try:
        from hta.trace_analysis import TraceAnalysis
    except ImportError as exc:
        raise HtaMissing(
            "crosscheck runs HolisticTraceAnalysis itself: pip install 'tracecomm[hta]'"
        ) from exc
    version = version or installed().version
    sink = io.StringIO()
    logging.disable(logging.CRITICAL)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(sink):
            warnings.simplefilter("ignore")
            if files:
                analysis = TraceAnalysis(trace_files=dict(files), trace_dir=str(run))
            else:
                analysis = TraceAnalysis(trace_dir=str(run))
            overlap = analysis.get_comm_comp_overlap(visualize=False)
            breakdown = analysis.get_temporal_breakdown(visualize=False)
    except Exception as exc:  # HTA's own failure, whatever it is: reported as HTA's
        raise HtaFailed(version, run, exc) from exc
    finally:
        logging.disable(logging.NOTSET)
    return _figures(overlap, breakdown, version)


def discovery_notes(run: Path, files: Mapping[int, str]) -> list[str]:
    """A note when HTA's own discovery (``TraceAnalysis(trace_dir=run)``: the folder's top-level
    .json/.gz files, rank from the first ``"rank": N``, rank 0 without one) would read other files
    than tracecomm's ranks."""
    try:
        from hta.common.trace_file import create_rank_to_trace_dict_from_dir

        logging.disable(logging.CRITICAL)
        try:
            _, found = create_rank_to_trace_dict_from_dir(str(run))
        finally:
            logging.disable(logging.NOTSET)
    except Exception:  # an HTA without that helper, or one that fails on the folder
        return []
    theirs = {int(rank): os.path.realpath(path) for rank, path in found.items()}
    mine = {rank: os.path.realpath(path) for rank, path in files.items()}
    if theirs == mine:
        return []
    diffs = []
    for rank in sorted(theirs.keys() | mine.keys()):
        if theirs.get(rank) != mine.get(rank):
            other = os.path.basename(theirs[rank]) if rank in theirs else "no file"
            ours = os.path.basename(mine[rank]) if rank in mine else "no file"
            diffs.append(f"rank {rank}: {other} instead of {ours}")
    more = f"; {len(diffs) - 3} more" if len(diffs) > 3 else ""
    return [
        f"HTA's own discovery of {run} picks other files than tracecomm "
        f"({'; '.join(diffs[:3])}{more}): HTA was given tracecomm's rank files"
    ]


def _figures(overlap: Any, breakdown: Any, version: str) -> dict[int, HtaFigures]:
    """HTA's two data frames (pandas) as figures per rank."""
    pct = {int(r["rank"]): r["comp_comm_overlap_pctg"] for _, r in overlap.iterrows()}
    out = {}
    for _, r in breakdown.iterrows():
        rank = int(r["rank"])
        value = pct.get(rank)
        out[rank] = HtaFigures(
            rank=rank,
            comm_comp_overlap_pct=None if value is None or math.isnan(value) else float(value),
            idle_us=int(r["idle_time(us)"]),
            compute_us=int(r["compute_time(us)"]),
            non_compute_us=int(r["non_compute_time(us)"]),
            kernel_time_us=int(r["kernel_time(us)"]),
            hta_version=version,
        )
    return out


def compare(ours: list[HtaFigures], theirs: dict[int, HtaFigures]) -> list[Comparison]:
    """Figure by figure, every rank either side has (a rank only one side has disagrees)."""
    mine = {f.rank: f for f in ours}
    rows = []
    for rank in sorted(mine.keys() | theirs.keys()):
        a, b = mine.get(rank), theirs.get(rank)
        for figure in FIGURES:
            rows.append(
                Comparison(
                    rank,
                    figure,
                    getattr(a, figure) if a else None,
                    getattr(b, figure) if b else None,
                )
            )
    return rows
