"""Written files: valid Kineto JSON, exact times, consistent links, determinism."""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
from synth_helpers import T0, load, op, to_ns

from tracecomm.synth import RankSpec, RunSpec, Step, fsdp_run, write_run
from tracecomm.synth.expected import step_window, union
from tracecomm.synth.schedule import Naming, TimeFormat

DEVICE_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}
CPU_CATS = {"cpu_op", "user_annotation", "cuda_runtime", "python_function"}
HEADER_KEYS = {"schemaVersion", "deviceProperties", "distributedInfo", "traceEvents", "traceName"}


@pytest.fixture(scope="module")
def small_run() -> RunSpec:
    return fsdp_run(world_size=2, steps=2, layers=3, seed=4)


def spans(doc: dict[str, Any], cats: set[str]) -> list[dict[str, Any]]:
    return [e for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") in cats]


def interval(doc: dict[str, Any], event: dict[str, Any]) -> tuple[int, int]:
    start = to_ns(doc, event["ts"])
    return start, start + to_ns({}, event["dur"])


def test_files_are_valid_kineto(tmp_path: Path, small_run: RunSpec) -> None:
    paths = write_run(small_run, tmp_path)
    assert [p.name for p in paths] == ["rank0.pt.trace.json.gz", "rank1.pt.trace.json.gz"]
    for rank, path in enumerate(paths):
        assert path.read_bytes()[:2] == b"\x1f\x8b"
        doc = load(path)
        assert set(doc) >= HEADER_KEYS
        assert doc["schemaVersion"] == 1
        assert len(doc["deviceProperties"]) == 8
        assert doc["distributedInfo"]["rank"] == rank
        assert doc["distributedInfo"]["world_size"] == 2
        assert doc["displayTimeUnit"] == "ms"
        assert doc["traceEvents"][-1]["name"] == "Record Window End"
        names = Counter(e["name"] for e in doc["traceEvents"])
        assert names["PyTorch Profiler (0)"] == 1
        assert names["Iteration Start: PyTorch Profiler"] == 1


def test_uncompressed_and_deterministic(tmp_path: Path, small_run: RunSpec) -> None:
    plain = RunSpec(small_run.world_size, small_run.ranks, gzip=False)
    first = write_run(plain, tmp_path / "a")
    second = write_run(plain, tmp_path / "b")
    assert first[0].name == "rank0.pt.trace.json"
    for a, b in zip(first, second, strict=True):
        assert a.read_bytes() == b.read_bytes()
    gz_a, gz_b = write_run(small_run, tmp_path / "c"), write_run(small_run, tmp_path / "d")
    assert [p.read_bytes() for p in gz_a] == [p.read_bytes() for p in gz_b]


@pytest.mark.parametrize("time_format", ["relative", "epoch_us"])
def test_device_times_round_trip_exactly(tmp_path: Path, time_format: TimeFormat) -> None:
    run = fsdp_run(world_size=2, steps=2, layers=2, seed=3, time_format=time_format, gzip=False)
    for spec, path in zip(run.ranks, write_run(run, tmp_path), strict=True):
        text = path.read_text()
        number = r"\d+\.\d{3}" if time_format == "relative" else r"\d+"
        for value in re.findall(r'"(?:ts|dur)": ([^,\n}]+)', text):
            assert re.fullmatch(number, value), value
        doc = load(path)
        assert ("baseTimeNanoseconds" in doc) == (time_format == "relative")
        got = Counter((e["tid"], *interval(doc, e)) for e in spans(doc, DEVICE_CATS))
        want = Counter((o.stream, o.start_ns, o.end_ns) for o in spec.all_ops() if o.recorded)
        assert got == want
        steps = [
            e for e in spans(doc, {"user_annotation"}) if e["name"].startswith("ProfilerStep#")
        ]
        assert [interval(doc, e) for e in steps] == [
            (s.cpu_start_ns, s.cpu_end_ns) for s in spec.steps
        ]


def test_sub_microsecond_parts_survive(tmp_path: Path) -> None:
    spec = RankSpec(0, (Step(1, T0, T0 + 5_000, (op("compute", 7, 1_001, 2_999, 1),)),))
    (path,) = write_run(RunSpec(1, (spec,)), tmp_path)
    doc = load(path)
    (kernel,) = spans(doc, {"kernel"})
    assert interval(doc, kernel) == (T0 + 1_001, T0 + 2_999)
    assert doc["baseTimeNanoseconds"] % 7_889_238_000_000_000 == 0
    assert doc["baseTimeNanoseconds"] <= to_ns(doc, 0) < T0


def test_links_between_cpu_and_gpu(tmp_path: Path, small_run: RunSpec) -> None:
    spec = small_run.ranks[1]
    doc = load(write_run(small_run, tmp_path)[1])
    runtime = {e["args"]["correlation"]: e for e in spans(doc, {"cuda_runtime"})}
    cpu_ops = {e["args"]["External id"]: e for e in spans(doc, {"cpu_op", "user_annotation"})}
    linked = unlinked = 0
    kernels = spans(doc, DEVICE_CATS)
    for kernel in kernels:
        args = kernel["args"]
        if "External id" not in args:
            unlinked += 1
            assert args["correlation"] not in runtime
            continue
        linked += 1
        call = runtime[args["correlation"]]
        assert call["args"]["External id"] == args["External id"]
        parent = cpu_ops[args["External id"]]
        assert interval(doc, parent)[0] <= interval(doc, call)[0]
        assert interval(doc, call)[1] <= interval(doc, parent)[1]
        if "Collective name" in args:
            assert parent["name"] == "record_param_comms"
            assert parent["args"]["Collective name"] == args["Collective name"]
            assert parent["args"]["Seq"] == args["Seq"]
    assert unlinked == sum(1 for o in spec.all_ops() if not o.launched) >= 1
    not_recorded = sum(1 for o in spec.all_ops() if o.launched and not o.recorded)
    assert len(runtime) == linked + not_recorded
    flows = Counter(e["ph"] for e in doc["traceEvents"] if e.get("cat") == "ac2g")
    assert flows == {"s": len(runtime), "f": linked}


def assert_cpu_nesting(doc: dict[str, Any], spec: RankSpec) -> None:
    by_thread: dict[int, list[tuple[int, int, str]]] = defaultdict(list)
    for event in spans(doc, CPU_CATS):
        by_thread[event["tid"]].append((*interval(doc, event), event["cat"]))
    steps = [(s.cpu_start_ns, s.cpu_end_ns) for s in spec.steps]
    for events in by_thread.values():
        events.sort(key=lambda e: (e[0], -e[1]))
        stack: list[tuple[int, int, str]] = []
        for start, end, cat in events:
            while stack and stack[-1][1] <= start:
                stack.pop()
            assert not stack or end <= stack[-1][1], "CPU spans overlap without nesting"
            stack.append((start, end, cat))
            inside = [s for s in steps if s[0] <= start < s[1]]
            # python_function <module> encloses the steps themselves.
            if cat != "python_function":
                assert not inside or end <= inside[0][1], "CPU span leaves its step"
        calls = sorted((s, e) for s, e, cat in events if cat == "cuda_runtime")
        assert all(e > s for s, e in calls)
        assert all(a[1] <= b[0] for a, b in pairwise(calls))


def test_cpu_spans_nest_and_stay_in_steps(tmp_path: Path, small_run: RunSpec) -> None:
    doc = load(write_run(small_run, tmp_path)[0])
    assert len({e["tid"] for e in spans(doc, CPU_CATS)}) == 2  # main and autograd
    assert_cpu_nesting(doc, small_run.ranks[0])


@pytest.mark.parametrize("time_format", ["relative", "epoch_us"])
def test_cpu_layout_survives_dense_launches(tmp_path: Path, time_format: TimeFormat) -> None:
    u = 1 if time_format == "relative" else 1000
    ops = (
        op("compute", 7, 10 * u, 11 * u, 0),  # launched at the very start of the step
        op("comm", 20, 10 * u, 12 * u, u, coll="AllGather", nelems=8),
        op("memset", 7, 11 * u, 12 * u, 2 * u),
        # The autograd thread launches at the same instant as the main thread.
        op("compute", 7, 12 * u, 13 * u, u, launch_thread="autograd"),
        op("compute", 7, 13 * u, 14 * u, 4 * u, launch_thread="autograd"),
    )
    steps = (Step(1, T0, T0 + 5 * u, ops), Step(2, T0 + 5 * u, T0 + 6 * u, ()))
    extra = (op("memcpy", 13, 7 * u, 8 * u, 6 * u),)  # launched right at the end of step 2
    spec = RankSpec(0, steps, extra, time_format=time_format)
    doc = load(write_run(RunSpec(1, (spec,)), tmp_path)[0])
    assert_cpu_nesting(doc, spec)
    assert len(spans(doc, {"cuda_runtime"})) == 6


def test_sync_records_sit_in_idle_time(tmp_path: Path, small_run: RunSpec) -> None:
    spec = small_run.ranks[0]
    doc = load(write_run(small_run, tmp_path)[0])
    busy = union([interval(doc, e) for e in spans(doc, DEVICE_CATS)])
    syncs = [interval(doc, e) for e in spans(doc, {"cuda_sync"})]
    assert syncs
    for start, end in syncs:
        assert all(end <= b0 or start >= b1 for b0, b1 in busy)
    for step in spec.steps:
        window = step_window(step)
        assert window is not None
        assert any(window[0] <= s and e <= window[1] for s, e in syncs)


@pytest.mark.parametrize("naming", ["dev", "legacy"])
def test_comm_kernel_names_and_metadata(tmp_path: Path, naming: Naming) -> None:
    run = fsdp_run(world_size=2, steps=1, layers=2, naming=naming)
    doc = load(write_run(run, tmp_path)[0])
    comm = [e for e in spans(doc, {"kernel"}) if "nccl" in e["name"].lower()]
    prefix = "ncclDevKernel_" if naming == "dev" else "ncclKernel_"
    assert comm and all(e["name"].startswith(prefix) for e in comm)
    sizes = {
        e["args"]["Collective name"]: (e["args"]["In msg nelems"], e["args"]["Out msg nelems"])
        for e in comm
    }
    assert sizes["_allgather_base"][1] == 2 * sizes["_allgather_base"][0]
    assert sizes["_reduce_scatter_base"][0] == 2 * sizes["_reduce_scatter_base"][1]
    assert sizes["allreduce"] == (1, 1)


def test_seq_matches_across_ranks(tmp_path: Path) -> None:
    run = fsdp_run(world_size=3, steps=2, layers=2, seed=9, gzip=False)
    sequences = []
    for path in write_run(run, tmp_path):
        doc = load(path)
        comm = [e for e in spans(doc, {"kernel"}) if "Seq" in e["args"]]
        comm.sort(key=lambda e: e["args"]["Seq"])
        sequences.append([(e["args"]["Seq"], e["args"]["Collective name"]) for e in comm])
    assert sequences[0] == sequences[1] == sequences[2]
    seqs = [s for s, _ in sequences[0]]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))


def test_unlinked_generic_kernel_has_no_metadata(tmp_path: Path) -> None:
    ops = (
        op("compute", 7, 100, 900, 50),
        op("comm", 20, 200, 700, 60, coll="AllToAll", nelems=4),
    )
    extra = (op("comm", 20, 1000, 1200, 1000, coll="AllToAll", launched=False),)
    spec = RankSpec(0, (Step(1, T0, T0 + 100, ops),), extra)
    doc = load(write_run(RunSpec(2, (spec,), gzip=False), tmp_path)[0])
    comm = sorted((e for e in spans(doc, {"kernel"}) if "nccl" in e["name"]), key=lambda e: e["ts"])
    assert [e["name"].split("(")[0] for e in comm] == ["ncclDevKernel_Generic"] * 2
    assert comm[0]["args"]["Collective name"] == "all_to_all"
    assert "Collective name" not in comm[1]["args"] and "External id" not in comm[1]["args"]
