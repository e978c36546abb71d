"""step_of against its definition, and the sweep against a brute-force count per instant."""

from __future__ import annotations

import numpy as np
import polars as pl

from tracecomm.engine.intervals import coverage
from tracecomm.engine.steps import step_of


def by_definition(t: int | None, steps: list[tuple[int, int, int | None]]) -> int | None:
    """The latest step to start at or before t, when t is before that step's end."""
    if t is None:
        return None
    started = [s for s in steps if s[1] <= t]
    if not started:
        return None
    step, _, end = max(started, key=lambda s: s[1])
    return step if end is not None and t < end else None


def test_step_of_is_the_latest_step_started_while_it_lasts() -> None:
    rng = np.random.default_rng(1)
    for _ in range(500):
        k, n = int(rng.integers(0, 6)), int(rng.integers(0, 40))
        starts = rng.choice(1000, k, replace=False).tolist()  # distinct: ties have no order
        ends = [s + int(rng.integers(-5, 300)) if rng.random() > 0.2 else None for s in starts]
        numbers = rng.choice(100, k, replace=False).tolist()
        spans = list(zip(numbers, starts, ends, strict=True))
        steps = pl.DataFrame(
            {"step": numbers, "start_ns": starts, "end_ns": ends},
            schema={"step": pl.Int64, "start_ns": pl.Int64, "end_ns": pl.Int64},
        )
        times = [int(x) if x % 7 else None for x in rng.integers(-10, 1400, n)]
        frame = pl.DataFrame({"t": times}, schema={"t": pl.Int64})
        got = step_of(pl.col("t"), steps, frame).to_list()
        assert got == [by_definition(t, spans) for t in times]


def test_spans_without_a_number_or_a_start_hold_no_time() -> None:
    """What a damaged cache entry could hold: no crash, and such a span claims nothing."""
    steps = pl.DataFrame(
        {"step": [None, 4, 5], "start_ns": [0, None, 10], "end_ns": [100, 100, 20]},
        schema={"step": pl.Int64, "start_ns": pl.Int64, "end_ns": pl.Int64},
    )
    frame = pl.DataFrame({"t": [5, 15, None, 25]}, schema={"t": pl.Int64})
    assert step_of(pl.col("t"), steps, frame).to_list() == [None, 5, None, None]
    only_damaged = steps.head(2)
    assert step_of(pl.col("t"), only_damaged, frame).to_list() == [None] * 4


def test_the_sweep_counts_every_label_at_every_instant() -> None:
    rng = np.random.default_rng(2)
    for _ in range(500):
        n, labels = int(rng.integers(0, 50)), int(rng.integers(1, 7))
        starts = rng.integers(0, 60, n).astype(np.int64)
        ends = starts + rng.integers(-3, 20, n)
        label = rng.integers(0, labels, n).astype(np.int64)
        cov = coverage(starts, ends, label, labels)
        assert cov.covered.shape == (cov.times.size - 1, labels)
        for i, (lo, hi) in enumerate(zip(cov.times[:-1], cov.times[1:], strict=True)):
            for lab in range(labels):
                inside = (label == lab) & (starts <= lo) & (ends >= hi) & (ends > starts)
                assert cov.covered[i, lab] == inside.any(), (i, lab)
