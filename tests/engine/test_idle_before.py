"""The GPU idle time right before each comm kernel (engine.collectives.idle_before): what the
cross-rank arrivals (metrics.md §6) read when a wait happens before a kernel, not inside it."""

from __future__ import annotations

import polars as pl

from tracecomm.engine.collectives import idle_before


def frame(rows: list[tuple[int, int, int | None]]) -> pl.DataFrame:
    return pl.DataFrame(
        rows, schema={"start_ns": pl.Int64, "end_ns": pl.Int64, "step": pl.Int64}, orient="row"
    )


def test_the_gap_back_to_the_previous_work_on_any_stream() -> None:
    work = frame([(0, 100, 1), (50, 300, 1), (500, 520, 1), (500, 900, 1), (1000, 1100, 1)])
    kernels = frame([(500, 520, 1), (500, 900, 1), (1000, 1100, 1)])
    # both kernels starting at 500 follow the busy run that ended at 300; the one at 1000
    # follows the one that ended at 900
    assert idle_before(kernels, work).tolist() == [200, 200, 100]


def test_no_gap_when_other_work_runs_at_the_start() -> None:
    work = frame([(0, 1000, 1), (400, 450, 1)])
    assert idle_before(frame([(400, 450, 1)]), work).tolist() == [0]


def test_the_gap_stops_at_the_steps_first_device_event() -> None:
    # step 2's first device event is at 700: the idle time between the steps is not a wait
    work = frame([(0, 100, 1), (700, 750, 2), (900, 950, 2)])
    kernels = frame([(700, 750, 2), (900, 950, 2)])
    assert idle_before(kernels, work).tolist() == [0, 150]


def test_without_work_nothing_is_idle() -> None:
    assert idle_before(frame([(5, 9, None)]), None).tolist() == [0]
