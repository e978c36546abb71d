"""Inside the step (metrics.md §15–§16): the rank's top kernels per class, short kernels,
launch statistics, the ops whose late launches leave the GPU idle, CUDA / HIP graphs, and the
FLOPs and bytes of the recorded matmul / conv / attention ops.

Only the included steps' device work counts. The result is small (the top rows of each table,
exact integer ns) so it travels from the worker and is stored in summaries.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

import numpy as np
import polars as pl

from tracecomm.engine.classify import COLL_TYPES
from tracecomm.engine.intervals import exposed_shares
from tracecomm.engine.model import (
    DurationBucket,
    GraphOp,
    GraphStats,
    KernelGroup,
    KernelRow,
    KernelStats,
    KernelStep,
    LaunchStats,
    OpShape,
    ShortKernels,
    StarvingOp,
)
from tracecomm.engine.observed import Counted
from tracecomm.engine.steps import LaunchNames, is_named
from tracecomm.ingest.model import RankEvents

TOP_KERNELS = 10  # per class
TOP_ROWS = 10  # starving ops, graph ops, op shapes
SHORT_KERNEL_NS = 10_000  # a kernel this short cannot hide its own launch (≈ 5–10 µs)
BUCKETS_NS = (1_000, 10_000, 100_000, 1_000_000)
_CLASS_ORDER = {"compute": 0, "comm": 1, "memory": 2}
_WORK_COLUMNS = (
    "cls",
    "coll_type",
    "name",
    "step",
    "start_ns",
    "end_ns",
    "launch_ns",
    "launch_corr",
    "graph_via",
)


def lower_median(column: str) -> pl.Expr:
    """Rank ⌊(n−1)/2⌋ of the sorted values (0-based): a value that occurred."""
    return pl.col(column).sort().get((pl.len() - 1) // 2)


def nearest_rank_p95(column: str) -> pl.Expr:
    """Rank ⌈0.95·n⌉−1 of the sorted values, in integers."""
    return pl.col(column).sort().get((pl.len() * 95 + 99) // 100 - 1)


def kernel_stats(
    rank: RankEvents,
    linked: pl.DataFrame,
    included: Collection[int],
    gaps: pl.DataFrame | None,
    in_capture: pl.Series,
    names: LaunchNames,
    counted: Counted | None = None,
    work: pl.DataFrame | None = None,
) -> KernelStats | None:
    """``linked``: the device frame with launches and steps (``steps.link_launches``);
        ``gaps``: the analysis window's idle gaps (``idle.idle_gaps``); ``in_capture``: per launch,
        made during a graph capture (``steps.captured``); ``work``: ``kernel_work`` of them, when
    already taken. None without an included step."""
    steps = sorted(included)
    if not steps:
        return None
    work = kernel_work(linked, steps) if work is None else work
    return KernelStats(
        steps=len(steps),
        events=work.height,
        groups=_groups(work, len(steps)),
        short=_short(work, len(steps)),
        launches=_launches(rank, work, steps, gaps),
        graphs=_graphs(rank, linked, work, steps, in_capture, names),
        ops=_op_shapes(counted),
    )


def kernel_work(linked: pl.DataFrame, steps: Collection[int]) -> pl.DataFrame:
    """The included steps' device work (no syncs), with its durations (``dur``)."""
    # only the columns the views read: the included steps' rows are most of a trace's kernels
    return (
        linked.lazy()
        .select(_WORK_COLUMNS)
        .filter((pl.col("cls") != "sync") & pl.col("step").is_in(sorted(steps)))
        .with_columns((pl.col("end_ns") - pl.col("start_ns")).alias("dur"))
        .collect(engine="in-memory")  # as every lazy plan of the engine (partition.py)
    )


def kernel_steps(work: pl.DataFrame) -> tuple[KernelStep, ...]:
    """Every kernel name of every included step (``kernel_work``): its calls, summed time, the
    part of it exposed (its share of the step's partition, §3: compute hides communication,
    both hide memory; concurrent kernels of one class share) and the position of its first
    call among the step's names (metrics.md §18)."""
    if work.height == 0:
        return ()
    cls = work["cls"].to_numpy()  # numpy, not a query: a rank's queries are counted
    exposed = exposed_shares(
        work["start_ns"].to_numpy(),
        work["end_ns"].to_numpy(),
        np.select([cls == c for c in _CLASS_ORDER], list(_CLASS_ORDER.values()), len(_CLASS_ORDER)),
        len(_CLASS_ORDER),
    )
    per = (
        work.lazy()
        .with_columns(
            pl.when(pl.col("cls") == "comm").then(pl.col("coll_type")).alias("coll_type"),
            pl.Series("exposed", exposed),
            # grouped by a code, not the text: a key of several columns is encoded row by
            # row, and kernel names are long (a 2 GB rank: 1.4 M rows, +150 MiB at the peak)
            pl.col("name").cast(pl.Categorical),
        )
        .group_by("step", "cls", "coll_type", "name")
        .agg(
            pl.len().alias("calls"),
            pl.col("dur").sum().alias("time_ns"),
            pl.col("exposed").sum().round().cast(pl.Int64).alias("exposed_ns"),
            pl.col("start_ns").min().alias("first"),
        )
        .with_columns(pl.col("name").cast(pl.String))
        .sort(["step", "first", "name"])
        .with_columns(
            pl.int_range(pl.len()).over("step").alias("order"),
            pl.min_horizontal("exposed_ns", "time_ns").alias("exposed_ns"),
        )
        # the fields in their order, as tuples: a dict per row cost more than the query
        .select(KernelStep.__struct_fields__)
        .collect(engine="in-memory")
    )
    return tuple(KernelStep(*row) for row in per.iter_rows())


def _groups(work: pl.DataFrame, steps: int) -> tuple[KernelGroup, ...]:
    keyed = work.with_columns(
        pl.when(pl.col("cls") == "comm").then(pl.col("coll_type")).alias("coll_type")
    )
    per_name = _per_name(keyed)
    totals = per_name.group_by("cls", "coll_type").agg(
        pl.col("count").sum().alias("events"),
        pl.len().alias("names"),
        pl.col("total_ns").sum().alias("group_ns"),
    )
    type_order = {t: i for i, t in enumerate(COLL_TYPES)}
    groups = sorted(
        totals.iter_rows(named=True),
        key=lambda g: (_CLASS_ORDER.get(g["cls"], 9), type_order.get(g["coll_type"], 99)),
    )
    # every group's top names from one sort (the head of each group keeps the sorted order)
    top: dict[tuple[str, str | None], list[dict[str, Any]]] = {}
    ranked = (
        per_name.sort(["total_ns", "name"], descending=[True, False])
        .group_by("cls", "coll_type", maintain_order=True)
        .head(TOP_KERNELS)
    )
    for row in ranked.iter_rows(named=True):
        top.setdefault((row["cls"], row["coll_type"]), []).append(row)
    out = []
    for g in groups:
        rows = top.get((g["cls"], g["coll_type"]), [])
        out.append(
            KernelGroup(
                cls=g["cls"],
                coll_type=g["coll_type"],
                events=int(g["events"]),
                names=int(g["names"]),
                total_ns=int(g["group_ns"]),
                top=tuple(
                    KernelRow(
                        name=r["name"],
                        count=int(r["count"]),
                        total_ns=int(r["total_ns"]),
                        median_ns=int(r["median_ns"]),
                        p95_ns=int(r["p95_ns"]),
                        max_ns=int(r["max_ns"]),
                        share_pct=100.0 * r["total_ns"] / g["group_ns"] if g["group_ns"] else None,
                        count_per_step=r["count"] / steps,
                        ns_per_step=r["total_ns"] / steps,
                    )
                    for r in rows
                ),
            )
        )
    return tuple(out)


def _per_name(keyed: pl.DataFrame) -> pl.DataFrame:
    """Count, sum, median, p95 and max of the durations per (class, type, name). Grouped on a
    hash of the name (half the time of grouping on the text); a group whose names differ (two
    names with one hash) sends the whole table to the text grouping."""
    aggs = (
        pl.len().alias("count"),
        pl.col("dur").sum().alias("total_ns"),
        lower_median("dur").alias("median_ns"),
        nearest_rank_p95("dur").alias("p95_ns"),
        pl.col("dur").max().alias("max_ns"),
    )
    hashed = (
        keyed.lazy()
        .with_columns(pl.col("name").hash().alias("_h"))
        .group_by("cls", "coll_type", "_h")
        .agg(pl.col("name").min(), pl.col("name").max().alias("_other"), *aggs)
        .collect(engine="in-memory")
    )
    if (hashed["name"] == hashed["_other"]).all():
        return hashed.drop("_h", "_other")
    return keyed.group_by("cls", "coll_type", "name").agg(*aggs)


def _short(work: pl.DataFrame, steps: int) -> ShortKernels:
    kernels = work.lazy().select("cls", "dur").filter(pl.col("cls").is_in(["compute", "comm"]))
    bounds = pl.lit(None, pl.Int64)
    for limit in reversed(BUCKETS_NS):
        bounds = pl.when(pl.col("dur") < limit).then(pl.lit(limit)).otherwise(bounds)
    is_short = pl.col("dur") < SHORT_KERNEL_NS
    buckets, totals = pl.collect_all(  # one query for both
        [
            kernels.group_by(bounds.alias("b")).agg(pl.len(), pl.col("dur").sum()),
            kernels.select(
                is_short.sum().alias("short"),
                pl.col("dur").filter(is_short).sum().alias("short_ns"),
                pl.len().alias("all"),
                pl.col("dur").sum().alias("all_ns"),
            ),
        ],
        engine="in-memory",
    )
    per_bucket = {b: (n, ns) for b, n, ns in buckets.iter_rows()}
    short, short_ns, all_kernels, all_ns = totals.row(0)
    return ShortKernels(
        threshold_ns=SHORT_KERNEL_NS,
        kernels=int(short),
        total_ns=int(short_ns),
        all_kernels=int(all_kernels),
        all_ns=int(all_ns),
        per_step=int(short) / steps,
        buckets=tuple(
            DurationBucket(b, int(per_bucket.get(b, (0, 0))[0]), int(per_bucket.get(b, (0, 0))[1]))
            for b in (*BUCKETS_NS, None)
        ),
    )


def _launches(
    rank: RankEvents, work: pl.DataFrame, steps: list[int], gaps: pl.DataFrame | None
) -> LaunchStats:
    """A kernel launch of an included step is a runtime call whose kernels ran in it (a
    complete step lost none; a graph launch counts once, a captured launch ran nothing)."""
    kernel = pl.col("cls").is_in(["compute", "comm"]) & pl.col("launch_corr").is_not_null()
    calls = (  # the columns first: a filter copies every column it is given
        work.lazy()
        .select("cls", "step", "launch_corr", "graph_via")
        .filter(kernel | pl.col("graph_via").is_not_null())
        .select("step", "launch_corr", pl.col("graph_via").is_not_null().alias("graph"))
    )
    by_step, graphs, direct = pl.collect_all(  # one query
        [
            # a launch belongs to one step (the one its call lies in): distinct calls per step
            calls.group_by("step").agg(pl.col("launch_corr").n_unique().alias("n")),
            calls.filter(pl.col("graph")).select(pl.col("launch_corr").n_unique()),
            work.lazy()
            .select("start_ns", "launch_ns", "graph_via")
            .filter(pl.col("launch_ns").is_not_null() & pl.col("graph_via").is_null()),
        ],
        engine="in-memory",
    )
    per_step = dict(by_step.iter_rows())
    counts = sorted(per_step.get(s, 0) for s in steps)
    graph_calls = int(graphs.item())
    delays = np.sort(np.maximum(direct["start_ns"].to_numpy() - direct["launch_ns"].to_numpy(), 0))
    n = delays.size
    stats = (
        (int(delays[(n - 1) // 2]), int(delays[(n * 95 + 99) // 100 - 1]), int(delays[-1]))
        if n
        else (None, None, None)
    )
    bound = gaps.filter(pl.col("cause") == "host_bound") if gaps is not None else None
    return LaunchStats(
        launches=sum(counts),
        per_step_median=counts[(len(counts) - 1) // 2],
        graph_launches=graph_calls,
        delayed=n,
        delay_median_ns=None if stats[0] is None else int(stats[0]),
        delay_p95_ns=None if stats[1] is None else int(stats[1]),
        delay_max_ns=None if stats[2] is None else int(stats[2]),
        host_bound_ns=int((bound["g1"] - bound["g0"]).sum()) if bound is not None else 0,
        starving=_starving(rank, bound) if bound is not None else (),
    )


def _starving(rank: RankEvents, bound: pl.DataFrame) -> tuple[StarvingOp, ...]:
    """The ops whose launches ended host-bound gaps: the GPU waited for them."""
    if bound.height == 0:
        return ()
    enders = bound.lazy().select(pl.col("ender_corr").alias("correlation")).drop_nulls()
    ops = (
        rank.launches.lazy()
        .join(enders.unique(), on="correlation", how="semi")
        .unique("correlation", keep="any")
    )
    joined = (
        bound.lazy()
        .join(
            ops.select(pl.col("correlation").alias("ender_corr"), "op"),
            on="ender_corr",
            how="left",
        )
        .with_columns((pl.col("g1") - pl.col("g0")).alias("gap"))
    )
    rows = (  # one plan, collected once
        joined.group_by("op")
        .agg(
            pl.len().alias("gaps"),
            pl.col("gap").sum().alias("starved_ns"),
            # the kernel ending most of its gaps (ties: the first name)
            pl.col("ender").drop_nulls().mode().sort().first().alias("kernel"),
        )
        .sort(["starved_ns", "op"], descending=[True, False], nulls_last=True)
        .head(TOP_ROWS)
        .collect(engine="in-memory")
    )
    return tuple(
        StarvingOp(op, int(n), int(ns), kernel or "") for op, n, ns, kernel in rows.iter_rows()
    )


def _graphs(
    rank: RankEvents,
    linked: pl.DataFrame,
    work: pl.DataFrame,
    steps: list[int],
    in_capture: pl.Series,
    names: LaunchNames,
) -> GraphStats | None:
    with_ids = (
        linked.filter(pl.col("graph_id").is_not_null()) if "graph_id" in linked.columns else None
    )
    captures = (
        rank.launches.filter(pl.col("name").is_in(list(names.capture_begin))).height
        if names.capture_begin
        else 0
    )
    if not names.graph and not captures and (with_ids is None or with_ids.height == 0):
        return None
    replayed = work.filter(pl.col("graph_via").is_not_null())
    by_method = dict(replayed.group_by("graph_via").len().sort("graph_via").iter_rows())
    op_of = rank.launches.filter(
        pl.col("correlation").is_in(replayed["launch_corr"].drop_nulls().unique().implode())
    ).unique("correlation", keep="any")
    per_op = (
        replayed.join(
            op_of.select(pl.col("correlation").alias("launch_corr"), "op"),
            on="launch_corr",
            how="left",
        )
        .group_by("op")
        .agg(
            pl.col("launch_corr").n_unique().alias("launches"),
            pl.len().alias("kernels"),
            pl.col("dur").sum().alias("kernel_ns"),
        )
        .sort(["kernel_ns", "op"], descending=[True, False], nulls_last=True)
        .head(TOP_ROWS)
    )
    kernel_calls = rank.launches.filter(in_capture & is_named(names.device_launch))
    unattributed = (
        with_ids.filter(pl.col("launch_ns").is_null()).height if with_ids is not None else 0
    )
    return GraphStats(
        graph_launches=replayed["launch_corr"].n_unique() if replayed.height else 0,
        replayed=replayed.height,
        replayed_ns=int(replayed["dur"].sum()),
        by_method={str(k): int(v) for k, v in by_method.items()},
        unattributed=unattributed,
        captured_launches=kernel_calls.height,
        captures=captures,
        ops=tuple(GraphOp(op, int(n), int(k), int(ns)) for op, n, k, ns in per_op.iter_rows()),
    )


def _op_shapes(counted: Counted | None) -> tuple[OpShape, ...]:
    if counted is None or counted.ops.height == 0:
        return ()
    known = counted.ops.filter(pl.col("bytes").is_not_null() & pl.col("dtype").is_not_null())
    rows = (
        known.group_by("name", "family", "dtype", "input_dims")
        .agg(
            pl.len().alias("count"),
            pl.col("flops").sum(),
            pl.col("bytes").sum(),
            pl.col("kernel_ns").sum(),
        )
        .sort(["kernel_ns", "name", "input_dims"], descending=[True, False, False])
        .head(TOP_ROWS)
    )
    return tuple(
        OpShape(
            op=r["name"],
            family=r["family"],
            dtype=r["dtype"],
            shapes=r["input_dims"],
            count=int(r["count"]),
            flops=int(r["flops"]),
            bytes=int(r["bytes"]),
            kernel_ns=int(r["kernel_ns"]),
        )
        for r in rows.iter_rows(named=True)
    )
