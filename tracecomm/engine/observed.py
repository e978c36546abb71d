"""Observed FLOPs (mfu.md §8): matmul / conv / attention ops with recorded shapes, their FLOPs
and the time their kernels ran. A lower bound on the FLOPs the GPU executed (HFU side)."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any, NamedTuple

import msgspec
import polars as pl

from tracecomm.engine.model import ObservedFlops
from tracecomm.mfu.opflops import op_bytes, op_flops


def observed_flops(
    shaped_ops: pl.DataFrame,
    linked: pl.DataFrame,
    included: Collection[int],
    counted: Counted | None = None,
) -> ObservedFlops | None:
    """``linked``: device work with ``launch_ns`` / ``launch_tid`` / ``step``; only kernels of the
    included steps count. None when the trace recorded no shapes. ``counted``: what
    ``counted_ops`` returned for the same arguments."""
    if shaped_ops.height == 0:
        return None
    counted_, kernels, recognized = counted or counted_ops(shaped_ops, linked, included)
    by_family = dict(counted_.group_by("family").agg(pl.col("flops").sum()).iter_rows())
    unknown = counted_.filter((pl.col("family") == "attention") & pl.col("causal").is_null())
    return ObservedFlops(
        flops=int(counted_["flops"].sum()),
        kernel_ns=int(counted_["kernel_ns"].sum()),
        compute_kernel_ns=int(kernels["dur"].sum()),
        ops=counted_.height,
        by_family={str(k): int(v) for k, v in sorted(by_family.items())},
        attention_causal_unknown_flops=int(unknown["flops"].sum()),
        unrecognized_ops=shaped_ops.height - recognized,
    )


class Counted(NamedTuple):
    """Each outermost recognized op whose kernels ran in the included steps, with its
    ``flops``, ``family``, ``causal``, ``bytes``, ``dtype`` and ``kernel_ns``; the included
    compute kernels with ``dur``; how many of the shaped ops fit a formula."""

    ops: pl.DataFrame
    kernels: pl.DataFrame
    recognized: int


def counted_ops(
    shaped_ops: pl.DataFrame, linked: pl.DataFrame, included: Collection[int]
) -> Counted:
    """The recorded ops' FLOPs and bytes, and their kernels' time (``Counted``): one plan for
    both frames, collected together."""
    recognized = _with_flops(shaped_ops)
    ops = _outermost(recognized.lazy())
    kernels = (
        linked.lazy()
        .filter((pl.col("cls") == "compute") & pl.col("step").is_in(list(included)))
        .with_columns((pl.col("end_ns") - pl.col("start_ns")).alias("dur"))
    )
    launched = (
        kernels.filter(pl.col("launch_ns").is_not_null())
        .sort("launch_ns")
        .join_asof(
            ops.sort("start_ns").select(
                pl.col("tid").alias("launch_tid"),
                pl.col("start_ns").alias("op_start"),
                pl.col("end_ns").alias("op_end"),
                "op",
            ),
            left_on="launch_ns",
            right_on="op_start",
            by="launch_tid",
            strategy="backward",
            check_sortedness=False,  # sorted as a whole, hence within each thread
        )
        .filter(pl.col("op").is_not_null() & (pl.col("launch_ns") < pl.col("op_end")))
    )
    counted = ops.join(launched.group_by("op").agg(pl.col("dur").sum().alias("kernel_ns")), on="op")
    counted_ops_, included_kernels = pl.collect_all([counted, kernels], engine="in-memory")
    return Counted(counted_ops_, included_kernels, recognized.height)


def _with_flops(shaped_ops: pl.DataFrame) -> pl.DataFrame:
    """FLOPs per op from its shapes; ops whose shapes do not fit a formula are dropped."""
    rows = []
    columns = ["name", "input_dims", "concrete_inputs"]
    typed = "input_types" in shaped_ops.columns
    # a training loop repeats its shapes: each distinct op is worked out once
    known: dict[tuple[str | None, ...], tuple[Any, ...] | None] = {}
    for i, key in enumerate(
        shaped_ops.select(*columns, *(["input_types"] if typed else [])).iter_rows()
    ):
        if key not in known:
            known[key] = _op_figures(*key)
        found = known[key]
        if found is not None:
            rows.append((i, *found))
    counted = pl.DataFrame(
        rows,
        schema={
            "op": pl.UInt32,
            "flops": pl.Int64,
            "family": pl.String,
            "causal": pl.Boolean,
            "bytes": pl.Int64,
            "dtype": pl.String,
        },
        orient="row",
    )
    return shaped_ops.with_row_index("op").join(counted, on="op")


def _op_figures(
    name: str, dims_text: str, concrete_text: str | None, types_text: str | None = None
) -> tuple[Any, ...] | None:
    """(flops, family, causal, bytes, dtype) of one op's recorded shapes; None when they do
    not fit a formula."""
    decode = msgspec.json.decode
    dims = decode(dims_text)
    concrete = decode(concrete_text) if concrete_text else None
    found = op_flops(name, dims, concrete)
    if found is None:
        return None
    types = decode(types_text) if types_text else None
    moved = op_bytes(name, dims, types, concrete) if types else None
    return (*found, *(moved or (None, None)))


def _outermost(ops: pl.LazyFrame) -> pl.LazyFrame:
    """Drop ops nested in another counted op on the same thread (SDPA calls the flash op,
    ``matmul`` calls ``mm``): each kernel's FLOPs count once, at the outer op."""
    ordered = ops.sort("tid", "start_ns", pl.col("end_ns"), descending=[False, False, True])
    reach = pl.col("end_ns").cum_max().shift(1).over("tid")
    return ordered.filter(reach.is_null() | (pl.col("start_ns") >= reach))
