"""Per-rank partition of each window into compute / exposed comm / exposed memory / idle."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import cast

import numpy as np
import polars as pl
from msgspec import structs

from tracecomm.colltypes import GLOO_OPS, CollType
from tracecomm.engine.classify import (
    COLL_TYPES,
    all_to_all_use,
    classify_with_comm,
    coll_type_of,
    comm_libraries,
    comm_stream_note,
)
from tracecomm.engine.collectives import collective_instances, gloo_instances, split_note
from tracecomm.engine.energy import window_energy
from tracecomm.engine.framework import framework_marks
from tracecomm.engine.idle import HostActivity, cause_sums, compute_bounds, idle_gaps
from tracecomm.engine.intervals import Coverage, IntArray, measure
from tracecomm.engine.kernels import kernel_stats, kernel_steps, kernel_work
from tracecomm.engine.model import (
    Figures,
    RankBreakdown,
    StepFigures,
    Timeline,
    TypeFigures,
    WindowFigures,
)
from tracecomm.engine.observed import counted_ops, observed_flops
from tracecomm.engine.options import BreakdownOptions, ViewRequest
from tracecomm.engine.steps import (
    LaunchNames,
    captured,
    is_named,
    link_launches,
    step_windows,
)
from tracecomm.engine.sweep import COMM, COMPUTE, FIRST_TYPE, MEMORY, work_coverage
from tracecomm.engine.views import RankViews, rank_views
from tracecomm.ingest.model import RankEvents
from tracecomm.ingest.power import PowerSeries

_CPU_COMM_PATTERN = r"^(?:gloo|nccl|rccl|hccl):|^record_param_comms$|^c10d::"
_BACKEND_COMM = r"^(?:gloo|nccl|rccl|hccl):"


def breakdown(
    rank: RankEvents,
    opts: BreakdownOptions | None = None,
    power: Mapping[int, PowerSeries] | None = None,
) -> RankBreakdown:
    """The engine's single entry point: one rank's events in, its figures out.

    ``power``: this rank's host's GPU power samples by GPU index; the rank's own GPU (the
    one most of its kernels ran on) gives each window its energy."""
    return breakdown_and_views(rank, opts, power)[0]


def breakdown_and_views(
    rank: RankEvents,
    opts: BreakdownOptions | None = None,
    power: Mapping[int, PowerSeries] | None = None,
    request: ViewRequest | None = None,
) -> tuple[RankBreakdown, RankViews | None]:
    """``breakdown``, and what the later views need of the rank (``engine.views``), taken from
    the same frames; None for a rank with no device work."""
    result, views = _breakdown(rank, opts, power, request or ViewRequest())
    return replace(result, frameworks=framework_marks(rank)), views


def _breakdown(
    rank: RankEvents,
    opts: BreakdownOptions | None,
    power: Mapping[int, PowerSeries] | None,
    request: ViewRequest,
) -> tuple[RankBreakdown, RankViews | None]:
    opts = opts or BreakdownOptions()
    device, comm = classify_with_comm(rank, opts.comm_patterns, opts.compute_patterns)
    not_sync = pl.col("cls") != "sync"
    # the device work's GPUs, busiest first, without a copy of the frame (a 2 GB trace's
    # device frame is hundreds of MB: every filtered copy kept alive is as much again)
    devices = tuple(
        device.lazy()
        .filter(not_sync & pl.col("device").is_not_null())
        .group_by("device")
        .len()
        .sort("len", "device", descending=[True, False])
        # the engine's lazy plans run on polars' in-memory engine: a rank's frames are in
        # memory already, and on them the default (streaming) engine's start costs about
        # 1 ms a query, a fifth of a small rank's breakdown, with no gain on a 2 GB trace
        .collect(engine="in-memory")["device"]
        .to_list()
    )
    has_work = bool((device["cls"] != "sync").any()) if device.height else False  # no query
    names = LaunchNames.of(rank)
    in_capture = captured(rank, names)
    if not has_work and in_capture.any():
        # launches made while a stream captured a graph ran nothing: no CPU timeline either
        note = capture_note(rank, in_capture, replayed=0, names=names)
        return RankBreakdown("gpu", None, (), 0, device.height, 0, (note,)), None
    if not has_work and rank.cpu.height:
        cpu = _cpu_breakdown(rank, opts)
        notes = lost_activity_notes(rank, device, in_capture, names)
        return replace(cpu, notes=notes + cpu.notes), None
    series = (power or {}).get(devices[0]) if devices and rank.epoch_clock else None
    linked = link_launches(device, rank, names)
    steps = step_windows(linked, rank, names, in_capture)
    detail: dict[str, pl.DataFrame] = {}
    work = linked.filter(not_sync)
    result = _gpu_breakdown(
        work,
        steps,
        device,
        opts,
        series,
        HostActivity.of(rank, names),
        detail,
    )
    notes = lost_activity_notes(rank, linked, in_capture, names)
    on_comm_stream = comm_stream_note(device)
    if on_comm_stream is not None:
        notes += (on_comm_stream,)
    if in_capture.any():
        replayed = int(linked["graph_via"].is_not_null().sum())
        notes += (capture_note(rank, in_capture, replayed, names),)
    # first: the last note says why nothing could be analyzed, when nothing could
    result = replace(result, notes=notes + result.notes)
    included = {s.step for s in result.included_steps}
    flop_ops = _flop_ops(rank.shaped_ops)
    counted = counted_ops(flop_ops, linked, included) if flop_ops.height else None
    instances = collective_instances(
        linked.lazy()
        .filter(pl.col("cls") == "comm")
        .join(
            comm.lazy().drop(*(c for c in comm.columns if c in linked.columns and c != "_row")),
            on="_row",
            how="left",
        )
        .collect(engine="in-memory"),
        work.select("start_ns", "end_ns", "step", "cls", "stream", "launch_ns"),
    )
    splits = split_note(instances)
    gpu = result.timeline == "gpu" and included
    kernel_table = kernel_work(linked, included) if gpu else None
    views = rank_views(rank, linked, comm, steps, result.steps, request)
    return replace(
        result,
        notes=result.notes + ((splits,) if splits else ()),
        collectives=instances,
        comm_libraries=comm_libraries(device),
        all_to_all_use=all_to_all_use(device, rank.cpu),
        work_signature=_work_signature(linked, result),
        devices=devices,
        observed=observed_flops(flop_ops, linked, included, counted),
        kernels=kernel_stats(
            rank,
            linked,
            included,
            detail.get("gaps"),
            in_capture,
            names,
            counted,
            kernel_table,
        )
        if kernel_table is not None
        else None,
        kernel_steps=kernel_steps(kernel_table) if kernel_table is not None else None,
    ), views


def _flop_ops(shaped: pl.DataFrame) -> pl.DataFrame:
    """The shaped ops the FLOP counter reads: gloo's ranges carry shapes for their sizes."""
    if shaped.height == 0:
        return shaped
    return shaped.filter(~pl.col("name").is_in(list(GLOO_OPS)))


# A share of lost activity above which it is said (a few events are always odd).
LOST_SHARE_PCT = 5.0


def capture_note(
    rank: RankEvents, in_capture: pl.Series, replayed: int, names: LaunchNames | None = None
) -> str:
    """What a trace that records graph capture holds (metrics.md §16)."""
    names = names or LaunchNames.of(rank)
    launches = rank.launches.filter(in_capture & is_named(names.kernel_launch))
    captures = rank.launches.filter(is_named(names.capture_begin)).height
    made = (
        f"{launches.height} kernel launches were made while a stream captured a CUDA/HIP "
        f"graph ({captures} capture(s), between StreamBeginCapture and StreamEndCapture): "
        "they run nothing, their kernels run when the graph is replayed"
    )
    if replayed:
        return made + f"; they are not counted as missing ({replayed} replayed kernels are)"
    return (
        "this trace records graph capture: "
        + made
        + ", and no replay was recorded; profile the replay (the steps after the graph is "
        "captured)"
    )


def lost_activity_notes(
    rank: RankEvents,
    device: pl.DataFrame,
    in_capture: pl.Series | None = None,
    names: LaunchNames | None = None,
) -> tuple[str, ...]:
    """Kernel launches the trace recorded without the GPU events they started: the profiler
    lost device activity (ProfilerActivity.CUDA off, CUPTI busy or out of buffer space).
    Launches made during a graph capture run nothing: never lost. ``device``: the device
    frame, or the linked one (``launch_corr``: a graph launch tied to its kernels by their
    graph nodes launched them)."""
    names = names or LaunchNames.of(rank)
    kernel = is_named(names.kernel_launch)
    launches = (
        rank.launches.lazy()
        .select("name", "correlation")
        .filter(kernel if in_capture is None else kernel & ~in_capture)
        .collect(engine="in-memory")
    )
    if launches.height == 0:
        return ()
    if device.height == 0:
        return (
            f"{launches.height} kernel launches ({_launch_names(launches)}) but no GPU event: the "
            "profiler recorded no device activity (ProfilerActivity.CUDA not enabled, or CUPTI "
            "could not start: another profiler held it), so this rank is analyzed on its CPU "
            "timeline and its GPU time is unknown",
        )
    corr = pl.col("correlation")
    linked = pl.coalesce("launch_corr", corr) if "launch_corr" in device.columns else corr
    seen = device.select(linked.drop_nulls().unique()).to_series()
    lost = launches.filter(
        pl.col("correlation").is_not_null() & ~pl.col("correlation").is_in(seen.implode())
    ).height
    share = 100 * lost / launches.height
    if share <= LOST_SHARE_PCT:
        return ()
    return (
        f"{lost} of {launches.height} kernel launches ({share:.0f} %) have no GPU event: the "
        "profiler dropped device activity (CUPTI's buffer full, or the trace cut); the steps "
        "that launched them are incomplete and left out",
    )


def _launch_names(launches: pl.DataFrame) -> str:
    counts = launches.group_by("name").len().sort("len", "name", descending=[True, False])
    return ", ".join(f"{n} × {c}" for n, c in counts.head(3).iter_rows())


def _work_signature(linked: pl.DataFrame, result: RankBreakdown) -> str | None:
    steps = result.included_steps
    if not steps:
        return None
    names = (
        linked.select("cls", "step", "start_ns", "name")
        .filter((pl.col("cls") == "compute") & (pl.col("step") == steps[0].step))
        .sort("start_ns")["name"]
        .to_list()
    )
    return hashlib.blake2b("\n".join(names).encode(), digest_size=12).hexdigest()


def _gpu_breakdown(
    work: pl.DataFrame,
    steps: pl.DataFrame,
    device: pl.DataFrame,
    opts: BreakdownOptions,
    power: PowerSeries | None = None,
    host: HostActivity | None = None,
    idle_detail: dict[str, pl.DataFrame] | None = None,
) -> RankBreakdown:
    comm_kernels = int((device["cls"] == "comm").sum())
    unlinked = int(work["launch_ns"].is_null().sum())
    notes: list[str] = []
    if work.height == 0:
        notes.append("no device events (kernels, memcpy, memset) in this trace")
        return RankBreakdown("gpu", None, (), comm_kernels, device.height, unlinked, tuple(notes))
    if unlinked:
        share = 100 * unlinked / work.height
        notes.append(
            f"{unlinked} device events have no matching runtime launch (unlinked): they count "
            "toward busy time but define no step"
            + (
                f"; that is {share:.0f} % of the device events: the trace's CPU side (runtime "
                "calls) was cut or filtered, so the steps may hold less work than ran"
                if share > LOST_SHARE_PCT
                else ""
            )
        )
    return _figures_for(
        work,
        steps,
        "gpu",
        opts,
        comm_kernels,
        device.height,
        unlinked,
        notes,
        power,
        host,
        idle_detail,
    )


def _cpu_breakdown(rank: RankEvents, opts: BreakdownOptions) -> RankBreakdown:
    """CPU-only traces (gloo, or no CUDA activity): comm ops vs. other CPU ops (metrics.md §1)."""
    cpu = rank.cpu.filter(~pl.col("name").str.starts_with("ProfilerStep#"))
    # where the backend's own ranges are there (gloo:all_reduce on gloo's thread: the work),
    # c10d::allreduce_ and record_param_comms are the caller queueing it: counted as comm
    # too, each collective would count twice
    on_backend = bool(cpu.select(pl.col("name").str.contains(_BACKEND_COMM).any()).item())
    is_comm = pl.col("name").str.contains(_BACKEND_COMM if on_backend else _CPU_COMM_PATTERN)
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
    result = _figures_for(work, steps, "cpu", opts, comm_kernels, 0, 0, notes)
    instances = gloo_instances(rank.shaped_ops, steps, rank.meta.world_size)
    return replace(result, collectives=instances) if instances.height else result


def _figures_for(
    work: pl.DataFrame,
    steps: pl.DataFrame,
    timeline: Timeline,
    opts: BreakdownOptions,
    comm_kernels: int,
    device_events: int,
    unlinked: int,
    notes: list[str],
    power: PowerSeries | None = None,
    host: HostActivity | None = None,
    idle_detail: dict[str, pl.DataFrame] | None = None,
) -> RankBreakdown:
    """``idle_detail``: receives the analysis window's idle gaps (``gaps``, engine.idle)."""
    idle_detail = {} if idle_detail is None else idle_detail
    if work.height == 0:
        notes.append(f"no {timeline.upper()} activity to analyze")
        return RankBreakdown(
            timeline, None, (), comm_kernels, device_events, unlinked, tuple(notes)
        )
    included = _select_steps(steps, opts, notes)
    present = set(work["coll_type"].unique().to_list())  # once: a column of every kernel
    types = [t for t in COLL_TYPES if t in present]
    events = _Events.of(work, types)
    step_spans = [
        [(row["start_ns"], row["end_ns"])] if row["events"] and row["start_ns"] is not None else []
        for row in steps.iter_rows(named=True)
    ]
    if steps.height == 0:
        notes.append("no ProfilerStep annotations: one window from the first to the last event")
        rank_spans = [(int(events.starts.min()), int(events.ends.max()))]
    else:
        rank_spans = _rank_spans(steps, included)
        if not rank_spans:
            notes.append(
                "no complete step to analyze (--all-steps includes the incomplete ones)"
                if not opts.all_steps
                else "no step in the selection launched device work: nothing to analyze"
            )
    windows = _window_figures(events, types, [*step_spans, rank_spans])
    bounds = compute_bounds(work) if "step" in work.columns else None
    if host is not None:
        gaps = idle_gaps(events.cov, [*step_spans, rank_spans], work, steps, host, bounds)
        # the analysis window's gaps: where the kernel view finds the ops that starve the GPU
        idle_detail["gaps"] = gaps.filter(pl.col("w") == len(step_spans))
        idle = cause_sums(gaps, [*step_spans, rank_spans])
        windows = [
            None if w is None else structs.replace(w, idle_by_cause=causes)
            for w, causes in zip(windows, idle, strict=True)
        ]
    if power is not None:
        c = events.cov.covered
        classes = (c[:, COMPUTE], c[:, COMM], c[:, MEMORY])
        windows = [
            None
            if w is None
            else structs.replace(w, energy=window_energy(events.cov, classes, spans, power))
            for w, spans in zip(windows, [*step_spans, rank_spans], strict=True)
        ]
        if windows[-1] is not None and windows[-1].energy is None:
            notes.append("the power log does not cover the analysis window: no energy figures")
    compute_spans = _compute_spans(bounds) if bounds is not None else {}
    step_rows = [
        StepFigures(
            step=row["step"],
            complete=bool(row["complete"]),
            included=row["step"] in included,
            incomplete_reason=row["incomplete_reason"],
            window=window,
            cpu_span_ns=row["cpu_end_ns"] - row["cpu_start_ns"]
            if row["cpu_end_ns"] is not None and row["cpu_start_ns"] is not None
            else None,
        )
        for row, window in zip(steps.iter_rows(named=True), windows, strict=False)
    ]
    return RankBreakdown(
        timeline,
        windows[-1],
        tuple(step_rows),
        comm_kernels,
        device_events,
        unlinked,
        tuple(notes),
        compute_spans={s.step: compute_spans[s.step] for s in step_rows if s.step in compute_spans},
    )


def _compute_spans(bounds: pl.DataFrame) -> dict[int, tuple[int, int]]:
    """Per step: the first start and last end of the compute kernels it launched."""
    return {step: (start, end) for step, start, end in bounds.iter_rows()}


def _rank_spans(steps: pl.DataFrame, included: set[int]) -> list[tuple[int, int]]:
    """The analysis window: each run of consecutive included steps spans from its first step's
    window start to its last one's end (gaps between steps are idle); an excluded step breaks
    the run, so its work is not counted. Overlapping runs are merged."""
    runs: list[tuple[int, int]] = []
    open_run: tuple[int, int] | None = None
    for row in steps.sort("step").iter_rows(named=True):
        if row["step"] in included and row["start_ns"] is not None:
            start, end = row["start_ns"], row["end_ns"]
            open_run = (open_run[0], max(open_run[1], end)) if open_run else (start, end)
            continue
        if open_run:
            runs.append(open_run)
            open_run = None
    if open_run:
        runs.append(open_run)
    merged: list[tuple[int, int]] = []
    for start, end in sorted(runs):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def _select_steps(steps: pl.DataFrame, opts: BreakdownOptions, notes: list[str]) -> set[int]:
    in_range = steps.filter(
        (pl.col("events") > 0)
        & (pl.col("step") >= (opts.first_step if opts.first_step is not None else -(2**62)))
        & (pl.col("step") <= (opts.last_step if opts.last_step is not None else 2**62))
    )
    if opts.all_steps:
        return set(in_range["step"].to_list())
    for row in steps.filter(~pl.col("complete")).iter_rows(named=True):
        notes.append(f"step {row['step']} excluded: {row['incomplete_reason']}")
    return set(in_range.filter(pl.col("complete"))["step"].to_list())


@dataclass(frozen=True)
class _Events:
    """The rank's work as arrays, plus the one sweep every window is measured against."""

    cov: Coverage
    starts: IntArray
    ends: IntArray
    comm_types: np.ndarray

    @classmethod
    def of(cls, work: pl.DataFrame, types: Sequence[str]) -> _Events:
        return cls(
            cov=work_coverage(work, types),
            starts=np.asarray(work["start_ns"].to_numpy(), dtype=np.int64),
            ends=np.asarray(work["end_ns"].to_numpy(), dtype=np.int64),
            comm_types=work["coll_type"].fill_null("").to_numpy(),
        )


def _window_figures(
    events: _Events, types: Sequence[str], windows: Sequence[Sequence[tuple[int, int]]]
) -> list[WindowFigures | None]:
    """Figures of every window at once (one cumulative sum per set expression); a window may
    be several disjoint spans, whose measures add up. An empty window gives None."""
    owner = np.array([w for w, spans in enumerate(windows) for _ in spans], dtype=np.int64)
    lo = np.array([s for spans in windows for s, _ in spans], dtype=np.int64)
    hi = np.array([e for spans in windows for _, e in spans], dtype=np.int64)

    def size(mask: np.ndarray) -> IntArray:
        per_window = np.zeros(len(windows), dtype=np.int64)
        np.add.at(per_window, owner, measure(events.cov, mask, lo, hi))
        return per_window

    c = events.cov.covered
    compute, comm, memory = c[:, COMPUTE], c[:, COMM], c[:, MEMORY]
    window_ns = np.zeros(len(windows), dtype=np.int64)
    np.add.at(window_ns, owner, hi - lo)
    compute_ns, comm_ns, overlapped = size(compute), size(comm), size(comm & compute)
    compute_or_comm, busy = size(compute | comm), size(compute | comm | memory)
    per_type = [
        (size(c[:, FIRST_TYPE + i]), size(c[:, FIRST_TYPE + i] & compute))
        for i in range(len(types))
    ]
    of_type = [events.comm_types == coll for coll in types]  # once, not once a window
    out: list[WindowFigures | None] = []
    for w, spans in enumerate(windows):
        if not spans:
            out.append(None)
            continue
        figures = Figures(
            window_ns=int(window_ns[w]),
            compute_ns=int(compute_ns[w]),
            comm_ns=int(comm_ns[w]),
            overlapped_comm_ns=int(overlapped[w]),
            exposed_comm_ns=int(comm_ns[w] - overlapped[w]),
            exposed_memory_ns=int(busy[w] - compute_or_comm[w]),
            idle_ns=int(window_ns[w] - busy[w]),
        )
        hits = np.zeros(events.starts.size, dtype=bool)
        for start, end in spans:
            hits |= (events.starts < end) & (events.ends > start)
        by_type = []
        for i, coll in enumerate(types):
            kernels = int(np.count_nonzero(hits & of_type[i]))
            type_ns, type_overlap = int(per_type[i][0][w]), int(per_type[i][1][w])
            if kernels or type_ns:
                by_type.append(
                    TypeFigures(cast(CollType, coll), kernels, type_ns, type_ns - type_overlap)
                )
        out.append(WindowFigures(spans[0][0], spans[-1][1], figures, tuple(by_type)))
    return out
