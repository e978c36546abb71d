"""``analyze`` is deterministic by construction (issue 19): byte-identical JSON whatever the
process's string hashing (PYTHONHASHSEED), the number of parse processes and the executor, on
the shared SE job and on generated pipeline jobs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, SHARED_TRACES
from tracecomm.synth import dp_pp_run, write_run

SEEDS = ("0", "1", "4242")


def document(path: Path, seed: str, *options: str) -> bytes:
    env = {**os.environ, "PYTHONHASHSEED": seed}
    done = subprocess.run(
        [sys.executable, "-m", "tracecomm", "analyze", str(path), "-f", "json", *options],
        capture_output=True,
        env=env,
        cwd=REPO,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout


@pytest.fixture(scope="module")
def pipeline_job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """DP2 x PP4 x TP2 with per-pair send/recv groups: middle stages sit in two groups each."""
    folder = tmp_path_factory.mktemp("pipeline")
    spec = dp_pp_run(
        2,
        4,
        tp=2,
        microbatches=4,
        steps=3,
        layers_per_stage=(2, 2, 2, 3),
        p2p_groups="pair",
        embedding_allreduce=True,
        recv_waits_outside=True,
        peer_ranks=False,
    )
    write_run(spec, folder)
    return folder


def test_generated_pipeline_job_under_several_hash_seeds_and_jobs(pipeline_job: Path) -> None:
    first = document(pipeline_job, SEEDS[0])
    for seed in SEEDS[1:]:
        assert document(pipeline_job, seed) == first, seed
    assert document(pipeline_job, SEEDS[1], "--jobs", "1") == first
    assert document(pipeline_job, SEEDS[2], "--jobs", "3") == first


def test_shared_se_job_under_several_hash_seeds() -> None:
    folder = SHARED_TRACES / "bytedance-straggler-SE"
    if not folder.is_dir():
        pytest.skip("../shared/data/traces/bytedance-straggler-SE is not present")
    first = document(folder, SEEDS[0])
    assert document(folder, SEEDS[1]) == first
    assert document(folder, SEEDS[2], "--jobs", "1") == first


def test_the_dask_executor_gives_the_same_bytes(pipeline_job: Path) -> None:
    pytest.importorskip("distributed")
    local = document(pipeline_job, SEEDS[0])
    assert document(pipeline_job, SEEDS[1], "--executor", "dask", "--jobs", "2") == local


def test_a_straggler_family_job_with_host_candidates(tmp_path: Path) -> None:
    """A slow node (tracecomm.synth.family): host candidates, queued collectives and the
    merged fixes of groups give the same document whatever the hashing and the processes."""
    from tracecomm.synth.family import member

    write_run(member("slow-node", 8).job, tmp_path)
    first = document(tmp_path, SEEDS[0])
    assert document(tmp_path, SEEDS[1], "--jobs", "1") == first
    assert document(tmp_path, SEEDS[2], "--jobs", "3") == first
