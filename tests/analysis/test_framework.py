"""Which framework ran the job, from the names in its traces, and advice in that framework's
knobs (issue 34, metrics.md §14a): Megatron jobs get Megatron's flags, not FSDP's; a serving
engine gets no training advice; a trace with CUDA graphs is not told to capture them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.conftest import (
    SHARED_TRACES,
    analyze_json,
    kernel,
    simple_events,
    trace_doc,
    write_trace,
)
from tracecomm.analysis.advice import HOST_BOUND_CAPTURE, HOST_BOUND_GENERIC, host_bound_advice
from tracecomm.analysis.framework import DetectedFramework, Frameworks
from tracecomm.engine.framework import framework_marks
from tracecomm.ingest.load import load_rank
from tracecomm.synth import write_run
from tracecomm.synth.graphs import graph_replay_run

SE = SHARED_TRACES / "bytedance-straggler-SE"


def annotation(name: str, ts: int = 990, dur: int = 300, cat: str = "user_annotation") -> dict:
    return {"ph": "X", "cat": cat, "name": name, "pid": 100, "tid": 100, "ts": ts, "dur": dur}


def launched_by(op: str) -> list[dict]:
    """A CPU op (a torch custom op, as vLLM's are) whose External id the first launch carries."""
    return [{**annotation(op, cat="cpu_op"), "args": {"External id": 77}}]


def run_with(tmp_path: Path, extra: list[dict], **comm_args: Any) -> dict:
    """simple_events (an AllReduce exposed 50 of its 100 µs) with more events, or collective
    metadata on the AllReduce kernel; the first launch carries External id 77."""
    events = [
        {**e, "args": {**e["args"], "External id": 77}}
        if e.get("args") == {"correlation": 1}
        else e
        for e in simple_events()
    ]
    if comm_args:
        events = [
            kernel(e["name"], e["ts"], e["dur"], e["args"]["correlation"], 20, **comm_args)
            if e["name"].startswith("nccl")
            else e
            for e in events
        ]
    write_trace(tmp_path / "rank0.json", trace_doc([*events, *extra], world=1))
    return analyze_json(tmp_path)


def exposed_advice(doc: dict, coll: str = "AllReduce") -> list[str]:
    return next(f["advice"] for f in doc["findings"] if f["coll_type"] == coll)


@pytest.mark.parametrize(
    ("folder", "expected"),
    [
        ("bytedance-straggler-SE", {"megatron"}),
        ("hta-nccl_parser_config", {"ddp"}),
        ("hta-ns_resolution_trace", {"ddp"}),
        ("hta-trace_diff_control", {"ddp", "torchrec"}),
        ("hta-negative_queue_length_values_check", {"ddp", "torchrec"}),
        ("deepseek-train-ep64", set()),
        ("hta-amd_trace", set()),
    ],
)
def test_real_traces_name_their_framework(folder: str, expected: set[str]) -> None:
    if not (SHARED_TRACES / folder).is_dir():
        pytest.skip("../shared/data/traces is not present")
    path = sorted(p for p in (SHARED_TRACES / folder).iterdir() if ".json" in p.name)[0]
    if folder == "bytedance-straggler-SE":
        path = SE / "rank0.json.gz"
    marks = framework_marks(load_rank(path))
    assert {m.framework for m in marks} == expected
    if folder == "bytedance-straggler-SE":  # Megatron's timers and its data-parallel groups
        assert {m.name for m in marks} >= {"forward-compute", "backward-compute", "dp_stage0"}


def test_the_megatron_job_gets_megatron_advice() -> None:
    if not SE.is_dir():
        pytest.skip("../shared/data/traces is not present")
    doc = analyze_json(SE)
    (megatron,) = doc["frameworks"]["detected"]
    assert megatron["key"] == "megatron" and megatron["ranks"] == 64
    assert doc["frameworks"]["inference"] is False
    advice = " ".join(a for f in doc["findings"] for a in f["advice"])
    assert "--overlap-grad-reduce" in exposed_advice(doc, "ReduceScatter")[0]
    assert "--overlap-grad-reduce" in exposed_advice(doc, "AllReduce")[0]
    for other in ("backward_prefetch", "MixedPrecision", "bucket_cap_mb", "FSDP"):
        assert other not in advice


@pytest.mark.parametrize(
    ("extra", "args", "key", "says"),
    [
        ([annotation("DistributedDataParallel.forward")], {}, "ddp", "bucket_cap_mb"),
        ([annotation("FSDP::pre_forward")], {}, "fsdp2", "set_requires_all_reduce"),
        (
            [],
            {"Process Group Name": "3", "Process Group Description": "DATA_PARALLEL_GROUP"},
            "megatron",
            "--overlap-grad-reduce",
        ),
        (launched_by("vllm::unified_attention"), {}, "vllm", "custom all-reduce"),
        # torchtitan's own mesh dim; it has no AllReduce knob of its own: the generic advice
        (
            [],
            {"Process Group Name": "2", "Process Group Description": "mesh_dp_shard"},
            "torchtitan",
            "bucket_cap_mb",
        ),
        (
            [kernel("void vllm::rms_norm_kernel<c10::BFloat16>", 1300, 5, None)],
            {},
            "vllm",
            "custom all-reduce",
        ),
    ],
)
def test_advice_is_the_detected_frameworks(
    tmp_path: Path, extra: list[dict], args: dict, key: str, says: str
) -> None:
    doc = run_with(tmp_path, extra, **args)
    assert [f["key"] for f in doc["frameworks"]["detected"]] == [key]
    assert doc["frameworks"]["inference"] is (key == "vllm")
    assert says in exposed_advice(doc)[0]


def test_no_framework_keeps_the_generic_advice(tmp_path: Path) -> None:
    doc = run_with(tmp_path, [])
    assert doc["frameworks"] is None
    # a DeviceMesh dim anyone names (mesh_dp) says no framework
    mesh = run_with(
        tmp_path, [], **{"Process Group Name": "1", "Process Group Description": "mesh_dp"}
    )
    assert mesh["frameworks"] is None
    assert exposed_advice(doc)[0].startswith("DDP: tune bucket_cap_mb")


def test_a_serving_engine_gets_no_training_advice(tmp_path: Path) -> None:
    # an exposed ReduceScatter in a vLLM trace: no FSDP / DDP knob
    events = [
        {**e, "name": e["name"].replace("AllReduce", "ReduceScatter")} for e in simple_events()
    ]
    write_trace(
        tmp_path / "rank0.json",
        trace_doc([*events, kernel("void vllm::rms_norm_kernel<float>", 1300, 5, None)], world=1),
    )
    doc = analyze_json(tmp_path)
    advice = exposed_advice(doc, "ReduceScatter")
    assert "serving engine" in advice[0]
    assert not any(word in " ".join(advice) for word in ("FSDP", "backward", "gradient"))


def test_graph_replays_are_not_told_to_capture_graphs(tmp_path: Path) -> None:
    write_run(graph_replay_run(capture_step=True), tmp_path)
    doc = analyze_json(tmp_path)
    host = next(f for f in doc["findings"] if f["kind"] == "host_bound")
    assert host["cost_pct"] > 50  # the generator's replays leave the GPU waiting
    assert "already captures or replays CUDA graphs" in host["advice"][0]
    assert HOST_BOUND_GENERIC[0] not in host["advice"]


def test_host_bound_advice_by_framework_and_graphs() -> None:
    vllm = Frameworks((DetectedFramework("vllm", "vLLM", 1, ("vllm::x",)),), inference=True)
    assert host_bound_advice(None, None) == HOST_BOUND_GENERIC
    assert host_bound_advice(vllm, "capture") == HOST_BOUND_CAPTURE
    assert "--enforce-eager" in host_bound_advice(vllm, None)[0]
    # replays: --enforce-eager is not set, so not "drop --enforce-eager"
    assert not any("--enforce-eager" in a for a in host_bound_advice(vllm, "replay"))
    assert all(
        "capture the step in CUDA graphs" not in a for a in host_bound_advice(vllm, "replay")
    )


@pytest.mark.parametrize(
    ("name", "label"),
    [
        ("DeepSpeedZeroOptimizer_Stage3.step", "DeepSpeed ZeRO-3"),
        ("deepspeed/runtime/zero/stage_1_and_2.py(1770): step", "DeepSpeed ZeRO-1/2"),
        ("DeepSpeedEngine.forward", "DeepSpeed"),
    ],
)
def test_deepspeed_names_its_zero_stage(tmp_path: Path, name: str, label: str) -> None:
    doc = run_with(tmp_path, [annotation(name)])
    (found,) = doc["frameworks"]["detected"]
    assert (found["key"], found["label"]) == ("deepspeed", label)
    assert "overlap_comm" in exposed_advice(doc)[0]
