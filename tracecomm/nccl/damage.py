"""COLL records whose sizes cannot be (nccl-logs.md §8): a record damaged on its way to the
log (torn by another process's write in a way the parser could not see, cut, edited) must not
be counted as a collective, nor its size read as traffic.

Two checks, each on what one record says against what cannot be:

- its buffer is larger than any device can hold: ``count`` × the datatype's size (× nranks
  where NCCL's count is per rank, §8's table) past :data:`DEVICE_BYTES`;
- its ``count`` appears in no other process's record of the same collective: the same
  communicator (its commId through the process's Init line, else its size), operation and
  opCount. Every rank of a collective passes NCCL the same count, so a count only one
  process has, where at least :data:`MIN_PEERS` processes logged the collective, is damage.
  Point-to-point operations move what each pair agrees on: they are not compared.
"""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

from tracecomm.nccl.model import CommInit

# Bytes per element of ncclDataType_t (nccl-logs.md §9); an unknown type counts 1 byte, the
# least a future type can have, so that it is never called damaged for its type alone.
DATATYPE_BYTES = {0: 1, 1: 1, 2: 4, 3: 4, 4: 8, 5: 8, 6: 2, 7: 4, 8: 8, 9: 2, 10: 1, 11: 1}
# The most memory one accelerator holds (B300 and MI355X: 288 GB): a buffer past it cannot be.
DEVICE_BYTES = 288 * 10**9
# Operations whose count is per rank: their larger buffer is count × size × nranks.
PER_RANK_OPS = ("AllGather", "ReduceScatter", "AlltoAll", "Gather", "Scatter")
POINT_TO_POINT = ("Send", "Recv", "PutSignal", "Signal", "WaitSignal")
# Processes that must have logged a collective before a count only one of them has is damage:
# with two, either could be the damaged one.
MIN_PEERS = 3


def count_damaged(colls: pl.DataFrame, inits: Sequence[CommInit]) -> int:
    """How many rows of ``colls`` (COLL_SCHEMA) are damaged records. Counted by groups, never
    by a mask over the rows: a log's COLL records can be millions."""
    frame = colls.lazy().select(
        "host", "pid", "comm", "op", "op_count", "count", "datatype", "nranks"
    )
    ids = _comm_ids(inits)
    if ids.height:
        frame = frame.join(ids.lazy(), on=["host", "pid", "comm"], how="left")
    else:
        frame = frame.with_columns(comm_id=pl.lit(None, dtype=pl.String))
    frame = frame.with_columns(
        too_large=_too_large(),
        # one number per process: host and pid hashed together (a collision merges two)
        proc=pl.col("host").hash(seed=1) ^ pl.col("pid").hash(seed=2),
    )
    large = frame.select(pl.col("too_large").sum()).collect().item()
    return int(large) + _counts_alone(frame.filter(~pl.col("too_large")))


def too_large_count(colls: pl.DataFrame) -> int:
    """How many rows of ``colls`` hold a buffer past any device's memory."""
    if colls.height == 0:
        return 0
    return int(colls.select(_too_large().sum()).item() or 0)


def _comm_ids(inits: Sequence[CommInit]) -> pl.DataFrame:
    """Each process's comm pointer -> the communicator's commId (the same on every rank)."""
    rows = {(i.host, i.pid, i.comm): i.comm_id for i in inits if i.comm_id}
    return pl.DataFrame(
        [(*key, comm_id) for key, comm_id in rows.items()],
        schema={"host": pl.String, "pid": pl.Int64, "comm": pl.String, "comm_id": pl.String},
        orient="row",
    )


def _too_large() -> pl.Expr:
    size = pl.col("datatype").replace_strict(DATATYPE_BYTES, default=1, return_dtype=pl.Float64)
    ranks = pl.when(pl.col("op").is_in(PER_RANK_OPS)).then(pl.col("nranks")).otherwise(1)
    # as floats: count × size × nranks of a hostile line overflows 64-bit integers
    return pl.col("count").cast(pl.Float64) * size * ranks.cast(pl.Float64) > DEVICE_BYTES


def _counts_alone(frame: pl.LazyFrame) -> int:
    """Records whose count no other process of the collective has, where MIN_PEERS or more
    processes logged the collective (comm, op, opCount)."""
    collective = ["comm_id", "nranks", "op", "op_count"]
    frame = frame.filter(~pl.col("op").is_in(POINT_TO_POINT))
    peers = frame.group_by(collective).agg(peers=pl.col("proc").n_unique())
    counts = frame.group_by([*collective, "count"]).agg(
        sharing=pl.col("proc").n_unique(), records=pl.len()
    )
    alone = counts.join(peers, on=collective, how="inner", nulls_equal=True).filter(
        (pl.col("peers") >= MIN_PEERS) & (pl.col("sharing") == 1)
    )
    return int(alone.select(pl.col("records").sum()).collect().item() or 0)
