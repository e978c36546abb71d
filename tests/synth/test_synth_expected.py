"""Expected figures: hand-checked tiny specs, the partition identity, interval helpers."""

from __future__ import annotations

import pytest
from synth_helpers import T0, op

from tracecomm.synth import Figures, RankSpec, Step, expected_figures, expected_run, fsdp_run
from tracecomm.synth.expected import intersect, subtract, union
from tracecomm.synth.schedule import TimeFormat


def assert_identity(f: Figures) -> None:
    assert f.compute_ns + f.exposed_comm_ns + f.exposed_memory_ns + f.idle_ns == f.window_ns
    assert f.overlapped_comm_ns + f.exposed_comm_ns == f.comm_ns


def test_interval_helpers() -> None:
    assert union([(5, 7), (1, 3), (2, 4), (7, 8), (9, 9)]) == [(1, 4), (5, 8)]
    assert intersect([(0, 10)], [(2, 3), (5, 12)]) == [(2, 3), (5, 10)]
    assert subtract([(0, 10), (20, 30)], [(2, 3), (5, 22), (29, 40)]) == [(0, 2), (3, 5), (22, 29)]
    assert subtract([(0, 10)], []) == [(0, 10)]


def test_one_step_by_hand() -> None:
    # compute [1000,5000) and [10500,12000); AllGather [3000,8000); memcpy [9000,10000)
    ops = (
        op("compute", 7, 1000, 5000, 500),
        op("comm", 20, 3000, 8000, 600, coll="AllGather", nelems=1024),
        op("memcpy", 13, 9000, 10000, 700),
        op("compute", 7, 10500, 12000, 800),
    )
    spec = RankSpec(0, (Step(1, T0, T0 + 2000, ops),))
    got = expected_figures(spec)
    assert got.complete_steps == (1,)
    assert got.incomplete_steps == ()
    assert got.comm_kernels == 1
    want = Figures(5500, 5000, 2000, 3000, 1000, 1500, 11000, {"AllGather": (5000, 3000)})
    assert got.total == want
    assert got.steps == {1: want}
    assert_identity(got.total)


def test_incomplete_step_unlinked_and_clipping_by_hand() -> None:
    step3 = Step(
        3,
        T0,
        T0 + 20000,
        (
            op("compute", 7, 2000, 6000, 1000),
            op("comm", 20, 5000, 9000, 1500, coll="AllReduce", nelems=1),
            op("comm", 21, 7000, 10000, 1800, coll="ReduceScatter", nelems=64),
            op("memset", 7, 8000, 8500, 1900),  # under comm: not exposed memory
        ),
    )
    step4 = Step(
        4,
        T0 + 20000,
        T0 + 40000,
        (
            op("compute", 7, 21000, 25000, 20500),
            op("compute", 7, 25000, 26000, 20600, recorded=False),
        ),
    )
    extras = (
        op("compute", 24, 9000, 9500, 9000, launched=False),  # unlinked, inside W, under comm
        op("memcpy", 7, 46000, 47000, 45000),  # launched after every step: outside W
    )
    got = expected_figures(RankSpec(5, (step3, step4), extras))
    assert got.complete_steps == (3,)
    assert got.incomplete_steps == (4,)
    assert got.comm_kernels == 2
    # W = [2000, 10000); compute = [2000,6000) + [9000,9500); comm = [5000,10000)
    want = Figures(
        4500,
        5000,
        1500,
        3500,
        0,
        0,
        8000,
        {"AllReduce": (4000, 3000), "ReduceScatter": (3000, 2500)},
    )
    assert got.total == want
    assert set(got.steps) == {3}
    assert_identity(got.total)


def test_collective_types_and_gap_between_steps_by_hand() -> None:
    step1 = Step(
        1,
        T0,
        T0 + 10000,
        (
            op("compute", 7, 1000, 3000, 100),
            op("comm", 20, 2500, 4000, 200, coll="AllToAll", nelems=8),
        ),
    )
    step2 = Step(
        2,
        T0 + 10000,
        T0 + 20000,
        (
            # ncclDevKernel_Generic without metadata: the engine can only say Other.
            op("comm", 20, 11000, 12000, 10100, coll="AllToAll", metadata=False),
            op("compute", 7, 11500, 14000, 10200),
        ),
    )
    got = expected_figures(RankSpec(0, (step1, step2)))
    by_type = {"AllToAll": (1500, 1000), "Other": (1000, 500)}
    assert got.total == Figures(4500, 2500, 1000, 1500, 0, 7000, 13000, by_type)
    assert got.steps[1] == Figures(2000, 1500, 500, 1000, 0, 0, 3000, {"AllToAll": (1500, 1000)})
    assert got.steps[2] == Figures(2500, 1000, 500, 500, 0, 0, 3000, {"Other": (1000, 500)})
    for figures in (got.total, *got.steps.values()):
        assert_identity(figures)


def test_no_complete_step_gives_empty_window() -> None:
    step = Step(1, T0, T0 + 1000, (op("compute", 7, 10, 20, 5, recorded=False),))
    got = expected_figures(RankSpec(0, (step,)))
    assert got.complete_steps == ()
    assert got.incomplete_steps == (1,)
    assert got.total.window_ns == 0


@pytest.mark.parametrize("time_format", ["relative", "epoch_us"])
def test_fsdp_figures_are_consistent(time_format: TimeFormat) -> None:
    spec = fsdp_run(world_size=4, steps=3, layers=4, seed=1, time_format=time_format)
    for got in expected_run(spec).values():
        assert got.complete_steps == (12, 13, 14)
        assert got.incomplete_steps == (15,)
        for figures in (got.total, *got.steps.values()):
            assert_identity(figures)
            # The schedule is built to exercise every term of the partition.
            assert figures.overlapped_comm_ns > 0
            assert figures.exposed_comm_ns > 0
            assert figures.exposed_memory_ns > 0
            assert figures.idle_ns > 0
            assert set(figures.by_type) == {"AllGather", "ReduceScatter", "AllReduce"}
        assert got.total.window_ns > sum(f.window_ns for f in got.steps.values())
