"""One rank's collective instances: what cross-rank matching needs (metrics.md §4), no more."""

from __future__ import annotations

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
}


def collective_instances(linked: pl.DataFrame) -> pl.DataFrame:
    """Comm kernels keyed for matching: process group (``Process Group Name``, else its rank
    list, else "world"), ``Seq`` when the trace has it, and the ordinal among the group's ops of
    the same type in launch order."""
    comm = linked.filter(pl.col("cls") == "comm")
    if comm.height == 0:
        return pl.DataFrame(schema=INSTANCE_SCHEMA)
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
        )
        .sort(launch_order, "start_ns")
        .with_columns(
            pl.int_range(pl.len()).over("pg", "coll_type").alias("ordinal"),
            pl.int_range(pl.len()).over("pg", "direction", "peer").alias("p2p_ordinal"),
        )
        .select(list(INSTANCE_SCHEMA))
        .cast(INSTANCE_SCHEMA)  # type: ignore[arg-type]
    )
