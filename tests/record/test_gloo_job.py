"""A real 2-process job on gloo (CPU), recorded through ``tracecomm.profile`` and analyzed:
2 ranks, the steps asked for, the collectives' sizes, MFU's inputs from the written settings.
Needs torch (its CPU build: `.ci/run` installs it and sets TRACECOMM_REQUIRE_TORCH)."""

from __future__ import annotations

import gzip
import json
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.conftest import analyze_json
from tests.record.conftest import need_torch
from tests.record.gloo_job import BATCH, FLOPS_PER_STEP, PARAMETERS
from tracecomm.cli import app

JOB = Path(__file__).with_name("gloo_job.py")


def free_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


def record(out: Path, mode: str) -> str:
    need_torch()
    done = subprocess.run(
        [sys.executable, str(JOB), str(out), mode, free_port()],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stderr


def profiler_steps(trace: Path) -> list[int]:
    with gzip.open(trace, "rt") as handle:
        events = json.load(handle)["traceEvents"]
    return sorted(
        int(e["name"].split("#")[1])
        for e in events
        if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#")
    )


@pytest.fixture(scope="module")
def scheduled(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("gloo") / "run"
    return out, record(out, "steps")


def test_the_recorded_job_analyzes_with_its_steps_sizes_and_flops(
    scheduled: tuple[Path, str],
) -> None:
    out, said = scheduled
    names = sorted(p.name for p in out.iterdir())
    assert names == ["rank0.pt.trace.json.gz", "rank1.pt.trace.json.gz", "tracecomm.toml"]
    # one line for the job, from rank 0: the folder and the command to run
    lines = [line for line in said.splitlines() if line.startswith("tracecomm.profile:")]
    assert lines == [
        f"tracecomm.profile: recorded steps 3–5 of 2 ranks into {out} (tracecomm.toml); "
        f"analyze with: tracecomm analyze {out}"
    ]
    doc = analyze_json(out)
    assert doc["summary"]["ranks_analyzed"] == 2 and doc["summary"]["world_size"] == 2
    assert doc["summary"]["steps"] == [3, 4, 5]
    assert [profiler_steps(out / f"rank{r}.pt.trace.json.gz") for r in (0, 1)] == [[3, 4, 5]] * 2
    # gloo's message sizes: DDP's one bucket, every parameter in float32, once a step
    (row,) = doc["bandwidth"]["rows"]
    assert row["coll_type"] == "AllReduce" and row["bytes_median"] == 4 * PARAMETERS
    assert row["instances"] == 3
    cross = doc["cross_rank"]
    assert cross["matched"] == cross["instances"] == 3
    # MFU's inputs from tracecomm.toml: the FLOPs, the tokens; no device peak on a CPU
    throughput = doc["throughput"]
    assert throughput["flops"]["per_step"] == FLOPS_PER_STEP
    step_s = throughput["step_time_ns"] / 1e9
    assert throughput["tokens_per_s"] == pytest.approx(BATCH / step_s)
    assert throughput["mfu"] is None
    assert throughput["missing"].startswith("the traces name no device")
    assert [f["key"] for f in doc["frameworks"]["detected"]] == ["ddp"]


def test_the_terminal_says_what_mfu_waits_for(scheduled: tuple[Path, str]) -> None:
    out, _ = scheduled
    result = CliRunner().invoke(app, ["analyze", str(out), "--brief"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    text = re.sub(r"\s+", " ", result.stdout)
    assert "2 ranks of 2" in text and "steps 3–5 (3)" in text
    assert "MFU – (the model's FLOPs are known; the device's peak is not: --peak-tflops)" in text
    assert "CPU busy" in text and "GPU busy" not in text


def test_on_demand_records_the_same_steps_on_both_ranks_after_a_signal_to_one(
    tmp_path: Path,
) -> None:
    out = tmp_path / "run"
    said = record(out, "demand")
    # rank 1 was signalled before step 4; the ranks agree at step 6 (every 2 steps), record
    # from step 8 (one step to leave the vote, one of warm-up) for 3 steps
    folder = out / "step8"
    assert sorted(p.name for p in out.iterdir()) == ["step8"]
    assert [profiler_steps(folder / f"rank{r}.pt.trace.json.gz") for r in (0, 1)] == [
        [8, 9, 10]
    ] * 2
    assert f"recorded steps 8–10 of 2 ranks into {folder}" in said
    doc = analyze_json(folder)
    assert doc["summary"]["ranks_analyzed"] == 2 and doc["summary"]["steps"] == [8, 9, 10]
    assert doc["throughput"]["flops"]["per_step"] == FLOPS_PER_STEP


def test_a_rank_that_cannot_record_still_votes_and_the_job_is_untouched(tmp_path: Path) -> None:
    """Rank 1 cannot write its folder, and it alone is signalled: its vote still counts, the
    others record, and the job's own all-reduces (checked each step by the job) stay exact."""
    out = tmp_path / "run"
    said = record(out, "stopped")
    assert sorted(p.name for p in (out / "step8").iterdir()) == [
        "rank0.pt.trace.json.gz",
        "tracecomm.toml",
    ]
    assert profiler_steps(out / "step8" / "rank0.pt.trace.json.gz") == [8, 9, 10]
    assert f"tracecomm.profile: rank 1: recording nothing: {out}/file/run is not writable" in said


def test_a_recorder_entered_before_init_process_group_names_each_rank(tmp_path: Path) -> None:
    out = tmp_path / "run"
    record(out, "late")  # mp.spawn sets no RANK: the rank is known only after init
    assert sorted(p.name for p in out.iterdir()) == [
        "rank0.pt.trace.json.gz",
        "rank1.pt.trace.json.gz",
        "tracecomm.toml",
    ]
    doc = analyze_json(out)
    assert doc["summary"]["ranks_analyzed"] == 2 and doc["summary"]["steps"] == [3, 4, 5]
