"""The sweep a rank's figures are measured on (metrics.md §3): one coverage of its device work
labelled compute, comm, memory, then each collective type present. The partition measures its
windows on it and the export finds its idle gaps on the same one."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import polars as pl

from tracecomm.engine.intervals import Coverage, coverage

COMPUTE, COMM, MEMORY = 0, 1, 2
FIRST_TYPE = 3  # the label of the first collective type of ``types``


def work_coverage(work: pl.DataFrame, types: Sequence[str]) -> Coverage:
    """The sweep the figures are measured on: labels compute, comm, memory, then each
    collective type of ``types`` (the export's idle gaps use the same one)."""
    return _sweep(work, types)


def _sweep(work: pl.DataFrame, types: Sequence[str]) -> Coverage:
    """One sweep over compute, comm, memory and each collective type present."""
    label_of_cls = {"compute": COMPUTE, "comm": COMM, "memory": MEMORY}
    base = work.select(
        "start_ns",
        "end_ns",
        pl.col("cls").replace_strict(label_of_cls, return_dtype=pl.Int64).alias("label"),
    )
    per_type = work.select("cls", "start_ns", "end_ns", "coll_type").filter(pl.col("cls") == "comm")
    per_type = per_type.select(
        "start_ns",
        "end_ns",
        pl.col("coll_type")
        .replace_strict({t: FIRST_TYPE + i for i, t in enumerate(types)}, default=None)
        .cast(pl.Int64)
        .alias("label"),
    )
    both = pl.concat([base, per_type])
    return coverage(
        np.asarray(both["start_ns"].to_numpy(), dtype=np.int64),
        np.asarray(both["end_ns"].to_numpy(), dtype=np.int64),
        np.asarray(both["label"].to_numpy(), dtype=np.int64),
        FIRST_TYPE + len(types),
    )
