"""Bandwidth per collective (metrics.md §7): algbw = bytes / transfer, busbw = algbw · f(n),
and the kernel-duration variant that keeps the waiting in (``busbw_incl_wait``)."""

from __future__ import annotations

from typing import Annotated

import numpy as np
import polars as pl
from msgspec import Meta

from tracecomm.doc import Doc

# message-size buckets (bytes), nccl-tests style powers of two; a bucket is [low, next low)
BUCKETS = (0, 64 << 10, 1 << 20, 16 << 20, 256 << 20)
_BUCKET_NAMES = ("< 64 KiB", "64 KiB–1 MiB", "1–16 MiB", "16–256 MiB", "≥ 256 MiB")


class BandwidthRow(Doc, frozen=True):
    """One collective type and message-size bucket, over the matched instances."""

    coll_type: str
    size_bucket: str
    instances: int
    bytes_median: int
    algbw_gbps: Annotated[
        float,
        Meta(
            description=(
                "GB/s (10^9 bytes), median: bytes / transfer (earliest end − latest start)"
            )
        ),
    ]
    busbw_gbps: float
    busbw_incl_wait_gbps: Annotated[
        float, Meta(description="with each rank's whole kernel duration (waiting included)")
    ]
    below_link_pct: Annotated[
        float | None, Meta(description="share of instances whose busbw is under --link-gbps")
    ]


class Bandwidth(Doc, frozen=True):
    rows: tuple[BandwidthRow, ...]
    measured: int  # instances with a size and a positive transfer time
    without_size: int  # matched instances whose trace carries no message size
    link_gbps: float | None  # the link bandwidth given, in Gbit/s


# nccl-tests' bus bandwidth factor (metrics.md §7): a ring collective moves this many times
# (n − 1) / n of its message over each rank's link; every other type (Broadcast, Reduce,
# SendRecv) moves its message once. The one table for the bandwidth and the projection.
RING_FACTOR = {"AllReduce": 2.0, "AllGather": 1.0, "ReduceScatter": 1.0, "AllToAll": 1.0}


def bus_factor(coll_type: pl.Expr, n: pl.Expr) -> pl.Expr:
    """RING_FACTOR as a polars expression over a type column and a group-size column."""
    ring = coll_type.replace_strict(RING_FACTOR, default=None, return_dtype=pl.Float64)
    return pl.when(ring.is_not_null()).then(ring * (n - 1) / n).otherwise(1.0)


def bus_factor_of(coll_type: str, n: np.ndarray) -> np.ndarray:
    """RING_FACTOR for one type over an array of group sizes."""
    n = n.astype(np.float64)
    ring = RING_FACTOR.get(coll_type)
    return ring * (n - 1) / n if ring is not None else np.ones_like(n)


def size_bucket(nbytes: pl.Expr) -> tuple[pl.Expr, pl.Expr]:
    """The bucket of a message size: its order (0 = smallest) and its name."""
    order = pl.sum_horizontal([(nbytes >= b).cast(pl.Int64) for b in BUCKETS[1:]])
    return order, order.replace_strict(dict(enumerate(_BUCKET_NAMES)), return_dtype=pl.String)


def instance_transfers(aligned: pl.DataFrame) -> pl.DataFrame:
    """Per matched instance: coll_type, bytes, group size n, transfer (metrics.md §6: the part
    every rank spent moving data) and the ranks' mean kernel duration."""
    per = aligned.group_by("pg", "key", "coll_type").agg(
        pl.col("bytes").drop_nulls().max().alias("bytes"),
        pl.coalesce(pl.col("group_size").drop_nulls().max(), pl.len()).alias("n"),
        (pl.col("end_ns").min() - pl.col("start_ns").max()).alias("transfer"),
        (pl.col("end_ns") - pl.col("start_ns")).mean().alias("duration"),
    )
    # group_by hands groups back in any order: sorted, every fit sums in one fixed order
    return per.sort("pg", "key")


def bandwidth(aligned: pl.DataFrame, link_gbps: float | None = None) -> Bandwidth | None:
    """``aligned``: matched instances per rank on one clock, with ``bytes`` and ``group_size``."""
    if aligned.height == 0 or "bytes" not in aligned.columns:
        return None
    per = instance_transfers(aligned)
    without_size = per.filter(pl.col("bytes").is_null()).height
    sized = per.filter(pl.col("bytes").is_not_null() & (pl.col("transfer") > 0))
    if sized.height == 0:
        return Bandwidth((), 0, without_size, link_gbps)
    f = bus_factor(pl.col("coll_type"), pl.col("n").cast(pl.Float64))
    order, bucket = size_bucket(pl.col("bytes"))
    measured = sized.with_columns(
        (pl.col("bytes") / pl.col("transfer")).alias("algbw"),  # bytes per ns = GB/s
        (pl.col("bytes") / pl.col("transfer") * f).alias("busbw"),
        (pl.col("bytes") / pl.col("duration") * f).alias("busbw_wait"),
        order.alias("order"),
        bucket.alias("bucket"),
    )
    below = (
        (pl.col("busbw") < link_gbps / 8).mean() * 100
        if link_gbps is not None
        else pl.lit(None, dtype=pl.Float64)
    )
    rows = (
        measured.group_by("coll_type", "bucket", "order")
        .agg(
            pl.len().alias("instances"),
            pl.col("bytes").median().alias("bytes_median"),
            pl.col("algbw").median(),
            pl.col("busbw").median(),
            pl.col("busbw_wait").median(),
            below.alias("below"),
        )
        .sort("coll_type", "order")
    )
    return Bandwidth(
        rows=tuple(
            BandwidthRow(
                coll_type=r["coll_type"],
                size_bucket=r["bucket"],
                instances=r["instances"],
                bytes_median=round(r["bytes_median"]),
                algbw_gbps=r["algbw"],
                busbw_gbps=r["busbw"],
                busbw_incl_wait_gbps=r["busbw_wait"],
                below_link_pct=r["below"],
            )
            for r in rows.iter_rows(named=True)
        ),
        measured=measured.height,
        without_size=without_size,
        link_gbps=link_gbps,
    )
