"""The matched collective instances as ``compare`` diffs them (metrics.md §18), per step: for
each collective type, group and size bucket, what its member ranks spent on it and the
instances' sizes and bus bandwidths. Computed once, from the matched instances (§4), and saved
in the Report, so that a saved document compares like the run it analyzed."""

from __future__ import annotations

from typing import Annotated

import polars as pl
from msgspec import Meta

from tracecomm.analysis.bandwidth import bus_factor, size_bucket
from tracecomm.doc import Doc, NonNegative

WORLD_GROUP = "world"


class CollectiveStep(Doc, frozen=True):
    """One collective type, group and size bucket in one step, over its matched instances."""

    step: Annotated[int | None, Meta(description="the profiler step (null: a trace without)")]
    coll_type: str
    group: Annotated[
        str,
        Meta(
            description=(
                '"world" when the process group holds the whole world, else "N-rank groups" '
                "(every group of that size together)"
            )
        ),
    ]
    size_bucket: Annotated[
        str, Meta(description="§7's bucket of nccl-tests' bytes; \"size unknown\" without sizes")
    ]
    ranks: Annotated[
        tuple[NonNegative, ...], Meta(description="the member ranks with an instance of it")
    ]
    kernels: Annotated[
        NonNegative, Meta(description="the member ranks' kernels: one per rank and instance")
    ]
    kernel_ns: Annotated[NonNegative, Meta(description="their durations summed (waiting included)")]
    transfer_ns: Annotated[
        NonNegative,
        Meta(
            description=(
                "each kernel's instance transfer (§6: moving data, clamped at 0) summed over "
                "the kernels"
            )
        ),
    ]
    bytes: Annotated[
        tuple[NonNegative, ...],
        Meta(description="each instance's message size, ascending (none without sizes)"),
    ]
    busbw_gbps: Annotated[
        tuple[float, ...],
        Meta(
            description=(
                "each instance's §7 bus bandwidth (GB/s; a size and a positive transfer), ascending"
            )
        ),
    ]


def collective_rows(aligned: pl.DataFrame, world_size: int | None) -> pl.DataFrame:
    """Each rank's matched instances with what the diff by collective keys and measures: the
    group as it compares across world sizes, the size bucket, the rank's kernel duration and
    the instance's size, group size and transfer time (§6, clamped at 0)."""
    world = world_size or int(aligned["rank"].n_unique())
    per = aligned.group_by("pg", "key").agg(
        pl.coalesce(pl.col("group_size").drop_nulls().max(), pl.col("rank").n_unique()).alias("n"),
        pl.col("bytes").drop_nulls().max().alias("bytes"),
        (pl.col("end_ns").min() - pl.col("start_ns").max()).clip(lower_bound=0).alias("transfer"),
    )
    _, name = size_bucket(pl.col("bytes"))
    return (
        aligned.select(
            "rank",
            "step",
            "pg",
            "key",
            "coll_type",
            (pl.col("end_ns") - pl.col("start_ns")).clip(lower_bound=0).alias("duration_ns"),
        )
        .join(per, on=["pg", "key"], how="left")
        .with_columns(
            pl.when(pl.col("n") >= world)
            .then(pl.lit(WORLD_GROUP))
            .otherwise(pl.format("{}-rank groups", pl.col("n")))
            .alias("group"),
            pl.when(pl.col("bytes").is_null())
            .then(pl.lit("size unknown"))
            .otherwise(name)
            .alias("size_bucket"),
            pl.col("transfer").cast(pl.Int64).alias("transfer_ns"),
            pl.col("bytes").cast(pl.Int64),
        )
    )


_KEYS = ["step", "coll_type", "group", "size_bucket"]


def collective_steps(
    aligned: pl.DataFrame | None, world_size: int | None
) -> tuple[CollectiveStep, ...]:
    """The matched instances (``Matching.aligned``) per step, type, group and size bucket."""
    if aligned is None or aligned.height == 0 or "bytes" not in aligned.columns:
        return ()
    rows = collective_rows(aligned, world_size)
    instances = (
        rows.group_by("pg", "key", *_KEYS)
        .agg(pl.col("bytes").first(), pl.col("n").first(), pl.col("transfer_ns").first())
        .with_columns(
            pl.when((pl.col("transfer_ns") > 0) & pl.col("bytes").is_not_null())
            .then(
                pl.col("bytes")
                / pl.col("transfer_ns")
                * bus_factor(pl.col("coll_type"), pl.col("n").cast(pl.Float64))
            )
            .alias("busbw")
        )
        .group_by(_KEYS)
        .agg(
            pl.col("bytes").drop_nulls().sort().alias("bytes"),
            pl.col("busbw").drop_nulls().sort().alias("busbw"),
        )
    )
    kernels = rows.group_by(_KEYS).agg(
        pl.col("rank").unique().sort().alias("ranks"),
        pl.len().alias("kernels"),
        pl.col("duration_ns").sum().alias("kernel_ns"),
        pl.col("transfer_ns").sum().alias("transfer_ns"),
    )
    table = kernels.join(instances, on=_KEYS, how="left", nulls_equal=True).sort(
        _KEYS, nulls_last=False
    )
    return tuple(
        CollectiveStep(
            step=r["step"],
            coll_type=r["coll_type"],
            group=r["group"],
            size_bucket=r["size_bucket"],
            ranks=tuple(r["ranks"]),
            kernels=r["kernels"],
            kernel_ns=r["kernel_ns"],
            transfer_ns=r["transfer_ns"],
            bytes=tuple(r["bytes"] or ()),
            busbw_gbps=tuple(r["busbw"] or ()),
        )
        for r in table.iter_rows(named=True)
    )
