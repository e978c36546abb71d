"""Step windows (metrics.md §2): which device work each ProfilerStep launched, and whether
the step is complete; and CUDA / HIP graphs (metrics.md §16): which launch replayed a graph's
kernels, and which launches were made while a stream captured a graph (they run nothing)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from tracecomm.ingest.frames import null_column
from tracecomm.ingest.model import RankEvents

# Kernel launches (runtime, driver, HIP, graphs); a step whose launches of these have no
# recorded kernel was cut short by the end of the trace. Memcpy/memset calls are left out:
# real traces often hold cudaMemsetAsync calls that CUPTI records no activity for.
DEVICE_LAUNCH_PATTERN = r"(?i)launch.*kernel|kernel.*launch|graphlaunch"
# The kernel launches whose lost GPU events the breakdown reports (a narrower family)
KERNEL_LAUNCH_PATTERN = r"(?i)launch(?:kernel|cooperativekernel)|graphlaunch|launchkernelex"
SYNC_CALL = r"(?i)^(cuda|hip)(Device|Stream|Event|Ctx)Synchronize"
GRAPH_LAUNCH_PATTERN = r"(?i)graphlaunch"  # cudaGraphLaunch, cuGraphLaunch, hipGraphLaunch
CAPTURE_BEGIN_PATTERN = r"(?i)streambegincapture"  # cuda/cu/hipStreamBeginCapture[ToGraph]
CAPTURE_END_PATTERN = r"(?i)streamendcapture"
# How a replayed kernel was tied to its graph launch (metrics.md §16)
BY_CORRELATION, BY_REPLAY_ORDER, BY_TIME = "correlation", "replay order", "time"


@dataclass(frozen=True)
class LaunchNames:
    """Which of a trace's runtime call names launch graphs, open / close a capture, launch
    device work or kernels, or synchronize (found on the distinct names: a trace has a few
    dozen, and hundreds of thousands of calls; a test on the name is then ``is_named``)."""

    graph: tuple[str, ...]
    capture_begin: tuple[str, ...]
    capture_end: tuple[str, ...]
    device_launch: tuple[str, ...] = ()
    kernel_launch: tuple[str, ...] = ()
    sync_call: tuple[str, ...] = ()

    @classmethod
    def of(cls, rank: RankEvents) -> LaunchNames:
        patterns = (
            GRAPH_LAUNCH_PATTERN,
            CAPTURE_BEGIN_PATTERN,
            CAPTURE_END_PATTERN,
            DEVICE_LAUNCH_PATTERN,
            KERNEL_LAUNCH_PATTERN,
            SYNC_CALL,
        )
        name = pl.col("name")
        found = (  # one query for every pattern
            rank.launches.lazy()
            .select(name.unique().drop_nulls())
            .select(
                name.filter(name.str.contains(p)).implode().alias(str(i))
                for i, p in enumerate(patterns)
            )
            .collect(engine="in-memory")
            .row(0)
        )
        return cls(*(tuple(sorted(names)) for names in found))


def is_named(names: tuple[str, ...]) -> pl.Expr:
    """The call's name is one of ``names`` (the distinct names a pattern matched)."""
    return pl.col("name").is_in(list(names)) if names else pl.lit(False)


def link_launches(
    device: pl.DataFrame, rank: RankEvents, names: LaunchNames | None = None
) -> pl.DataFrame:
    """Add ``launch_ns``, ``launch_tid`` and ``launch_corr`` (the runtime call that launched
    the event: its start, thread and correlation id), ``graph_via`` (for a kernel a graph
    replayed: how it was tied to the launch; else null) and ``step``."""
    names = names or LaunchNames.of(rank)
    launches = (  # the columns first: the filter and the unique copy only these (one plan)
        rank.launches.lazy()
        .select(
            "correlation",
            pl.col("start_ns").alias("launch_ns"),
            pl.col("tid").alias("launch_tid"),
            pl.col("correlation").alias("launch_corr"),
            (pl.col("name").is_in(list(names.graph)) if names.graph else pl.lit(False)).alias(
                "_graph_launch"
            ),
        )
        .filter(pl.col("correlation").is_not_null())
        .unique("correlation", keep="first")
    )
    # joined on the key alone, the launch columns set beside the device frame's own: a join
    # of the whole frame would copy every column of every kernel
    launch_columns = (
        device.lazy()
        .select("correlation")
        .join(launches, on="correlation", how="left", maintain_order="left")
        .drop("correlation")
        .collect(engine="in-memory")
    )
    linked = device.hstack(launch_columns.get_columns())
    graph_kernel = pl.col("_graph_launch").fill_null(False) | (
        pl.col("graph_id").is_not_null() if "graph_id" in linked.columns else pl.lit(False)
    )
    linked = (
        linked.lazy()
        .with_columns(
            pl.when(graph_kernel & pl.col("launch_ns").is_not_null())
            .then(pl.lit(BY_CORRELATION))
            .otherwise(pl.lit(None, pl.String))
            .alias("graph_via")
        )
        .drop("_graph_launch")
        .collect(engine="in-memory")
    )
    if names.graph and "graph_id" in linked.columns:
        linked = _by_graph_nodes(linked, rank, names)
    return linked.with_columns(step_of(pl.col("launch_ns"), rank.steps, linked).alias("step"))


def _by_graph_nodes(linked: pl.DataFrame, rank: RankEvents, names: LaunchNames) -> pl.DataFrame:
    """Kernels a graph replayed whose correlation names no launch (only their graph and node
    ids tell): tied to the graph launches that launched no recorded work. Replay r of a graph
    is the r-th time its nodes run; with one graph in the trace and as many such launches as
    replays, replay r is the r-th launch (``replay order``); otherwise each replay goes to the
    latest of those launches before its first kernel starts (``time``)."""
    linked = linked.with_row_index("_k")
    orphans = linked.filter(pl.col("launch_ns").is_null() & pl.col("graph_id").is_not_null())
    if orphans.height == 0:
        return linked.drop("_k")
    recorded = linked.select(pl.col("launch_corr").drop_nulls().unique()).to_series()
    free = (
        rank.launches.filter(
            pl.col("name").is_in(list(names.graph))
            & pl.col("correlation").is_not_null()
            & ~pl.col("correlation").is_in(recorded.implode())
        )
        .sort("start_ns", "correlation")
        .select(
            pl.col("start_ns").alias("_l_ns"),
            pl.col("tid").alias("_l_tid"),
            pl.col("correlation").alias("_l_corr"),
        )
    )
    if free.height == 0:
        return linked.drop("_k")
    replays = orphans.select("_k", "graph_id", "graph_node", "start_ns")
    replays = replays.sort("start_ns", "_k").with_columns(
        pl.int_range(pl.len()).over("graph_id", "graph_node").alias("_replay")
    )
    firsts = (
        replays.group_by("graph_id", "_replay")
        .agg(pl.col("start_ns").min().alias("_first"))
        .sort("_first", "graph_id", "_replay")
    )
    if firsts["graph_id"].n_unique() == 1 and firsts.height == free.height:
        assigned = pl.concat([firsts, free], how="horizontal").with_columns(
            pl.lit(BY_REPLAY_ORDER).alias("_via")
        )
    else:
        assigned = (
            firsts.join_asof(free, left_on="_first", right_on="_l_ns", strategy="backward")
            .filter(pl.col("_l_corr").is_not_null())
            .with_columns(pl.lit(BY_TIME).alias("_via"))
        )
    tied = replays.join(
        assigned.select("graph_id", "_replay", "_l_ns", "_l_tid", "_l_corr", "_via"),
        on=["graph_id", "_replay"],
    ).select("_k", "_l_ns", "_l_tid", "_l_corr", "_via")
    out = linked.join(tied, on="_k", how="left", maintain_order="left").drop("_k")
    return out.with_columns(
        pl.coalesce("launch_ns", "_l_ns").alias("launch_ns"),
        pl.coalesce("launch_tid", "_l_tid").alias("launch_tid"),
        pl.coalesce("launch_corr", "_l_corr").alias("launch_corr"),
        pl.coalesce("graph_via", "_via").alias("graph_via"),
    ).drop("_l_ns", "_l_tid", "_l_corr", "_via")


def captured(rank: RankEvents, names: LaunchNames | None = None) -> pl.Series:
    """Per launch (``rank.launches`` order): made while a stream captured a graph, between a
    BeginCapture call and the next EndCapture on the same thread. Such a launch runs nothing:
    its kernels run when the graph is replayed."""
    names = names or LaunchNames.of(rank)
    launches = rank.launches
    if not names.capture_begin or launches.height == 0:
        return pl.Series("captured", [False] * launches.height, dtype=pl.Boolean)
    begins = launches.filter(pl.col("name").is_in(list(names.capture_begin))).select(
        "tid", pl.col("start_ns").alias("_begin")
    )
    ends = launches.filter(pl.col("name").is_in(list(names.capture_end))).select(
        "tid", pl.col("end_ns").alias("_end")
    )
    windows = (
        begins.sort("_begin")
        .join_asof(
            ends.sort("_end"),
            left_on="_begin",
            right_on="_end",
            by="tid",
            strategy="forward",
            check_sortedness=False,
        )
        .with_columns(pl.col("_end").fill_null(2**62))  # never closed: to the trace's end
        .sort("_begin")
    )
    probe = launches.select("tid", "start_ns", "name").with_row_index("_i")
    hit = (
        probe.sort("start_ns")
        .join_asof(
            windows,
            left_on="start_ns",
            right_on="_begin",
            by="tid",
            strategy="backward",
            check_sortedness=False,
        )
        .with_columns(
            (
                (pl.col("start_ns") < pl.col("_end"))
                & ~pl.col("name").is_in(list(names.capture_begin + names.capture_end))
            )
            .fill_null(False)
            .alias("captured")
        )
        .sort("_i")
    )
    return hit["captured"]


def step_of(times: pl.Expr, steps: pl.DataFrame, frame: pl.DataFrame) -> pl.Series:
    """The ProfilerStep whose CPU span holds each time (null when none does): the latest step
    to start at or before the time, when the time is before that step's end. A binary search
    over the few step spans (no join over the events: a 2 GB trace has millions), in numpy:
    called for every rank, its handful of polars queries were a measurable share of the glue."""
    at = frame.get_column(times.meta.output_name()) if times.meta.is_column() else None
    if at is None:
        at = frame.select(times.alias("t"))["t"]
    # a span without a number or a start (a damaged cache entry) holds no time
    spans = steps.select("step", "start_ns", "end_ns")
    if spans["step"].null_count() or spans["start_ns"].null_count():
        spans = spans.drop_nulls(["step", "start_ns"])
    if spans.height == 0:
        return null_column("step", pl.Int64, frame.height)
    order = np.argsort(spans["start_ns"].to_numpy(), kind="stable")
    starts = spans["start_ns"].to_numpy()[order]
    low = np.iinfo(np.int64).min
    end_col = spans["end_ns"]
    ends = (end_col.fill_null(low) if end_col.null_count() else end_col).to_numpy()[order]
    numbers = spans["step"].cast(pl.Int64).to_numpy()[order]
    missing = np.zeros(len(at), dtype=bool)
    if at.null_count():
        missing = np.isnan(at.cast(pl.Float64).to_numpy())  # only the mask: no precision needed
        at = at.set(pl.Series(missing), low)
    t = at.cast(pl.Int64).to_numpy()
    idx = np.searchsorted(starts, t, side="right") - 1
    safe = np.maximum(idx, 0)
    hit = (idx >= 0) & (t < ends[safe]) & ~missing
    return pl.Series("step", numbers[safe], dtype=pl.Int64).set(pl.Series(~hit), None)


def step_windows(
    linked: pl.DataFrame,
    rank: RankEvents,
    names: LaunchNames | None = None,
    in_capture: pl.Series | None = None,
) -> pl.DataFrame:
    """One row per ProfilerStep: its GPU window, event count, missing launches, completeness.
    ``in_capture``: ``captured(rank, names)``, when the caller has it already."""
    windows = (  # the filter reads the four columns it needs, no copy of the frame
        linked.lazy()
        .filter((pl.col("cls") != "sync") & pl.col("step").is_not_null())
        .group_by("step")
        .agg(
            pl.col("start_ns").min().alias("start_ns"),
            pl.col("end_ns").max().alias("end_ns"),
            pl.len().alias("events"),
        )
    )
    missing = (
        _missing_launches(linked, rank, names, in_capture)
        .lazy()
        .group_by("step")
        .agg(pl.len().alias("missing"))
    )
    reason = (
        pl.when(pl.col("cpu_end_ns") <= pl.col("cpu_start_ns"))
        .then(pl.lit("its ProfilerStep annotation never closed (no duration)"))
        .when(pl.col("events") == 0)
        .then(pl.lit("no device activity launched in the step"))
        .when(pl.col("missing") > 0)
        .then(pl.format("{} launched kernels missing from the trace", pl.col("missing")))
    )
    return (  # one plan, collected once (as every lazy plan of the engine: partition.py)
        rank.steps.lazy()
        .unique("step", keep="first", maintain_order=True)
        .sort("step")
        .select(
            "step", pl.col("start_ns").alias("cpu_start_ns"), pl.col("end_ns").alias("cpu_end_ns")
        )
        .join(windows, on="step", how="left", maintain_order="left")
        .join(missing, on="step", how="left", maintain_order="left")
        .with_columns(pl.col("events").fill_null(0), pl.col("missing").fill_null(0))
        .with_columns(reason.alias("incomplete_reason"))
        .with_columns(pl.col("incomplete_reason").is_null().alias("complete"))
        .collect(engine="in-memory")
    )


def _missing_launches(
    linked: pl.DataFrame,
    rank: RankEvents,
    names: LaunchNames | None = None,
    in_capture: pl.Series | None = None,
) -> pl.DataFrame:
    names = names or LaunchNames.of(rank)
    if in_capture is None:
        in_capture = captured(rank, names)
    recorded = (  # joined in the plan below: no frame of its own
        linked.lazy()
        .select(pl.coalesce("launch_corr", "correlation").alias("correlation"))
        .drop_nulls()
        .unique()
    )
    orphans = (  # lazy: only the launches that launched nothing recorded are materialized
        rank.launches.lazy()
        .with_columns(in_capture.alias("_captured"))
        .filter(
            is_named(names.device_launch)
            & pl.col("correlation").is_not_null()
            & ~pl.col("_captured")
        )
        .join(recorded, on="correlation", how="anti")
        .collect(engine="in-memory")
    )
    step = step_of(pl.col("start_ns"), rank.steps, orphans)  # numpy
    return orphans.with_columns(step).filter(step.is_not_null())  # one query
