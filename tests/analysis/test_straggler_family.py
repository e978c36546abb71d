"""The straggler family against its counterfactuals (issue 30, metrics.md §6): every member at 8
ranks and the held-out job's shape at 64. For each: the job and the same job without its cause
(tracecomm.synth.family), both analyzed; the report must flag the cause and nothing else, give
back within 3 points what the counterfactual measures, cost its finding at that within 1 point
and name it for what the cause is, never give a set less than a member, and paint a cause
darkest on the root-delay heat map. The 512-rank runs are bench/straggler_family.py's
(BENCHMARKS.md). Two members hide what the replay must see through (issue 45): a wait no event
records (hidden-rendezvous) and compute recorded before the send/recv it waited for ends
(coarse-clock); each is checked to fail without the replay's answer to it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tests.analysis.possible import impossible
from tests.conftest import analyze_json
from tracecomm.analysis import hidden, replay
from tracecomm.cli.app import app
from tracecomm.synth import write_run
from tracecomm.synth.family import CHECKS, judge, member, names


def judged(tmp: Path, name: str, ranks: int, slowdown: float = 1.2) -> dict[str, Any]:
    m = member(name, ranks, slowdown=slowdown)
    write_run(m.job, tmp / "job")
    write_run(m.counterfactual, tmp / "without")
    job = analyze_json(tmp / "job")
    assert list(impossible(job)) == []
    return judge(m, job, analyze_json(tmp / "without"))


def failed(row: dict[str, Any]) -> list[str]:
    return [k for k in CHECKS if not row[k]]


@pytest.mark.parametrize("name", names())
def test_every_member_at_8_ranks(tmp_path: Path, name: str) -> None:
    row = judged(tmp_path, name, 8)
    assert failed(row) == [], row
    assert row["basis"] == "replay"  # the replay reproduces each run: its figure is the headline


@pytest.mark.parametrize("slowdown", [0.2, 1.5])
def test_a_slow_worker_from_1_2_to_2_5_times(tmp_path: Path, slowdown: float) -> None:
    row = judged(tmp_path, "slow-worker", 8, slowdown)
    assert failed(row) == [], row


def test_the_held_out_shape_at_64_ranks(tmp_path: Path) -> None:
    """DP4 × PP4 × TP4, rank 0 (replica 0, stage 0) 2.2× its peers: one slow GPU, so one
    straggler finding for rank 0 and no stage finding, costing what the job without it
    measures; the healthy replicas' pipelines say they wait for the slow one."""
    m = member("slow-worker", 64)
    write_run(m.job, tmp_path / "job")
    write_run(m.counterfactual, tmp_path / "without")
    job = analyze_json(tmp_path / "job")
    twin = analyze_json(tmp_path / "without")
    row = judge(m, job, twin)
    assert failed(row) == [], row
    assert row["finding"] == "straggler: rank 0 on node0"
    # one story (issue 45): the straggler first; the AllReduce the other replicas spent
    # waiting for rank 0 is its finding's, so AllReduce exposed costs what it costs on the
    # job without the slow GPU (7.8 ms), within 3 points of the step, and so does the bubble
    findings, step = job["findings"], job["step_parts"]["step_ns"]
    assert findings[0]["title"] == "straggler: rank 0 on node0"
    for title in ("AllReduce exposed", "pipeline bubble: stages wait for each other"):
        (ours,) = [f["cost_ns"] for f in findings if f["title"] == title]
        (theirs,) = [f["cost_ns"] for f in twin["findings"] if f["title"] == title]
        assert abs(ours - theirs) < 0.03 * step, (title, ours, theirs, step)
    assert sum(f["cost_ns"] for f in findings if f["severity"] == "cost") <= step
    views = {v["group"]: v for v in job["pipelines"]}
    assert views["0→16→32→48"]["slow_rank"] == 0
    healthy = [v for g, v in views.items() if not g.startswith("0→")]
    assert healthy and all(v["waits_for"] == [0] for v in healthy)
    assert all("waits for rank 0" in v["verdict"] for v in healthy)
    out = CliRunner().invoke(app, ["analyze", str(tmp_path / "job")], env={"COLUMNS": "200"})
    # the 15 healthy pipelines say the same: one of them in full, the others in one line
    lines = out.stdout.splitlines()
    assert sum(line.startswith("Pipeline ") for line in lines) == 2
    folded = next(line for line in lines if "more pipelines like this" in line)
    assert folded.startswith(f"  {len(healthy) - 1} more pipelines like this (")
    assert "waiting for rank 0 at the data-parallel collectives" in folded


def test_a_slow_node_is_one_finding_for_its_ranks(tmp_path: Path) -> None:
    row = judged(tmp_path, "slow-node", 8)
    assert failed(row) == [], row
    assert row["finding"] == "straggler: host node0 (ranks 0, 2)"


def test_a_hidden_rendezvous_is_inferred(tmp_path: Path) -> None:
    """DP2 × PP4: rank 7 (the last stage of replica 1) idles before its embedding all-reduce
    until rank 6 (replica 0's) ends its last backward send, plus 250–350 µs; no event records
    it. The replay infers it in every step; without the inference the idle is rank 7's own
    work and the what-if gives back far less than the counterfactual measures."""
    inferred: list[hidden.InferredWait] = []
    found = hidden.hidden_waits

    def spy(rows: hidden.ChainRows, reading: hidden.Reading) -> hidden.HiddenWaits:
        waits = found(rows, reading)
        inferred.extend(waits.inferred)
        return waits

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(replay, "hidden_waits", spy)
        row = judged(tmp_path / "with", "hidden-rendezvous", 8)
    assert failed(row) == [], row
    seen = [(w.waiters, w.source_rank, w.steps, w.of_steps) for w in inferred]
    assert ((7,), 6, 3, 3) in seen, inferred
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(replay, "hidden_waits", lambda rows, reading: hidden.HiddenWaits.none())
        blind = judged(tmp_path / "without", "hidden-rendezvous", 8)
    assert blind["whatif_pct"] < blind["truth_pct"] - 10, blind


def test_coarse_clocks_need_the_predecessor_slack(tmp_path: Path) -> None:
    """Compute recorded up to 130 µs before the send/recv it waited for ends: with the
    predecessor's 150 µs slack the what-if holds; with 20 µs the wait becomes work and it
    does not (and replica 0's other stages look slow)."""
    row = judged(tmp_path / "with", "coarse-clock", 8)
    assert failed(row) == [], row
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(replay, "PREDECESSOR_SLACK_NS", 20_000)
        blind = judged(tmp_path / "without", "coarse-clock", 8)
    assert blind["whatif_pct"] < blind["truth_pct"] - 10, blind


@pytest.mark.parametrize("name", ["hidden-rendezvous", "coarse-clock"])
def test_hidden_waits_and_coarse_clocks_at_64_ranks(tmp_path: Path, name: str) -> None:
    """The held-out shape (DP4 × PP4 × TP4, rank 0 2.2×) with what its trace hides: ranks 52,
    56 and 60 waiting unrecorded for rank 48, or compute stamped before its send/recv ends.
    Ranks 48–51 end their last sends within µs of each other, so which one the idle ends on
    varies by step: the release is the element found in most steps among those that ended
    together (hidden.py), and the report names the wait as on the real job."""
    m = member(name, 64)
    write_run(m.job, tmp_path / "job")
    write_run(m.counterfactual, tmp_path / "without")
    job = analyze_json(tmp_path / "job")
    row = judge(m, job, analyze_json(tmp_path / "without"))
    assert failed(row) == [], row
    inferred = [
        (d["waiters"], d["source_element"], d["steps"], d["of_steps"])
        for d in job["stragglers"]["replay"]["inferred_waits"]
    ]
    if name == "hidden-rendezvous":
        assert inferred == [([52, 56, 60], "the send/recv 48→32", 3, 3)]
    else:
        assert inferred == []
