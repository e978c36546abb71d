"""The straggler family against its counterfactuals (issue 30, metrics.md §6): every member at 8
ranks and the held-out job's shape at 64. For each: the job and the same job without its cause
(tracecomm.synth.family), both analyzed; the report must flag the cause and nothing else, give
back within 3 points what the counterfactual measures, cost its finding at that within 1 point
and name it for what the cause is, never give a set less than a member, and paint a cause
darkest on the root-delay heat map. The 512-rank runs are bench/straggler_family.py's
(BENCHMARKS.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tests.analysis.possible import impossible
from tests.conftest import analyze_json
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
    row = judge(m, job, analyze_json(tmp_path / "without"))
    assert failed(row) == [], row
    assert row["finding"] == "straggler: rank 0 on node0"
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
