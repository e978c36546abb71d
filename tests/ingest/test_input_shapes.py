"""Input shapes users have (issue 7): kernel-name families across NCCL / RCCL versions,
merged multi-rank traces, user rules for communication that is no NCCL kernel, several GPUs
per process, B / E pairs. Each through the CLI, asserting the figures."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tests.conftest import (
    analyze_json,
    kernel,
    launch,
    simple_events,
    step,
    trace_doc,
    write_trace,
)
from tracecomm.cli import app


def one_comm_kernel(name: str, **args: Any) -> list[dict[str, Any]]:
    """A step with a 100 µs compute kernel and a 100 µs comm kernel after it."""
    return [
        step(1, 990, 400),
        launch(995, 1),
        launch(996, 2),
        kernel("sm90_gemm", 1000, 100, 1),
        kernel(name, 1100, 100, 2, stream=20, **args),
    ]


@pytest.mark.parametrize(
    ("name", "args", "coll"),
    [
        ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)", {}, "AllReduce"),  # ≤2.18
        (
            "ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
            {},
            "ReduceScatter",
        ),
        # 2.19+ Generic: the type comes from the metadata Kineto copies onto the kernel
        (
            "ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)",
            {"Collective name": "_allgather_base"},
            "AllGather",
        ),
        ("ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)", {}, "Other"),
        ("ncclSymDevKernel_AllReduce_LL_sum_bf16", {}, "AllReduce"),  # 2.27 symmetric memory
        ("ncclSymkDevKernel_AllGather_LL", {}, "AllGather"),  # 2.28+
        (
            "ncclDevKernel_Generic(ncclDevComm*, unsigned long, ncclWork*)",
            {"Collective name": "allreduce"},
            "AllReduce",
        ),  # RCCL ROCm 6
    ],
)
def test_comm_kernel_families(tmp_path: Path, name: str, args: dict[str, Any], coll: str) -> None:
    write_trace(tmp_path / "rank0.json", trace_doc(one_comm_kernel(name, **args), world=1))
    doc = analyze_json(tmp_path, "-q")
    assert [(t["coll_type"], t["exposed_comm_ns"]) for t in doc["by_type"]] == [(coll, 100_000)]


def test_rocm_trace_with_hip_launches(tmp_path: Path) -> None:
    events = one_comm_kernel("ncclDevKernel_Generic(ncclDevComm*, unsigned long, ncclWork*)")
    events[1]["name"] = events[2]["name"] = "hipExtLaunchKernel"
    props = [{"id": 0, "name": "AMD Instinct MI300X", "numSms": 304, "warpSize": 64}]
    write_trace(tmp_path / "rank0.json", trace_doc(events, world=1, deviceProperties=props))
    doc = analyze_json(tmp_path, "-q", "--model-flops-per-step", "1e9")
    rank = doc["ranks"][0]
    assert rank["devices"] == ["AMD Instinct MI300X"] and rank["comm_kernels"] == 1
    assert rank["window"]["figures"]["compute_ns"] == 100_000
    assert doc["throughput"]["devices"][0]["peak"]["tflops"] == 1307.4


def test_merged_trace_by_pid(tmp_path: Path) -> None:
    events = []
    for rank, offset in ((0, 1000), (1, 5000)):
        for e in simple_events(offset):
            events.append(
                {
                    **e,
                    "pid": rank,
                    "args": {**e["args"], "correlation": e["args"].get("correlation")},
                }
            )
    for e in events:
        if e["args"].get("correlation") is None:
            e["args"].pop("correlation")
    write_trace(tmp_path / "merged.json", trace_doc(events, rank=None))
    doc = analyze_json(tmp_path, "-q", "--rank-from", "pid")
    assert [r["rank"] for r in doc["ranks"]] == [0, 1]
    for r in doc["ranks"]:
        assert r["window"]["figures"]["compute_ns"] == 150_000
        assert r["window"]["figures"]["exposed_comm_ns"] == 50_000
        assert r["path"].endswith(f"merged.json#rank{r['rank']}")


def test_merged_trace_by_process_name(tmp_path: Path) -> None:
    events: list[dict[str, Any]] = []
    for pid, rank, offset in ((7001, 5, 1000), (7002, 6, 3000)):
        events.append(
            {
                "ph": "M",
                "name": "process_name",
                "pid": pid,
                "args": {"name": f"Rank {rank} (trainer)"},
            }
        )
        events += [{**e, "pid": pid} for e in simple_events(offset)]
    events.append({"ph": "M", "name": "process_name", "pid": 99, "args": {"name": "python"}})
    events.append(
        {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 99, "tid": 1, "ts": 1, "dur": 1}
    )
    write_trace(tmp_path / "merged.json", trace_doc(events, rank=None))
    doc, stderr = analyze_json(tmp_path, "--rank-from", "process_name", with_stderr=True)
    assert "1 process(es) with no rank by process_name left out: 99" in stderr
    assert [r["rank"] for r in doc["ranks"]] == [5, 6]


def test_user_rules_for_nvtx_ranges_and_kernels(tmp_path: Path) -> None:
    events = simple_events()
    # a custom collective: a GPU-side NVTX range, no NCCL kernel; and a fused kernel whose
    # name mentions nccl but computes
    events.append(
        {
            "ph": "X",
            "cat": "gpu_user_annotation",
            "name": "grads-reduce-scatter",
            "pid": 0,
            "tid": 30,
            "ts": 1150,
            "dur": 40,
            "args": {"device": 0, "stream": 30},
        }
    )
    events[-2]["name"] = "nccl_fused_gemm_epilogue"  # the last compute kernel, 1200–1250 µs
    write_trace(tmp_path / "rank0.json", trace_doc(events, world=1))
    plain = analyze_json(tmp_path, "-q")["ranks"][0]["window"]["figures"]
    assert plain["comm_ns"] == 150_000  # the fused kernel is taken for communication
    doc = analyze_json(
        tmp_path,
        "-q",
        "--comm-pattern",
        "grads-reduce-scatter=reducescatter",
        "--compute-pattern",
        "fused_gemm",
    )
    figures = doc["ranks"][0]["window"]["figures"]
    assert figures["compute_ns"] == 150_000
    assert figures["comm_ns"] == 140_000  # the all-reduce (100) and the range (40)
    types = {t["coll_type"]: t["comm_ns"] for t in doc["by_type"]}
    assert types == {"ReduceScatter": 40_000, "AllReduce": 100_000}
    # the same rules from tracecomm.toml
    (tmp_path / "tracecomm.toml").write_text(
        '[rules]\ncomm = ["grads-reduce-scatter=ReduceScatter"]\ncompute = ["fused_gemm"]\n'
    )
    assert analyze_json(tmp_path, "-q")["ranks"][0]["window"]["figures"] == figures


def test_rules_in_pyproject(tmp_path: Path) -> None:
    write_trace(tmp_path / "rank0.json", trace_doc(one_comm_kernel("my_allreduce_kernel"), world=1))
    (tmp_path / "pyproject.toml").write_text(
        '[tool.tracecomm.rules]\ncomm = ["my_allreduce=AllReduce"]\n'
    )
    assert analyze_json(tmp_path, "-q")["by_type"][0]["coll_type"] == "AllReduce"
    (tmp_path / "pyproject.toml").write_text('[tool.tracecomm.rules]\ncomm = ["(unclosed"]\n')
    result = CliRunner().invoke(app, ["analyze", str(tmp_path)])
    assert result.exit_code == 2 and "[rules] '(unclosed'" in result.stderr


def test_several_gpus_per_process(tmp_path: Path) -> None:
    events = simple_events()
    second = kernel("sm90_gemm", 1150, 40, None)  # in the idle gap of the first GPU
    second["args"]["device"] = 1
    events.append(second)
    props = [{"id": 0, "name": "NVIDIA H100"}, {"id": 1, "name": "NVIDIA H100 PCIe"}]
    write_trace(tmp_path / "rank0.json", trace_doc(events, world=1, deviceProperties=props))
    rank = analyze_json(tmp_path, "-q")["ranks"][0]
    assert rank["devices"] == ["NVIDIA H100", "NVIDIA H100 PCIe"]  # most used first
    assert rank["unlinked_events"] == 1  # the second GPU's kernel launched from nowhere
    # one timeline for the process: both GPUs' work in the union
    assert rank["window"]["figures"]["compute_ns"] == 150_000 + 40_000
    assert rank["window"]["figures"]["idle_ns"] == 10_000


def test_begin_end_pairs(tmp_path: Path) -> None:
    events = [e for e in simple_events() if e["name"] != "sm90_gemm"]
    gemm = kernel("sm90_gemm", 1000, 100, 1)
    begin = {k: v for k, v in gemm.items() if k != "dur"} | {"ph": "B"}
    end = {"ph": "E", "pid": 0, "tid": 7, "ts": 1100}
    write_trace(tmp_path / "rank0.json", trace_doc([begin, *events, end], world=1))
    figures = analyze_json(tmp_path, "-q")["ranks"][0]["window"]["figures"]
    assert figures["compute_ns"] == 150_000 and figures["exposed_comm_ns"] == 50_000


def test_string_pids_and_tids(tmp_path: Path) -> None:
    events = simple_events()
    for e in events:
        e["pid"], e["tid"] = f"{e['pid']}", f"stream {e['tid']}"
    write_trace(tmp_path / "rank0.json", trace_doc(events, world=1))
    assert analyze_json(tmp_path, "-q")["ranks"][0]["window"]["figures"]["compute_ns"] == 150_000
