"""One rank's collective instances: what cross-rank matching needs (metrics.md §4), no more."""

from __future__ import annotations

import numpy as np
import polars as pl

WORLD = "world"

INSTANCE_SCHEMA: dict[str, pl.DataType] = {
    "pg": pl.String(),
    "seq": pl.Int64(),
    "coll_type": pl.String(),
    "ordinal": pl.Int64(),
    "start_ns": pl.Int64(),
    "end_ns": pl.Int64(),
    "nelems": pl.Int64(),
    "pg_ranks": pl.String(),
    "step": pl.Int64(),
    "direction": pl.String(),  # "send" / "recv" for point-to-point kernels, else null
    "peer": pl.Int64(),  # the other rank of a send / recv (Dst Rank / Src Rank)
    "p2p_ordinal": pl.Int64(),  # among this rank's sends to (recvs from) that peer, in order
    "bytes": pl.Int64(),  # nccl-tests' S (metrics.md §7), when the trace carries sizes
    "group_size": pl.Int64(),
    # GPU idle right before the kernel (metrics.md §6 arrivals): from the end of the rank's
    # previous device work to the kernel's start, within its step; 0 when work runs at its start
    "idle_before_ns": pl.Int64(),
}

# c10 scalar type -> bytes per element (kineto-traces.md §12)
DTYPE_BYTES = {
    "Float": 4,
    "Int": 4,
    "BFloat16": 2,
    "Half": 2,
    "Double": 8,
    "Long": 8,
    "Byte": 1,
    "Char": 1,
    "Bool": 1,
    "Float8_e4m3fn": 1,
    "Float8_e5m2": 1,
}


def collective_instances(linked: pl.DataFrame, work: pl.DataFrame | None = None) -> pl.DataFrame:
    """Comm kernels keyed for matching: process group (``Process Group Name``, else its rank
    list, else "world"), ``Seq`` when the trace has it, and the ordinal among the group's ops of
    the same type in launch order. ``work``: every device event of the rank (start_ns, end_ns,
    step), for the idle time before each kernel; without it that idle time is 0."""
    comm = linked.filter(pl.col("cls") == "comm")
    if comm.height == 0:
        return pl.DataFrame(schema=INSTANCE_SCHEMA)
    comm = comm.with_columns(pl.Series("idle_before_ns", idle_before(comm, work)))
    launch_order = pl.coalesce("launch_ns", "start_ns")
    name = pl.col("collective_name").str.to_lowercase()
    direction = (
        pl.when(name == "send").then(pl.lit("send")).when(name == "recv").then(pl.lit("recv"))
    )
    peer = (
        pl.when(name == "send")
        .then(pl.col("dst_rank"))
        .when(name == "recv")
        .then(pl.col("src_rank"))
    )
    return (
        comm.with_columns(
            pl.coalesce("pg_name", "pg_ranks", pl.lit(WORLD)).alias("pg"),
            pl.coalesce("in_msg_nelems", "in_msg_size").alias("nelems"),
            direction.alias("direction"),
            peer.alias("peer"),
            message_bytes().alias("bytes"),
        )
        .sort(launch_order, "start_ns")
        .with_columns(
            pl.int_range(pl.len()).over("pg", "coll_type").alias("ordinal"),
            pl.int_range(pl.len()).over("pg", "direction", "peer").alias("p2p_ordinal"),
        )
        .select(list(INSTANCE_SCHEMA))
        .cast(INSTANCE_SCHEMA)  # type: ignore[arg-type]
    )


def idle_before(kernels: pl.DataFrame, work: pl.DataFrame | None) -> np.ndarray:
    """Per kernel: how long the GPU sat idle (no device work on any stream) right before it
    started, not reaching back before the first device event of its step. A wait that happens
    before a kernel instead of inside it (the CPU held the launch until a peer was ready) shows
    as such a gap; metrics.md §6 decides, across ranks, whether it was one."""
    starts = kernels["start_ns"].to_numpy().astype(np.int64)
    if work is None or work.height == 0:
        return np.zeros(len(starts), dtype=np.int64)
    order = work.sort("start_ns")
    run_starts, run_ends = _busy_runs(
        order["start_ns"].to_numpy().astype(np.int64), order["end_ns"].to_numpy().astype(np.int64)
    )
    run = np.searchsorted(run_starts, starts, side="right") - 1
    begins_run = (run > 0) & (run_starts[np.maximum(run, 0)] == starts)
    gap = np.where(begins_run, starts - run_ends[np.maximum(run - 1, 0)], 0)
    first = (
        work.filter(pl.col("step").is_not_null())
        .group_by("step")
        .agg(pl.col("start_ns").min().alias("step_start"))
    )
    step_start = (
        kernels.select("step", "start_ns")
        .join(first, on="step", how="left", maintain_order="left")
        .select(pl.coalesce("step_start", "start_ns"))
        .to_series()
        .to_numpy()
        .astype(np.int64)
    )
    return np.maximum(0, np.minimum(gap, starts - step_start))


def _busy_runs(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Maximal runs of overlapping or touching intervals (sorted by start): their starts, ends."""
    reach = np.maximum.accumulate(ends)
    new_run = np.r_[True, starts[1:] > reach[:-1]]
    heads = np.flatnonzero(new_run)
    return starts[heads], np.maximum.reduceat(ends, heads)


def message_bytes() -> pl.Expr:
    """nccl-tests' S from the kernel's element counts: the output for AllGather, the input for
    ReduceScatter, the larger of the two for AllToAll, else the input (metrics.md §7)."""
    size = pl.col("dtype").replace_strict(DTYPE_BYTES, default=None, return_dtype=pl.Int64)
    elems_in = pl.coalesce("in_msg_nelems", "in_msg_size")
    elems_out = pl.coalesce("out_msg_nelems", "out_msg_size")
    elems = (
        pl.when(pl.col("coll_type") == "AllGather")
        .then(elems_out)
        .when(pl.col("coll_type") == "AllToAll")
        .then(pl.max_horizontal(elems_in, elems_out))
        .otherwise(elems_in)
    )
    return elems * size
