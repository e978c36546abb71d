"""The what-if's pieces on handmade inputs: the replay's self-check and fall-back, the peers'
median without the rank itself, the flag rule for stages and replicas, the first-order clamp."""

from __future__ import annotations

import numpy as np
import polars as pl

from tracecomm.analysis.replay import build_chain, replay
from tracecomm.analysis.stragglers import RankStraggle, _first_order_step
from tracecomm.analysis.whatif import (
    Candidate,
    CandidateKind,
    Job,
    WhatIf,
    _decide,
    _median_of_others,
    what_if,
)


def two_ranks() -> tuple[pl.DataFrame, pl.DataFrame]:
    """Two ranks, one all-reduce per 100 ns step; rank 1 arrives 30 ns late."""
    waits = pl.DataFrame(
        {
            "rank": [0, 1, 0, 1],
            "pg": ["g"] * 4,
            "key": ["a", "a", "b", "b"],
            "coll_type": ["AllReduce"] * 4,
            "arrival_ns": [40, 70, 140, 170],
            "end_ns": [80, 80, 180, 180],
        }
    )
    windows = pl.DataFrame(
        {
            "rank": [0, 1, 0, 1],
            "step": [1, 1, 2, 2],
            "start_ns": [0, 0, 100, 100],
            "end_ns": [90, 90, 190, 190],
        }
    )
    return waits, windows


def test_the_recorded_work_replays_to_the_recorded_steps() -> None:
    chain = build_chain(*two_ranks())
    assert chain is not None
    assert replay(chain, chain.gap[:, None]).median == [90]
    # rank 1's work before each all-reduce 30 ns shorter: everyone's step 30 ns shorter
    faster = chain.gap.copy()
    faster[(chain.rank == 1) & (chain.code >= 2)] -= 30
    assert replay(chain, faster[:, None]).median == [60]


def test_a_replay_that_does_not_reproduce_the_step_falls_back() -> None:
    chain = build_chain(*two_ranks())
    assert chain is not None
    job = Job(measured_step_ns=120, peers={0: (0, 1), 1: (0, 1)}, compute={0: 40, 1: 70})
    found = what_if(chain, job)
    assert not found.reproduces and found.candidates == ()
    assert found.reason is not None and "first-order estimate instead" in found.reason
    assert found.reproduction_error_pct == 25.0


def test_the_median_of_the_others_leaves_the_rank_out() -> None:
    values = np.array([[1, 10], [2, 20], [9, 30], [4, 40]])
    # rank 0: median of 2, 9, 4 = 4; of 20, 30, 40 = 30 ...
    assert _median_of_others(values).tolist() == [[4, 30], [4, 30], [2, 20], [2, 20]]
    assert _median_of_others(np.array([[5], [7]])).tolist() == [[7], [5]]


def candidate(kind: CandidateKind, index: int, ranks: tuple[int, ...], gain: int) -> Candidate:
    return Candidate(kind, index, ranks, "peers", 1000 - gain, gain, gain / 10)


def test_a_stage_whose_gain_is_one_ranks_is_not_flagged() -> None:
    chain = build_chain(*two_ranks())
    assert chain is not None
    check = WhatIf(1000, 1000, 0.0, 1.0, True, 2)
    candidates = [
        candidate("rank", 0, (0,), 300),
        *(candidate("rank", r, (r,), 0) for r in (1, 2, 3)),
        candidate("stage", 0, (0, 1), 320),  # fixing the stage adds little over rank 0
        candidate("replica", 0, (0, 1), 0),
    ]
    decided = _decide(chain, check, candidates, {})
    assert decided.flagged_ranks == (0,)
    assert [c.label for c in decided.candidates if c.flagged] == ["rank 0"]
    assert decided.threshold_ns == 50  # 5 % of 1000 (the median rank gains nothing)
    # 3 × the median rank's gain when that is larger
    even = [candidate("rank", r, (r,), 200) for r in range(4)]
    assert _decide(chain, check, even, {}).threshold_ns == 600
    # a stage that gains far more than any of its ranks is the cause
    overloaded = [
        candidate("rank", 0, (0,), 10),
        candidate("rank", 1, (1,), 10),
        candidate("stage", 1, (0, 1), 400),
    ]
    assert _decide(chain, check, overloaded, {}).flagged_ranks == (0, 1)


def test_the_first_order_step_is_never_negative_nor_below_the_longest_own_work() -> None:
    def row(rank: int, excess: int, delay: int, flagged: bool) -> RankStraggle:
        return RankStraggle(rank, 0, None, delay, 0, 0, 500, excess, 0, None, excess, flagged)

    # the delay a rank caused can exceed the step when collectives overlap: no negative step
    rows = [row(0, 100, 5_000, True), row(1, 0, 0, False)]
    assert _first_order_step(rows, 1_000, {0: 500, 1: 500}) == 500
    assert _first_order_step([row(0, 100, 0, True)], 1_000, {0: 500}) == 900
