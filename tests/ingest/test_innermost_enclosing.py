"""``frames.innermost_enclosing`` (a launch's op, its NCCL call, its collective annotation)
against the definition, on random ranges: several threads, shared starts, nulls, negative
times, points inside nothing."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from tracecomm.ingest.frames import innermost_enclosing


def _by_definition(points: pl.DataFrame, ranges: pl.DataFrame) -> dict[int, int]:
    """key -> value of the latest-starting, then shortest, range open on the point's thread."""
    out = {}
    for key, tid, at in points.iter_rows():
        inside = [
            (start, -end, value)
            for r_tid, start, end, value in ranges.iter_rows()
            if None not in (tid, at, r_tid, start, end) and r_tid == tid and start <= at <= end
        ]
        if inside:
            out[key] = max(inside)[2]
    return out


def _case(seed: int) -> tuple[pl.DataFrame, pl.DataFrame]:
    rng = np.random.default_rng(seed)
    n_ranges, n_points, span = (int(v) for v in rng.integers(1, 60, 3))
    ranges = (
        pl.DataFrame(
            {
                "tid": rng.integers(0, 4, n_ranges),
                "start": rng.integers(-span, span, n_ranges),
                "length": rng.integers(0, span, n_ranges),
            }
        )
        .select(
            pl.when(pl.int_range(pl.len()) % 7 != 3).then("tid").alias("tid"),
            "start",
            pl.when(pl.int_range(pl.len()) % 11 != 5)
            .then(pl.col("start") + pl.col("length"))
            .alias("end"),
        )
        # one value per (thread, start, end): of two identical ranges either is right
        .unique(["tid", "start", "end"], keep="first", maintain_order=True)
        .with_columns(pl.int_range(pl.len(), dtype=pl.Int64).alias("value"))
    )
    points = pl.DataFrame(
        {
            "key": np.arange(n_points, dtype=np.uint32),
            "tid": rng.integers(0, 4, n_points),
            "at": rng.integers(-span, 2 * span, n_points),
        }
    ).with_columns(pl.when(pl.col("key") % 9 != 4).then("tid").alias("tid"))
    return points, ranges


@pytest.mark.parametrize("seed", range(40))
def test_the_innermost_range_as_defined(seed: int) -> None:
    points, ranges = _case(seed)
    found = innermost_enclosing(points, ranges)
    assert found.schema == pl.Schema({"key": pl.UInt32, "value": pl.Int64})
    assert dict(found.iter_rows()) == _by_definition(points, ranges)
    assert found["key"].is_unique().all()
