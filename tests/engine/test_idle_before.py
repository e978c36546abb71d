"""The GPU idle time right before each comm kernel (engine.collectives.idle_before): what the
cross-rank arrivals (metrics.md §6) read when a wait happens before a kernel, not inside it."""

from __future__ import annotations

import numpy as np
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


def kernels_of(rows: list[tuple[int, int, int | None, str, int]]) -> pl.DataFrame:
    return pl.DataFrame(
        rows,
        schema={
            "start_ns": pl.Int64,
            "end_ns": pl.Int64,
            "step": pl.Int64,
            "cls": pl.String,
            "stream": pl.Int64,
        },
        orient="row",
    )


def test_a_lone_receive_of_another_stream_does_not_end_the_gap() -> None:
    # compute until 100; a receive on stream 36 lands at 300-320 while the rank waits; the
    # receive it waits for (stream 44) starts at 900: its gap runs back to 100, not to 320
    work = kernels_of(
        [(0, 100, 1, "compute", 7), (300, 320, 1, "comm", 36), (900, 950, 1, "comm", 44)]
    )
    waited = work.filter(pl.col("stream") == 44)
    assert idle_before(waited, work).tolist() == [800]
    # a kernel of its own stream in the gap does end it (a call before it in the same queue)
    same = kernels_of(
        [(0, 100, 1, "compute", 7), (300, 320, 1, "comm", 44), (900, 950, 1, "comm", 44)]
    )
    assert idle_before(same.filter(pl.col("start_ns") == 900), same).tolist() == [580]


def test_the_compute_run_leading_into_a_kernel() -> None:
    from tracecomm.engine.collectives import work_since

    # two compute kernels 5 µs apart are one run (a launch gap); the send after them starts
    # at its end; a kernel after an idle stretch has no run leading into it
    work = kernels_of(
        [
            (0, 100_000, 1, "compute", 7),
            (105_000, 300_000, 1, "compute", 7),
            (300_000, 310_000, 1, "comm", 32),
            (900_000, 950_000, 1, "comm", 32),
        ]
    )
    comm = work.filter(pl.col("cls") == "comm")
    assert work_since(comm, work)[0].tolist() == [0, 900_000]
    # taken at another time per kernel (ready_since_ns: at ready_ns): a kernel that queued
    # until 900 µs after the compute it was launched after ended at 300 µs had that run
    # leading into its own work
    at = np.array([300_000, 300_000])
    assert [a.tolist() for a in work_since(comm, work, at)] == [[0, 900_000], [0, 0]]
