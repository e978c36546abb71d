"""The report's base: each rank's file and identity, the ranks that are missing or absent, and
the run summary (sums over ranks of their analysis windows, metrics.md §2). The processors of
``analysis.build`` enrich it."""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Sequence
from typing import cast

from tracecomm._version import __version__
from tracecomm.analysis.model import (
    MedianFigures,
    MissingRank,
    RankNote,
    RankReport,
    RankResult,
    RunData,
    RunSummary,
    TypeSummary,
)
from tracecomm.analysis.rank import MeanStep, RankSource, SkippedFile, WorstStep
from tracecomm.analysis.report import Report, Tool
from tracecomm.doc import SCHEMA_VERSION
from tracecomm.engine.classify import COLL_TYPES
from tracecomm.engine.model import PARTITION_FIELDS, Figures, WindowFigures
from tracecomm.ingest.discover import RankClaim, assign_ranks, rank_from_filename
from tracecomm.text import compact_ranges

# Traces of one job open their windows within minutes; hours apart means another job.
_SAME_JOB_SPAN_NS = 3600 * 10**9


def base_report(data: RunData) -> tuple[Report, dict[int, RankResult]]:
    """Ranks, missing and absent ranks, skipped files, the run summary and its warnings; and
    each analyzed rank's result (its breakdown: what the analysis reads beyond the report)."""
    results, failures = data.results, data.failures
    warnings: list[str] = list(data.run_warnings)
    by_path = {r.path: r for r in results}
    assignment = assign_ranks([RankClaim(r.path, r.meta.rank) for r in results])
    warnings.extend(assignment.warnings)
    missing = [
        MissingRank(rank_from_filename(f.path), f.path, f.reason)
        for f in failures
        if not f.not_a_trace
    ]
    for rank, paths in sorted(assignment.duplicates.items()):
        reason = f"rank {rank} is claimed by {len(paths)} files: {', '.join(paths)}"
        missing.append(MissingRank(rank, None, reason + " (pass one of them)"))
    chosen = {rank: by_path[path] for rank, path in sorted(assignment.ranks.items())}
    ranks = [_rank_report(rank, assignment.source[rank], r) for rank, r in chosen.items()]
    for result in results:
        warnings.extend(result.warnings)
    world = _world_size(results, warnings)
    absent = _absent_ranks(world, ranks, missing)
    if absent:
        warnings.append(
            f"{len(absent)} of {world} ranks (world_size) have no trace file: "
            + compact_ranges(absent)
        )
    warnings.extend(_mixed_job_warnings(results))
    missing.sort(key=lambda m: (m.rank is None, m.rank or 0, m.path or ""))
    partial = bool(missing) or any(r.partial for r in ranks)
    report = Report(
        schema_version=SCHEMA_VERSION,
        tool=Tool("tracecomm", __version__),
        inputs=data.inputs,
        read_from=data.read_from,
        options=data.options,
        summary=_summary(ranks, world),
        ranks=tuple(ranks),
        by_type=_by_type(ranks),
        missing_ranks=tuple(missing),
        absent_ranks=tuple(absent),
        skipped_files=tuple(SkippedFile(f.path, f.reason) for f in failures if f.not_a_trace),
        # a file read as several ranks (an Nsight export of a node) warns once, not per rank
        warnings=tuple(dict.fromkeys(warnings)),
        notes=_grouped_notes(ranks),
        partial=partial,
    )
    return report, chosen


def _rank_report(rank: int, source: str, result: RankResult) -> RankReport:
    bd = result.breakdown
    steps = [(s.step, s.window.figures) for s in bd.included_steps if s.window is not None]
    worst_step, worst = (
        max(steps, key=lambda item: (item[1].window_ns, item[0])) if steps else (0, None)
    )
    return RankReport(
        rank=rank,
        rank_source=cast(RankSource, source),
        path=result.path,
        host=result.meta.host_name,
        devices=_devices(result),
        timeline=bd.timeline,
        partial=result.truncated or result.repaired_events > 0,
        comm_kernels=bd.comm_kernels,
        device_events=bd.device_events,
        unlinked_events=bd.unlinked_events,
        window=bd.window,
        steps_included=len(steps),
        step_median=_median_figures([f for _, f in steps]),
        step_mean=_mean_step(bd.window, len(steps)) if steps else None,
        step_worst=WorstStep(worst_step, worst) if worst is not None else None,
        steps=bd.steps,
        observed=bd.observed,
        power_log=result.power_source,
        kernels=bd.kernels,
        notes=bd.notes,
    )


def _devices(result: RankResult) -> tuple[str, ...]:
    """Names of the GPUs the rank's kernels ran on (deviceProperties lists every visible GPU:
    never all of them), else every listed name."""
    # a blank name (vLLM's capture traces list their GPU as "") names no device
    names = {d: name for d, name in result.meta.device_names.items() if name.strip()}
    used = [names[d] for d in result.breakdown.devices if d in names]
    return tuple(dict.fromkeys(used)) if used else tuple(sorted(set(names.values())))


def _median_figures(steps: Sequence[Figures]) -> MedianFigures | None:
    """Median of each figure over the included steps (rounded to whole ns)."""
    if not steps:
        return None
    medians = {
        # an even count averages two ns values: halves round up
        name: math.floor(statistics.median(getattr(fig, name) for fig in steps) + 0.5)
        for name in PARTITION_FIELDS
    }
    return MedianFigures(
        **medians,
        overlap_pct=_median_pct([fig.overlap_pct for fig in steps]),
        busy_pct=_median_pct([fig.busy_pct for fig in steps]),
    )


def _mean_step(window: WindowFigures | None, steps: int) -> MeanStep | None:
    """The analysis window over its steps (``MeanStep``)."""
    if window is None or steps < 1:
        return None

    def per(ns: int) -> int:
        return math.floor(ns / steps + 0.5)

    f = window.figures
    by_type: dict[str, int] = {}
    for t in window.by_type:
        by_type[t.coll_type] = by_type.get(t.coll_type, 0) + t.exposed_comm_ns
    causes = window.idle_by_cause
    return MeanStep(
        window_ns=per(f.window_ns),
        compute_ns=per(f.compute_ns),
        exposed_comm_ns=per(f.exposed_comm_ns),
        exposed_memory_ns=per(f.exposed_memory_ns),
        idle_ns=per(f.idle_ns),
        exposed_comm_by_type_ns={t: per(ns) for t, ns in by_type.items()},
        idle_by_cause_ns=None if causes is None else {c: per(ns) for c, ns in causes.items()},
        comm_ns=per(f.comm_ns),
    )


def _median_pct(values: list[float | None]) -> float | None:
    defined = [v for v in values if v is not None]
    return statistics.median(defined) if defined else None


def _grouped_notes(ranks: Sequence[RankReport]) -> tuple[RankNote, ...]:
    by_text: dict[str, list[int]] = {}
    for rank in ranks:
        for note in rank.notes:
            by_text.setdefault(note, []).append(rank.rank)
    return tuple(RankNote(text, tuple(r)) for text, r in by_text.items())


def _world_size(results: Sequence[RankResult], warnings: list[str]) -> int | None:
    sizes = Counter(r.meta.world_size for r in results if r.meta.world_size is not None)
    if len(sizes) > 1:
        warnings.append(
            "files disagree on world_size ("
            + ", ".join(f"{size} in {n} files" for size, n in sorted(sizes.items()))
            + "): traces from different jobs in one folder?"
        )
    return max(sizes) if sizes else None


def _absent_ranks(
    world: int | None, ranks: Sequence[RankReport], missing: Sequence[MissingRank]
) -> list[int]:
    """Ranks below world_size with no file at all (profiling a subset of ranks is common)."""
    if world is None:
        return []
    accounted = {r.rank for r in ranks} | {m.rank for m in missing if m.rank is not None}
    return [r for r in range(world) if r not in accounted]


def _mixed_job_warnings(results: Sequence[RankResult]) -> list[str]:
    warnings = []
    starts = [r.first_event_abs_ns for r in results if r.first_event_abs_ns is not None]
    if len(starts) > 1 and max(starts) - min(starts) > _SAME_JOB_SPAN_NS:
        hours = (max(starts) - min(starts)) / 3.6e12
        warnings.append(
            f"trace start times are {hours:.1f} h apart: traces from different jobs in one folder?"
        )
    ids = Counter(r.meta.trace_id for r in results if r.meta.trace_id)
    # Only meaningful when ids are shared: per-process ids are all distinct in one job.
    if len(ids) > 1 and any(n > 1 for n in ids.values()):
        warnings.append(
            f"files carry {len(ids)} different trace_id values: traces from different jobs?"
        )
    return warnings


def _summary(ranks: Sequence[RankReport], world: int | None) -> RunSummary:
    timed = [(r.rank, pace) for r in ranks if (pace := _pace(r)) is not None]
    timed.sort(key=lambda item: (item[1], item[0]))
    windows = [r.window.figures for r in ranks if r.window is not None]
    steps = sorted({s.step for r in ranks for s in r.included_steps})
    causes = _sum_causes(ranks)
    return RunSummary(
        ranks_analyzed=len(ranks),
        world_size=world,
        timelines=tuple(sorted({r.timeline for r in ranks})),
        steps=tuple(steps),
        median_rank=timed[(len(timed) - 1) // 2][0] if timed else None,
        worst_rank=timed[-1][0] if timed else None,
        worst_by="median step window" if steps else "analysis window length",
        slowest_first=tuple(rank for rank, _ in reversed(timed)),
        total=_sum_figures(windows) if windows else None,
        idle_by_cause=causes,
        idle_by_cause_pct=_cause_shares(causes),
    )


def _cause_shares(causes: dict[str, int] | None) -> dict[str, float] | None:
    """Each cause's share of the summed idle time (the causes partition it, metrics.md §10)."""
    total = sum(causes.values()) if causes else 0
    if not causes or not total:
        return None
    return {cause: 100.0 * ns / total for cause, ns in causes.items()}


def _sum_causes(ranks: Sequence[RankReport]) -> dict[str, int] | None:
    per_rank = [
        r.window.idle_by_cause
        for r in ranks
        if r.window is not None and r.window.idle_by_cause is not None
    ]
    if not per_rank:
        return None
    return {cause: sum(c[cause] for c in per_rank) for cause in per_rank[0]}


def _pace(rank: RankReport) -> int | None:
    """What ranks are ordered by: median step time, else the analysis window's length."""
    if rank.step_median is not None:
        return rank.step_median.window_ns
    window = rank.window
    return window.figures.window_ns if window is not None else None


def _sum_figures(figures: Sequence[Figures]) -> Figures:
    return Figures(**{name: sum(getattr(x, name) for x in figures) for name in PARTITION_FIELDS})


def _by_type(ranks: Sequence[RankReport]) -> tuple[TypeSummary, ...]:
    rows = [t for r in ranks if r.window is not None for t in r.window.by_type]
    out = []
    for coll in COLL_TYPES:
        mine = [t for t in rows if t.coll_type == coll]
        if mine:
            out.append(
                TypeSummary(
                    coll_type=mine[0].coll_type,
                    kernels=sum(t.kernels for t in mine),
                    ranks=len(mine),
                    comm_ns=sum(t.comm_ns for t in mine),
                    exposed_comm_ns=sum(t.exposed_comm_ns for t in mine),
                )
            )
    return tuple(out)
