"""Spec validation: bad schedules fail at construction with a message that says why."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from synth_helpers import T0, op

from tracecomm.synth import Op, RankSpec, RunSpec, Step


def one_step(*ops: Op, **kw: object) -> RankSpec:
    return RankSpec(0, (Step(1, T0, T0 + 10_000, ops),), **kw)  # type: ignore[arg-type]


CASES: dict[str, tuple[Callable[[], object], str]] = {
    "zero duration": (lambda: op("compute", 7, 10, 10, 0), "dur_ns must be > 0"),
    "launch after start": (lambda: op("compute", 7, 10, 20, 11), "after start_ns"),
    "nothing to write": (
        lambda: op("compute", 7, 10, 20, 0, launched=False, recorded=False),
        "neither launched nor recorded",
    ),
    "comm without coll": (lambda: op("comm", 20, 10, 20, 0), "collective type"),
    "compute with coll": (lambda: op("compute", 7, 10, 20, 0, coll="AllReduce"), "collective type"),
    "unknown thread": (lambda: op("compute", 7, 10, 20, 0, launch_thread="io"), "launch_thread"),
    "step backwards": (lambda: Step(1, T0 + 5, T0 + 5, ()), "cpu_end_ns must be > cpu_start_ns"),
    "launch outside step": (
        lambda: Step(1, T0, T0 + 100, (op("compute", 7, 200, 300, 150),)),
        "outside the step span",
    ),
    "extra op inside a step": (
        lambda: RankSpec(0, (Step(1, T0, T0 + 100, ()),), (op("compute", 7, 60, 70, 50),)),
        "lies inside step 1",
    ),
    "overlapping steps": (
        lambda: RankSpec(0, (Step(1, T0, T0 + 100, ()), Step(2, T0 + 50, T0 + 150, ()))),
        "overlap",
    ),
    "two launches at once": (
        lambda: one_step(op("compute", 7, 10, 20, 5), op("compute", 7, 20, 30, 5)),
        "two launches",
    ),
    "sub-µs time in epoch_us": (
        lambda: one_step(op("compute", 7, 1000, 2500, 0), time_format="epoch_us"),
        "not whole µs",
    ),
    "compute named like NCCL": (
        lambda: one_step(op("compute", 7, 10, 20, 0, name="ncclDevKernel_Generic")),
        "looks like an NCCL kernel",
    ),
    "comm not named like NCCL": (
        lambda: one_step(op("comm", 20, 10, 20, 0, coll="AllReduce", name="my_allreduce")),
        "no nccl/rccl",
    ),
    "name contradicts coll without metadata": (
        # NCCL <= 2.18 runs all-to-all in the SendRecv kernel: without metadata it reads so.
        lambda: one_step(
            op("comm", 20, 10, 20, 0, coll="AllToAll", metadata=False), naming="legacy"
        ),
        "implies SendRecv",
    ),
    "duplicate ranks": (lambda: RunSpec(2, (one_step(), one_step())), "duplicate ranks"),
    "rank beyond world": (lambda: RunSpec(1, (RankSpec(3, ()),)), "world_size"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_invalid_specs_are_rejected(case: str) -> None:
    build, message = CASES[case]
    with pytest.raises(ValueError, match=message):
        build()


def test_valid_edge_cases_are_accepted() -> None:
    spec = one_step(
        op("compute", 7, 10, 20, 10),  # launch exactly at start
        op("compute", 7, 20, 30, 11, launch_thread="autograd"),
        op("comm", 20, 12, 20, 12, coll="AllToAll", metadata=False),  # Generic: Other
        op("comm", 21, 10, 20, 0, coll="SendRecv", launched=False),
    )
    assert len(spec.all_ops()) == 4
