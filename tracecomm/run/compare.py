"""``tracecomm compare``: each input analyzed (run folders of traces, ``ingest`` summaries) or
read (a saved analyze JSON), then compared (metrics.md §18). The first run (by world size,
unless the order given is kept) is projected to the others' world sizes from its Report's
projection basis, which a saved document holds as its run does.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from tracecomm.analysis.build import Analysis, project_report
from tracecomm.analysis.compare import Comparison, compare, ordered
from tracecomm.analysis.report import Report
from tracecomm.analysis.runrecord import RunRecord, projection_record, record_of_report
from tracecomm.errors import UsageError
from tracecomm.run.discover import Discovery, discover
from tracecomm.run.executors import open_executor
from tracecomm.run.request import Request, request_of
from tracecomm.run.saved import SavedReport, load_saved_report
from tracecomm.run.session import analyze_run as analyze_now
from tracecomm.run.sniff import looks_saved

Analyze = Callable[[Request, Discovery], Analysis]


def compare_runs(
    inputs: Sequence[str | Path],
    weak: bool = False,
    keep_order: bool = False,
    analyze_run: Analyze | None = None,
    **options: Any,
) -> Comparison:
    """Compare two or more runs; ``options``: the analysis options (``tracecomm.analyze``'s
    keywords) every run folder is analyzed with. ``analyze_run``: how a folder is analyzed
    (the CLI adds its progress bar and exit codes). Raises ``UsageError`` and
    ``NoUsableInput``."""
    if len(inputs) < 2:
        raise UsageError("compare needs two or more runs (run folders, summaries or analyze JSON)")
    for name in ("project", "to", "weak", "detail"):
        if options.get(name):
            raise UsageError(f"compare sets --{name} itself")
    saved = [
        load_saved_report(path) if path.is_file() and looks_saved(path) else None
        for path in map(Path, inputs)
    ]
    labels = _labels(_label_paths([str(i) for i in inputs], saved))
    reports: dict[str, Report] = {}
    records = []
    for given, label, document in zip(inputs, labels, saved, strict=True):
        if document is not None:
            reports[label] = document.report
            records.append(record_of_report(document.report, label))
            continue
        request = request_of([given], **options)
        discovery = discover(list(request.inputs))
        analysis = (analyze_run or _analyze)(request, discovery)
        records.append(record_of_report(analysis.report, label))
        reports[label] = analysis.report
    first = ordered(records, keep_order)[0]
    records = [
        _projected(r, records, reports[first.label], weak) if r is first else r for r in records
    ]
    return compare(records, weak=weak, keep_order=keep_order)


def _analyze(request: Request, discovery: Discovery) -> Analysis:
    executor = open_executor(request.executor, request.jobs)
    try:
        return analyze_now(request, executor=executor, discovery=discovery)
    finally:
        executor.close()


def _projected(
    first: RunRecord, records: Sequence[RunRecord], report: Report, weak: bool
) -> RunRecord:
    """The first run projected (metrics.md §11) to the other runs' world sizes."""
    own = first.world_size or first.ranks_analyzed
    targets = tuple(sorted({n for r in records if (n := r.world_size or r.ranks_analyzed) != own}))
    if not targets:
        return replace(first, projection="every run has its world size: nothing to project to")
    return replace(first, projection=projection_record(project_report(report, targets, weak)))


def _label_paths(given: Sequence[str], saved: Sequence[SavedReport | None]) -> list[str]:
    """The path each input is labelled from: a run folder (or summaries) its path as given; a
    saved analyze document the run it analyzed, its one recorded input as analyze was given it
    (``compare a.json b.json`` labels the runs as ``compare RUN_A RUN_B`` would). When that
    leaves two inputs the same path (two documents of ``run/`` analyzed from different folders,
    a run given both as folder and as document), or a document recorded several inputs, every
    saved document is labelled from its own file path instead."""
    runs = [
        g if s is None else (s.report.inputs[0] if len(s.report.inputs) == 1 else None)
        for g, s in zip(given, saved, strict=True)
    ]
    distinct = {posixpath.normpath(r) for r in runs if r is not None}
    if None in runs or len(distinct) < len(runs):
        return list(given)
    return [r for r in runs if r is not None]


def _labels(inputs: Sequence[str]) -> list[str]:
    """Each input by what sets it apart: the path parts every input shares, leading and
    trailing, dropped (``/data/runs/exp-8/report.json`` and ``…/exp-64/report.json`` are
    ``exp-8`` and ``exp-64``); made unique (the same run twice: '#2')."""
    seen: dict[str, int] = {}
    out = []
    for label in _distinct_parts(inputs):
        seen[label] = seen.get(label, 0) + 1
        out.append(label if seen[label] == 1 else f"{label} #{seen[label]}")
    return out


def _distinct_parts(inputs: Sequence[str]) -> list[str]:
    parts = [[p for p in given.split("/") if p] or [given] for given in inputs]
    if len(parts) < 2:
        return [given.rstrip("/") or given for given in inputs]
    shortest = min(len(p) for p in parts)
    head = 0
    while head < shortest - 1 and len({p[head] for p in parts}) == 1:
        head += 1
    tail = 0
    while tail < shortest - head - 1 and len({p[len(p) - 1 - tail] for p in parts}) == 1:
        tail += 1
    return ["/".join(p[head : len(p) - tail]) for p in parts]
