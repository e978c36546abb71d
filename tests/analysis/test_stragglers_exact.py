"""Straggler figures asserted exactly against jitter-free generated runs.

With ``jitter=0`` every duration is as scheduled, so the expected arrival order of every
collective instance (``expected_instances``) and the per-rank figures follow from the schedule
alone; clock offsets are recovered exactly, so the report must match to the nanosecond."""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import analyze_json
from tracecomm.synth import (
    RunSpec,
    dp_pp_run,
    expected_instances,
    expected_run,
    fsdp_run,
    write_run,
)

SLOW = 5


def halves_up(value: float) -> int:
    return math.floor(value + 0.5)


def expected_rank_figures(spec: RunSpec) -> dict[int, dict[str, Any]]:
    """Per rank, from the schedule: times last, delay caused and wait per included step, the
    compute median and the excess over all ranks' median (pure data parallel: all are peers)."""
    figures = expected_run(spec)
    instances = expected_instances(spec)
    out: dict[int, dict[str, Any]] = {}
    for rank, fig in figures.items():
        included = set(fig.complete_steps)
        mine = [i for i in instances if i.step in included]
        out[rank] = {
            "times_last": sum(i.last_rank == rank for i in instances),
            "delay_caused_per_step_ns": halves_up(
                sum(i.delay_caused_ns for i in mine if i.last_rank == rank) / len(included)
            ),
            "wait_per_step_ns": halves_up(sum(i.waits_ns[rank] for i in mine) / len(included)),
            "compute_per_step_ns": halves_up(
                statistics.median(fig.steps[n].compute_ns for n in fig.complete_steps)
            ),
        }
    peers_median = halves_up(statistics.median(f["compute_per_step_ns"] for f in out.values()))
    for f in out.values():
        f["compute_excess_ns"] = max(0, f["compute_per_step_ns"] - peers_median)
    return out


@pytest.fixture(params=[0.0, 0.05, 0.2, 0.5], ids=lambda x: f"slowdown{x:.0%}")
def jitter_free(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[RunSpec, dict[str, Any]]:
    # two hosts whose clocks run 37 ms ahead and 49 ms behind the shared time
    spec = fsdp_run(
        world_size=16,
        steps=3,
        layers=4,
        seed=4,
        slow_rank=SLOW,
        slowdown=request.param,
        host_offsets_ns=[37_000_123, -49_000_777],
        jitter=0.0,
    )
    write_run(spec, tmp_path)
    return spec, analyze_json(tmp_path, "--detail", "instances")


def test_clock_offsets_are_recovered_exactly(jitter_free: tuple[RunSpec, dict[str, Any]]) -> None:
    spec, doc = jitter_free
    hosts = {h["host"]: h for h in doc["cross_rank"]["clocks"]["hosts"]}
    truth = spec.host_offsets_ns
    assert hosts["node1"]["offset_ns"] == truth["node1"] - truth["node0"]
    assert hosts["node1"]["error_ns"] == 0


def test_every_instance_matches_the_schedule(jitter_free: tuple[RunSpec, dict[str, Any]]) -> None:
    assert_instances_match(*jitter_free)


@pytest.mark.parametrize("slowdown", [0.05, 0.2, 0.5])
def test_pipeline_instances_match_the_schedule(tmp_path: Path, slowdown: float) -> None:
    spec = dp_pp_run(
        2,
        4,
        microbatches=4,
        steps=2,
        slow_rank=0,
        slowdown=slowdown,
        jitter=0.0,
        host_offsets_ns=[-12_345_678],
    )
    write_run(spec, tmp_path)
    doc = analyze_json(tmp_path, "--detail", "instances")
    assert_instances_match(spec, doc)
    st = doc["stragglers"]
    assert st["ranks"][0]["rank"] == 0
    # every stage's all-reduce waits for the pipeline fed by rank 0: ranks 1, 3, 5, 7 (the
    # other pipeline) wait; the last arrivals in pipeline 0 inherited all of their lateness
    for row in st["ranks"][1:]:
        assert row["delay_caused_per_step_ns"] == row["inherited_delay_per_step_ns"]


def assert_instances_match(spec: RunSpec, doc: dict[str, Any]) -> None:
    records = {(r["group"], r["key"]): r for r in doc["stragglers"]["instances"]}
    expected = expected_instances(spec)
    assert len(records) == len(expected) == doc["cross_rank"]["matched"]
    for inst in expected:
        got = records[(inst.group, f"seq {inst.seq}")]
        assert (
            got["coll_type"],
            got["step"],
            got["ranks"],
            got["last_rank"],
            got["arrival_skew_ns"],
            got["transfer_ns"],
            got["delay_caused_ns"],
        ) == (
            inst.coll_type,
            inst.step,
            len(inst.arrivals),
            inst.last_rank,
            inst.arrival_skew_ns,
            inst.transfer_ns,
            inst.delay_caused_ns,
        ), inst


def test_rank_figures_are_exact(jitter_free: tuple[RunSpec, dict[str, Any]]) -> None:
    spec, doc = jitter_free
    st = doc["stragglers"]
    expected = expected_rank_figures(spec)
    for row in st["ranks"]:
        want = expected[row["rank"]]
        assert {k: row[k] for k in want} == want, row["rank"]
        # one group, no send/recv: nothing is inherited and the root delay is the formula's
        assert row["inherited_delay_per_step_ns"] == 0
        assert row["root_delay_ns"] == row["compute_excess_ns"] + row["delay_caused_per_step_ns"]
    if expected[SLOW]["compute_excess_ns"] == 0:  # the run without a straggler
        assert st["flagged"] == []
    else:  # flagged when fixing it would gain more than the flag line (5 % of the step)
        assert st["ranks"][0]["rank"] == SLOW
        gain = st["ranks"][0]["gain_ns"]
        assert st["flagged"] == ([SLOW] if gain > st["threshold_ns"] else [])


@pytest.mark.parametrize("slowdown", [0.5, 1.0])
def test_replay_predicts_the_pipeline_without_its_straggler(
    tmp_path: Path, slowdown: float
) -> None:
    """DP x PP, stage-0 straggler: the replay re-times rank 0 from its data-parallel peer and
    propagates through every send/recv; it must land on the step time of the same schedule
    generated without the straggler. The first-order estimate cannot: the later stages'
    lateness is not simply the delay rank 0 caused."""
    runs = {}
    for name, slow in (("slow", slowdown), ("clean", 0.0)):
        spec = dp_pp_run(2, 4, microbatches=4, steps=3, slow_rank=0, slowdown=slow, jitter=0.0)
        write_run(spec, tmp_path / name)
        runs[name] = analyze_json(tmp_path / name)["stragglers"]
    st, clean = runs["slow"], runs["clean"]
    replay = st["replay"]
    assert st["flagged"] == [0] and replay["by_peers"] == [0] and replay["by_scaling"] == []
    assert replay["step_ns"] == st["median_step_ns"]  # the recorded gaps give the run back
    assert st["step_if_no_straggler_replay_ns"] == clean["median_step_ns"]
    truth = 100 * (st["median_step_ns"] - clean["median_step_ns"]) / st["median_step_ns"]
    assert st["recoverable_pct_replay"] == pytest.approx(truth)
    # the first-order estimate is off by more than 5 % of the step here
    assert abs(st["first_order_step_ns"] - clean["median_step_ns"]) > (
        0.05 * clean["median_step_ns"]
    )
    assert st["recoverable_basis"] == "replay"  # and the headline is the replay's


def test_replay_of_a_data_parallel_straggler_is_close(tmp_path: Path) -> None:
    """FSDP: the fast ranks' collectives queue behind the ones that waited for the straggler;
    the replay takes their work as done when the compute they were launched after ended
    (replay.py), not when the queue let them start, and lands on the run without it."""
    steps = {}
    for name, slow in (("slow", 0.5), ("clean", 0.0)):
        spec = fsdp_run(8, steps=4, seed=0, slow_rank=3, slowdown=slow, jitter=0.0)
        write_run(spec, tmp_path / name)
        steps[name] = analyze_json(tmp_path / name)["stragglers"]
    st, truth = steps["slow"], steps["clean"]["median_step_ns"]
    assert st["replay"]["step_ns"] == st["median_step_ns"]
    assert abs(st["step_if_no_straggler_replay_ns"] - truth) <= 0.005 * truth


def test_no_straggler_nothing_to_replay(tmp_path: Path) -> None:
    write_run(fsdp_run(8, steps=3, seed=1, slowdown=0.0, jitter=0.0), tmp_path)
    st = analyze_json(tmp_path)["stragglers"]
    assert st["flagged"] == [] and st["recoverable_pct_replay"] == 0.0
    assert st["step_if_no_straggler_replay_ns"] == st["median_step_ns"]
