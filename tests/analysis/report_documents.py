"""Analyze documents the test suite can make cheaply, for the tests that hold the document to
the Report's types (``analysis.report``): the fixtures, runs generated to reach every section
(pipelines, power logs, recorded shapes, CUDA graphs, NCCL logs, a missing rank, a projection
that cannot be made), and every shared trace folder."""

from __future__ import annotations

import pickle
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from tests.conftest import REPO, SHARED_TRACES
from tests.nccl.test_flight import dump, entry
from tracecomm.analysis.report import report_document
from tracecomm.synth import fsdp_run, write_run
from tracecomm.synth.graphs import graph_replay_run
from tracecomm.synth.nccl_log import LogSpec, nccl_log
from tracecomm.synth.power import power_log
from tracecomm.synth.pp import dp_pp_run
from tracecomm.synth.shapes import with_shapes

SAMPLE = REPO / "fixtures" / "sample-run"
GLOO = REPO / "fixtures" / "gloo-run"
EVERYTHING: dict[str, Any] = {
    "detail": ["instances", "timeline"],
    "project": True,
    "compat": "hta",
    "model_flops_per_step": 3.2e15,
}
NCCL_SPEC = LogSpec(
    hosts=("gpu-a01", "gpu-a02"),
    versions=("2.24.3", "2.23.4"),
    socket_hosts=frozenset({"gpu-a02"}),
    warn_rank=1,
    timeout_seq=9,
    absent_rank=3,
)

Make = Callable[[Path], tuple[Path, dict[str, Any]]]


def _sample(tmp: Path) -> tuple[Path, dict[str, Any]]:
    return SAMPLE, {}


def _sample_everything(tmp: Path) -> tuple[Path, dict[str, Any]]:
    run = tmp / "sample-nccl"
    shutil.copytree(SAMPLE, run)
    (run / "rank0.log").write_bytes(nccl_log(NCCL_SPEC))
    for rank in range(4):  # Flight Recorder dumps: rank 3 never reached seq 12
        entries = [
            entry(seq, "started" if seq == 12 else "completed")
            for seq in range(8, 12 if rank == 3 else 13)
        ]
        (run / f"nccl_trace_rank_{rank}").write_bytes(pickle.dumps(dump(entries)))
    return run, EVERYTHING


def _gloo(tmp: Path) -> tuple[Path, dict[str, Any]]:
    return GLOO, {"detail": ["timeline"], "project": True}


def _fsdp_power_shapes(tmp: Path) -> tuple[Path, dict[str, Any]]:
    spec = with_shapes(fsdp_run(world_size=4, steps=3, seed=1, idle_detail=True))
    write_run(spec, tmp)
    (tmp / "gpu-power.csv").write_text(power_log(spec, "node0", lambda g, t: 300.0 + 10 * g))
    return tmp, {
        "tokens_per_step": 4096,
        "model_flops_per_step": 1e12,
        "detail": ["timeline"],
        "link_gbps": 100,
    }


def _pipeline(tmp: Path) -> tuple[Path, dict[str, Any]]:
    write_run(dp_pp_run(dp=2, pp=2, microbatches=4, steps=2, slow_rank=1, slowdown=0.3), tmp)
    return tmp, {"detail": ["timeline"], "project": True, "weak": True}


def _graphs(tmp: Path) -> tuple[Path, dict[str, Any]]:
    write_run(graph_replay_run(world_size=2, capture_step=True), tmp)
    return tmp, {"project": True}


def _missing_rank(tmp: Path) -> tuple[Path, dict[str, Any]]:
    # rank 1 never launches its fourth collective: a group whose instances do not match
    write_run(fsdp_run(world_size=4, steps=2, seed=2, gzip=False, skip=(1, 3)), tmp)
    victim = sorted(tmp.iterdir())[-1]
    victim.write_text('{"traceEvents": [{"ph": "X", "name": ')
    (tmp / "notes.json").write_text('{"not": "a trace"}')
    return tmp, {"all_steps": True}


GENERATED: dict[str, Make] = {
    "sample": _sample,
    "sample-everything": _sample_everything,
    "gloo": _gloo,
    "fsdp-power-shapes": _fsdp_power_shapes,
    "pipeline": _pipeline,
    "graphs": _graphs,
    "missing-rank": _missing_rank,
}


def shared_folders() -> list[Path]:
    if not SHARED_TRACES.is_dir():
        return []
    return sorted(p for p in SHARED_TRACES.iterdir() if p.is_dir())


def document_of(run: Path, options: dict[str, Any]) -> dict[str, Any]:
    from tracecomm import analyze

    return report_document(analyze([run], jobs=1, **options))


def documents(tmp: Path, shared: bool = True) -> Iterator[tuple[str, dict[str, Any]]]:
    """(name, document) for each generated run, then each shared trace folder (if present)."""
    for name, make in GENERATED.items():
        folder = tmp / name
        folder.mkdir()
        run, options = make(folder)
        yield name, document_of(run, options)
    for folder in shared_folders() if shared else []:
        yield f"shared-{folder.name}", document_of(folder, {})
