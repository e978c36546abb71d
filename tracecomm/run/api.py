"""``tracecomm.analyze``: the CLI's analysis for notebooks and scripts, one call."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tracecomm.analysis.compare import Comparison
from tracecomm.analysis.model import Report
from tracecomm.run.executors import open_executor
from tracecomm.run.request import request_of
from tracecomm.run.session import analyze as run_analysis


def analyze(paths: str | Path | Sequence[str | Path], **options: Any) -> Report:
    """Analyze a run folder (or trace files, URLs, ``ingest`` summaries) as ``tracecomm
    analyze`` does, with its options as keywords of the same names::

        report = tracecomm.analyze("run/", steps="3:7", model_flops_per_step=3.16e15)
        report.ranks          # one row per rank (polars), see Report.ranks_frame
        report.stragglers     # the typed sections, as the JSON document has them

    Raises ``tracecomm.errors.UsageError`` for a bad option or path and
    ``tracecomm.errors.NoUsableInput`` when nothing can be analyzed."""
    request = request_of(paths, **options)
    executor = open_executor(request.executor, request.jobs)
    try:
        return run_analysis(request, executor=executor)
    finally:
        executor.close()


def compare(
    paths: Sequence[str | Path], weak: bool = False, keep_order: bool = False, **options: Any
) -> Comparison:
    """Compare runs as ``tracecomm compare`` does (metrics.md §18): run folders, ``ingest``
    summaries or saved analyze JSON documents; ``options``: ``analyze``'s keywords, applied to
    every run folder::

        result = tracecomm.compare(["n64/", "n128/", "n256/"], tokens_per_step=4_194_304)
        result.runs[-1].scaling_efficiency
        result.pairs[-1].decomposition     # where the time went, adding up to the ns

    Raises ``tracecomm.errors.UsageError`` (a bad option, path or saved report) and
    ``tracecomm.errors.NoUsableInput``."""
    from tracecomm.run.compare import compare_runs

    return compare_runs(list(paths), weak=weak, keep_order=keep_order, **options)
