"""A real gloo / CPU-only run recorded with torch.profiler (fixtures/record_gloo.py)."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from tracecomm.cli import EXIT_OK, app

GLOO_RUN = Path(__file__).resolve().parents[2] / "fixtures" / "gloo-run"


def test_recorded_gloo_run_is_analyzed_on_the_cpu_timeline() -> None:
    result = CliRunner().invoke(app, ["analyze", str(GLOO_RUN), "-f", "json"])
    assert result.exit_code == EXIT_OK, result.stderr
    doc = json.loads(result.stdout)
    assert doc["summary"]["timelines"] == ["cpu"] and doc["summary"]["world_size"] == 2
    assert [r["rank"] for r in doc["ranks"]] == [0, 1]
    assert doc["summary"]["steps"] == [2, 3, 4, 5]  # the profiler's active steps
    # DDP's gradient all-reduce, once a step on each rank: gloo:all_reduce on gloo's thread
    # (the c10d::allreduce_ that queued it is the caller's work, not a second collective)
    assert [(t["coll_type"], t["kernels"]) for t in doc["by_type"]] == [("AllReduce", 8)]
    for rank in doc["ranks"]:
        figures = rank["window"]["figures"]
        assert figures["comm_ns"] > 0 and figures["compute_ns"] > figures["comm_ns"]
        assert (
            figures["compute_ns"]
            + figures["exposed_comm_ns"]
            + figures["exposed_memory_ns"]
            + figures["idle_ns"]
            == figures["window_ns"]
        )
