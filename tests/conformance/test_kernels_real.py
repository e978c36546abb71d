"""The kernel view (metrics.md §15) on the real shared traces, against a plain reference
computed here from the raw JSON (json + Decimal, no tracecomm code): per kernel name of the
included steps, count, summed, median, p95 and max duration."""

from __future__ import annotations

import gzip
import json
from collections import defaultdict
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Any

import pytest

from tracecomm.engine import breakdown
from tracecomm.engine.kernels import TOP_KERNELS
from tracecomm.ingest import load_rank
from tracecomm.run.request import Request

FILES = (
    "hta-nccl_parser_config/nccl_data.json.gz",
    "hta-ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz",
    "hta-trace_diff_control/control.json.gz",
    "hta-negative_queue_length_values_check/rank0.json.gz",
    "hta-trace_filter/sampled_rank-0.json.gz",
    "hta-trace_filter/sampled_rank-1.json.gz",
    "hta-amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz",
    "hta-mtia_trace_single_rank/mtia_rank_0.json.gz",
    "bytedance-straggler-SE/rank0.json.gz",
    "bytedance-straggler-SE/rank64.json.gz",
)
_DEVICE = {"kernel", "gpu_memcpy", "memcpy", "gpu_memset", "memset", "mtia_ccp_events"}
_LAUNCH = {"cuda_runtime", "runtime", "cuda_driver", "mtia_runtime"}


def ns(value: Any) -> int:
    """µs as written (decimal text) to integer ns, halves away from zero."""
    return int((Decimal(str(value)) * 1000).quantize(Decimal(1), rounding=ROUND_HALF_UP))


def reference(path: Path, included: set[int]) -> dict[str, dict[str, list[int]]]:
    """class ('compute' / 'comm' / 'memory') -> kernel name -> durations (ns) of the device
    events launched (by correlation) inside an included ProfilerStep."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as handle:
        events = [e for e in json.load(handle)["traceEvents"] if e.get("ph") == "X"]
    steps = [
        (ns(e["ts"]), ns(e["ts"]) + ns(e.get("dur", 0)), int(e["name"].split("#")[1]))
        for e in events
        if str(e.get("cat", "")).lower() == "user_annotation"
        and str(e.get("name", "")).startswith("ProfilerStep#")
    ]
    launch_at: dict[int, int] = {}
    for e in events:
        corr = (e.get("args") or {}).get("correlation")
        if str(e.get("cat", "")).lower() in _LAUNCH and isinstance(corr, int):
            launch_at.setdefault(corr, ns(e["ts"]))
    out: dict[str, dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
    for e in events:
        cat = str(e.get("cat", "")).lower()
        if cat not in _DEVICE:
            continue
        corr = (e.get("args") or {}).get("correlation")
        t = launch_at.get(corr) if isinstance(corr, int) else None
        step = next((n for lo, hi, n in steps if t is not None and lo <= t < hi), None)
        if step not in included:
            continue
        name = e["name"]
        memory = cat not in ("kernel", "mtia_ccp_events") or (
            cat == "mtia_ccp_events" and name.startswith("dma_")
        )
        comm = "nccl" in name.lower() or "rccl" in name.lower()
        cls = "memory" if memory else "comm" if comm else "compute"
        out[cls][name].append(max(0, ns(e.get("dur", 0))))
    return out


@pytest.mark.parametrize("name", FILES)
def test_top_kernels_agree_with_a_plain_reference(shared_traces: Path, name: str) -> None:
    path = shared_traces / name
    result = breakdown(load_rank(path, Request(()).read))
    if result.kernels is None:
        pytest.skip(f"{name}: no included step on a GPU timeline")
    included = {s.step for s in result.included_steps}
    want = reference(path, included)
    got: dict[str, dict[str, tuple[int, int, int, int, int]]] = defaultdict(dict)
    totals: dict[str, int] = defaultdict(int)
    for group in result.kernels.groups:
        totals[group.cls] += group.total_ns
        for r in group.top:
            got[group.cls][r.name] = (r.count, r.total_ns, r.median_ns, r.p95_ns, r.max_ns)
    assert set(got) == {c for c, kernels in want.items() if kernels}
    for cls, kernels in want.items():
        assert totals[cls] == sum(sum(d) for d in kernels.values()), cls
        if cls == "comm":
            continue  # grouped by collective type there: each type's top list is its own
        ranked = sorted(kernels, key=lambda n: (-sum(kernels[n]), n))[:TOP_KERNELS]
        assert list(got[cls]) == ranked, cls
        for kernel in ranked:
            d = sorted(kernels[kernel])
            p95_rank = -(-95 * len(d) // 100) - 1
            expected = (len(d), sum(d), d[(len(d) - 1) // 2], d[p95_rank], d[-1])
            assert got[cls][kernel] == expected, (cls, kernel)


def test_real_graph_replays_are_tied_to_their_launch(shared_traces: Path) -> None:
    """The shared trace ``hta-negative_queue_length_values_check`` replays CUDA graphs (70
    cudaGraphLaunch calls replaying 135 kernels and 210 memsets, each carrying its launch's
    correlation, §16): every one is tied to the step its launch lies in, as the raw JSON says."""
    from tracecomm.engine.classify import classify
    from tracecomm.engine.steps import link_launches

    path = shared_traces / "hta-negative_queue_length_values_check/rank0.json.gz"
    with gzip.open(path, "rt") as handle:
        events = [e for e in json.load(handle)["traceEvents"] if e.get("ph") == "X"]
    steps = [
        (ns(e["ts"]), ns(e["ts"]) + ns(e["dur"]), int(e["name"].split("#")[1]))
        for e in events
        if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#")
    ]
    graph_at = {
        e["args"]["correlation"]: ns(e["ts"])
        for e in events
        if e.get("cat") == "cuda_runtime" and e["name"] == "cudaGraphLaunch"
    }
    assert len(graph_at) == 70
    want = sorted(
        (ns(e["ts"]), next((n for lo, hi, n in steps if lo <= graph_at[c] < hi), None))
        for e in events
        if str(e.get("cat")).lower() in _DEVICE and (c := e["args"].get("correlation")) in graph_at
    )
    assert len(want) == 135 + 210
    rank = load_rank(path, Request(()).read)
    linked = link_launches(classify(rank), rank)
    graph = linked.filter(linked["graph_via"].is_not_null())
    assert set(graph["graph_via"]) == {"correlation"}
    assert sorted(graph.select("start_ns", "step").iter_rows()) == want
