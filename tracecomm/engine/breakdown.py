"""Per-rank partition of each window into compute / exposed comm / exposed memory / idle."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import polars as pl

from tracecomm.engine.classify import COLL_TYPES, classify, coll_type_of
from tracecomm.engine.intervals import Coverage, IntArray, coverage, measure
from tracecomm.engine.model import (
    Figures,
    RankBreakdown,
    StepFigures,
    Timeline,
    TypeFigures,
    WindowFigures,
)
from tracecomm.engine.steps import link_launches, step_windows
from tracecomm.ingest.model import RankEvents

_COMPUTE, _COMM, _MEMORY = 0, 1, 2
_FIRST_TYPE = 3
_CPU_COMM_PATTERN = r"^(?:gloo|nccl|rccl|hccl):|^record_param_comms$|^c10d::"


@dataclass(frozen=True)
class BreakdownOptions:
    """Which steps form the analysis window (metrics.md §2)."""

    first_step: int | None = None  # inclusive ProfilerStep numbers; None = open
    last_step: int | None = None
    all_steps: bool = False  # include incomplete steps that launched device work
    comm_patterns: tuple[str, ...] = ()


def breakdown(rank: RankEvents, opts: BreakdownOptions | None = None) -> RankBreakdown:
    """The engine's single entry point: one rank's events in, its figures out."""
    opts = opts or BreakdownOptions()
    device = classify(rank, opts.comm_patterns)
    work = device.filter(pl.col("cls") != "sync")
    if work.height == 0 and rank.cpu.height:
        return _cpu_breakdown(rank, opts)
    linked = link_launches(device, rank)
    steps = step_windows(linked, rank)
    return _gpu_breakdown(linked.filter(pl.col("cls") != "sync"), steps, device, opts)


def _gpu_breakdown(
    work: pl.DataFrame, steps: pl.DataFrame, device: pl.DataFrame, opts: BreakdownOptions
) -> RankBreakdown:
    comm_kernels = int((device["cls"] == "comm").sum())
    unlinked = int(work["launch_ns"].is_null().sum())
    notes: list[str] = []
    if work.height == 0:
        notes.append("no device events (kernels, memcpy, memset) in this trace")
        return RankBreakdown("gpu", None, (), comm_kernels, device.height, unlinked, tuple(notes))
    if unlinked:
        notes.append(
            f"{unlinked} device events have no matching runtime launch (unlinked): they count "
            "toward busy time but define no step"
        )
    return _figures_for(work, steps, "gpu", opts, comm_kernels, device.height, unlinked, notes)


def _cpu_breakdown(rank: RankEvents, opts: BreakdownOptions) -> RankBreakdown:
    """CPU-only traces (gloo, or no CUDA activity): comm ops vs. other CPU ops (metrics.md §1)."""
    cpu = rank.cpu.filter(~pl.col("name").str.starts_with("ProfilerStep#"))
    is_comm = pl.col("name").str.contains(_CPU_COMM_PATTERN)
    work = cpu.filter(is_comm | (pl.col("kind") == "cpu_op")).with_columns(
        pl.when(is_comm).then(pl.lit("comm")).otherwise(pl.lit("compute")).alias("cls"),
        pl.when(is_comm).then(coll_type_of(pl.col("name"))).alias("coll_type"),
    )
    steps = (
        rank.steps.unique("step", keep="first")
        .sort("step")
        .select(
            "step",
            pl.col("start_ns").alias("cpu_start_ns"),
            pl.col("end_ns").alias("cpu_end_ns"),
            "start_ns",
            "end_ns",
            pl.lit(1, dtype=pl.UInt32).alias("events"),
            (pl.col("end_ns") > pl.col("start_ns")).alias("complete"),
            pl.when(pl.col("end_ns") <= pl.col("start_ns"))
            .then(pl.lit("empty step span"))
            .alias("incomplete_reason"),
        )
    )
    notes = ["no device events: CPU timeline (communication ops vs. other CPU ops)"]
    comm_kernels = 0
    return _figures_for(work, steps, "cpu", opts, comm_kernels, 0, 0, notes)


def _figures_for(
    work: pl.DataFrame,
    steps: pl.DataFrame,
    timeline: Timeline,
    opts: BreakdownOptions,
    comm_kernels: int,
    device_events: int,
    unlinked: int,
    notes: list[str],
) -> RankBreakdown:
    included = _select_steps(steps, opts, notes)
    types = [t for t in COLL_TYPES if t in set(work["coll_type"].drop_nulls().to_list())]
    cov = _coverage(work, types)
    starts = np.asarray(work["start_ns"].to_numpy(), dtype=np.int64)
    ends = np.asarray(work["end_ns"].to_numpy(), dtype=np.int64)
    comm_types = work["coll_type"].fill_null("").to_numpy()

    step_spans = [
        (row["start_ns"], row["end_ns"])
        if row["events"] > 0 and row["start_ns"] is not None
        else None
        for row in steps.iter_rows(named=True)
    ]
    spans = [span for span in step_spans if span is not None]
    included_spans = [
        span
        for span, step in zip(step_spans, steps["step"].to_list(), strict=True)
        if span and step in included
    ]
    if included_spans:
        spans.append((min(s for s, _ in included_spans), max(e for _, e in included_spans)))
    elif steps.height == 0:
        notes.append("no ProfilerStep annotations: one window from the first to the last event")
        spans.append((int(starts.min()), int(ends.max())))
    else:
        notes.append("no step in the selection launched device work: nothing to analyze")
    computed = iter(_window_figures(cov, types, spans, starts, ends, comm_types))
    step_rows = [
        StepFigures(
            step=row["step"],
            complete=bool(row["complete"]),
            included=row["step"] in included,
            incomplete_reason=row["incomplete_reason"],
            window=next(computed) if span is not None else None,
        )
        for row, span in zip(steps.iter_rows(named=True), step_spans, strict=True)
    ]
    rank_window = next(computed, None)
    return RankBreakdown(
        timeline, rank_window, tuple(step_rows), comm_kernels, device_events, unlinked, tuple(notes)
    )


def _select_steps(steps: pl.DataFrame, opts: BreakdownOptions, notes: list[str]) -> set[int]:
    in_range = steps.filter(
        (pl.col("events") > 0)
        & (pl.col("step") >= (opts.first_step if opts.first_step is not None else -(2**62)))
        & (pl.col("step") <= (opts.last_step if opts.last_step is not None else 2**62))
    )
    complete = in_range.filter(pl.col("complete"))
    if opts.all_steps or (complete.height == 0 and in_range.height > 0):
        if not opts.all_steps:
            notes.append("no complete step: analyzing the partial ones (their figures may be low)")
        return set(in_range["step"].to_list())
    skipped = steps.filter(~pl.col("complete"))
    for row in skipped.iter_rows(named=True):
        notes.append(f"step {row['step']} excluded: {row['incomplete_reason']}")
    return set(complete["step"].to_list())


def _coverage(work: pl.DataFrame, types: Sequence[str]) -> Coverage:
    """One sweep over compute, comm, memory and each collective type present."""
    label_of_cls = {"compute": _COMPUTE, "comm": _COMM, "memory": _MEMORY}
    base = work.select(
        "start_ns",
        "end_ns",
        pl.col("cls").replace_strict(label_of_cls, return_dtype=pl.Int64).alias("label"),
    )
    per_type = work.filter(pl.col("cls") == "comm").select(
        "start_ns",
        "end_ns",
        pl.col("coll_type")
        .replace_strict({t: _FIRST_TYPE + i for i, t in enumerate(types)}, default=None)
        .cast(pl.Int64)
        .alias("label"),
    )
    both = pl.concat([base, per_type])
    return coverage(
        np.asarray(both["start_ns"].to_numpy(), dtype=np.int64),
        np.asarray(both["end_ns"].to_numpy(), dtype=np.int64),
        np.asarray(both["label"].to_numpy(), dtype=np.int64),
        _FIRST_TYPE + len(types),
    )


def _window_figures(
    cov: Coverage,
    types: Sequence[str],
    spans: Sequence[tuple[int, int]],
    starts: IntArray,
    ends: IntArray,
    comm_types: np.ndarray,
) -> list[WindowFigures]:
    """Figures of every window at once: one cumulative sum per set expression."""
    lo = np.array([s for s, _ in spans], dtype=np.int64)
    hi = np.array([e for _, e in spans], dtype=np.int64)

    def size(mask: np.ndarray) -> list[int]:
        return [int(v) for v in measure(cov, mask, lo, hi)]

    c = cov.covered
    compute, comm, memory = c[:, _COMPUTE], c[:, _COMM], c[:, _MEMORY]
    columns = {
        "compute": size(compute),
        "comm": size(comm),
        "overlapped": size(comm & compute),
        "compute_or_comm": size(compute | comm),
        "busy": size(compute | comm | memory),
    }
    per_type = [
        (size(c[:, _FIRST_TYPE + i]), size(c[:, _FIRST_TYPE + i] & compute))
        for i in range(len(types))
    ]
    out = []
    for w, (start, end) in enumerate(spans):
        figures = Figures(
            window_ns=end - start,
            compute_ns=columns["compute"][w],
            comm_ns=columns["comm"][w],
            overlapped_comm_ns=columns["overlapped"][w],
            exposed_comm_ns=columns["comm"][w] - columns["overlapped"][w],
            exposed_memory_ns=columns["busy"][w] - columns["compute_or_comm"][w],
            idle_ns=(end - start) - columns["busy"][w],
        )
        hits = (starts < end) & (ends > start)
        by_type = []
        for i, coll in enumerate(types):
            kernels = int(np.count_nonzero(hits & (comm_types == coll)))
            type_ns, type_overlap = per_type[i][0][w], per_type[i][1][w]
            if kernels or type_ns:
                by_type.append(TypeFigures(coll, kernels, type_ns, type_ns - type_overlap))
        out.append(WindowFigures(start, end, figures, tuple(by_type)))
    return out
