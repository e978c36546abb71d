"""Real traces from other projects (../shared/data/traces, read in place, never copied)."""

import gzip
import json
from collections import Counter
from decimal import Decimal
from pathlib import Path

import jsonschema
import pytest
from typer.testing import CliRunner

from tracecomm.cli import EXIT_OK, app

SCHEMA = json.loads(
    (Path(__file__).resolve().parents[2] / "tracecomm/schema/report.schema.json").read_text()
)

# Communication kernels per file, whole file before windowing: PROVENANCE.md's table.
COMM_KERNELS = {
    "hta-trace_filter": {0: 10, 1: 10},
    "hta-nccl_parser_config": {0: 21},
    "hta-negative_queue_length_values_check": {0: 80},
    "hta-trace_diff_control": {3: 60},
    "hta-ns_resolution_trace": {0: 0},
    "hta-amd_trace": {0: 0},
    "hta-mtia_trace_single_rank": {0: 0},
    "hta-critical_path_alexnet_cuda_sync": {0: 0},
    "tbplugin-distributed_nccl": {0: 2, 1: 2},
    "tbplugin-distributed_gloo_cpu": {0: 0, 1: 0},
    "tbplugin-distributed_gloo_gpu": {0: 0, 1: 0},
    "tbplugin-distributed_nccl_user_annotation_has_communication": {0: 0},
    # DeepEP's all-to-all kernels (no NCCL kernel, PROVENANCE.md): metrics.md §1a counts them
    "deepseek-train-ep64": {0: 36},
}


# Folders whose counts come from the raw JSON in the test itself (too many ranks to list).
COUNTED = ("bytedance-straggler-SE", "bytedance-straggler-AR")


def raw_comm_kernels(folder: Path) -> dict[int, int]:
    """NCCL kernels per rank file, counted on the raw JSON (no tracecomm code)."""
    out = {}
    for path in folder.glob("rank*.json.gz"):
        doc = json.loads(gzip.decompress(path.read_bytes()))
        out[doc["distributedInfo"]["rank"]] = sum(
            e.get("cat") == "kernel" and "nccl" in e["name"].lower() for e in doc["traceEvents"]
        )
    return out


def test_every_shared_trace_folder_is_covered(shared_traces: Path) -> None:
    folders = {p.name for p in shared_traces.iterdir() if p.is_dir()}
    assert folders == set(COMM_KERNELS) | set(COUNTED)


@pytest.mark.parametrize("folder", sorted([*COMM_KERNELS, *COUNTED]))
def test_real_trace_analyzes_and_counts_comm_kernels(shared_traces: Path, folder: str) -> None:
    result = CliRunner().invoke(app, ["analyze", str(shared_traces / folder), "--format", "json"])
    assert result.exit_code == EXIT_OK, result.stderr
    assert "Traceback" not in result.stderr
    doc = json.loads(result.stdout)
    jsonschema.validate(doc, SCHEMA)
    want = COMM_KERNELS.get(folder) or raw_comm_kernels(shared_traces / folder)
    assert {r["rank"]: r["comm_kernels"] for r in doc["ranks"]} == want
    for rank in doc["ranks"]:
        for figures in _all_figures(rank):
            assert (
                figures["compute_ns"]
                + figures["exposed_comm_ns"]
                + figures["exposed_memory_ns"]
                + figures["idle_ns"]
                == figures["window_ns"]
            )


def _all_figures(rank: dict) -> list[dict]:
    windows = [rank["window"], *(s["window"] for s in rank["steps"])]
    return [w["figures"] for w in windows if w is not None]


def test_collective_types_of_the_metadata_trace(shared_traces: Path) -> None:
    """Per-type kernel counts in the window equal an independent count on the raw JSON."""
    folder = shared_traces / "hta-nccl_parser_config"
    result = CliRunner().invoke(app, ["analyze", str(folder), "--format", "json"])
    window = json.loads(result.stdout)["ranks"][0]["window"]
    raw = json.loads(
        gzip.decompress((folder / "nccl_data.json.gz").read_bytes()), parse_float=Decimal
    )
    names = {"allreduce": "AllReduce", "broadcast": "Broadcast"}
    want: Counter[str] = Counter()
    for ev in raw["traceEvents"]:
        if ev.get("cat") == "kernel" and "nccl" in ev["name"].lower():
            start = raw["baseTimeNanoseconds"] + int(Decimal(ev["ts"]) * 1000)
            end = start + int(Decimal(ev["dur"]) * 1000)
            if start < window["end_ns"] and end > window["start_ns"]:
                want[names[ev["args"]["Collective name"]]] += 1
    got = {t["coll_type"]: t["kernels"] for t in window["by_type"]}
    assert got == dict(want) and sum(want.values()) > 0


def test_gloo_trace_reports_the_cpu_timeline(shared_traces: Path) -> None:
    result = CliRunner().invoke(
        app, ["analyze", str(shared_traces / "tbplugin-distributed_gloo_cpu"), "--format", "json"]
    )
    doc = json.loads(result.stdout)
    assert doc["summary"]["timelines"] == ["cpu"]
    assert {t["coll_type"] for t in doc["by_type"]} == {"AllReduce", "Broadcast"}
