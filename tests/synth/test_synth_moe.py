"""The all-to-all families (MoE with NCCL or DeepEP, DLRM): files, split sizes and truths."""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from synth_helpers import load, to_ns

from tracecomm.synth import (
    Figures,
    Op,
    ProcessGroup,
    RankSpec,
    RunSpec,
    Step,
    dlrm_run,
    expected_alltoall_ns,
    expected_run,
    expected_tokens,
    moe_run,
    write_run,
)
from tracecomm.synth import names as kn
from tracecomm.synth.__main__ import main
from tracecomm.synth.dlrm import BWD_ANNOTATION, DDP_STREAM, FWD_ANNOTATION
from tracecomm.synth.moe import _EXPERT_BWD, _EXPERT_FWD, DEEPEP_STREAM
from tracecomm.synth.ops import ROW_ELEMS

Doc = dict[str, Any]
Event = dict[str, Any]
SENDRECV = kn.LEGACY_COMM["SendRecv"]


def docs_of(run: RunSpec, tmp_path: Path) -> list[Doc]:
    return [load(p) for p in write_run(run, tmp_path)]


def xs(doc: Doc, cat: str | None = None) -> list[Event]:
    return [e for e in doc["traceEvents"] if e.get("ph") == "X" and cat in (None, e["cat"])]


def span(doc: Doc, e: Event) -> tuple[int, int]:
    start = to_ns(doc, e["ts"])
    return start, start + to_ns({}, e["dur"])


def enclosing(doc: Doc, inner: Event, name: str) -> list[Event]:
    """The X events called name on inner's thread whose span holds inner's."""
    a, b = span(doc, inner)
    return [
        e
        for e in xs(doc)
        if e["name"] == name
        and (e["pid"], e["tid"]) == (inner["pid"], inner["tid"])
        and span(doc, e)[0] <= a
        and b <= span(doc, e)[1]
    ]


def runtime_of(doc: Doc, kernel: Event) -> Event:
    corr = kernel["args"]["correlation"]
    (call,) = [e for e in xs(doc, "cuda_runtime") if e["args"]["correlation"] == corr]
    return call


def assert_identity(f: Figures) -> None:
    assert f.compute_ns + f.exposed_comm_ns + f.exposed_memory_ns + f.idle_ns == f.window_ns
    assert f.overlapped_comm_ns + f.exposed_comm_ns == f.comm_ns


# ---- names and validation --------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        kn.DEEPEP_DISPATCH,
        kn.DEEPEP_COMBINE,
        kn.DEEPEP_NOTIFY,
        kn.DEEPEP_CACHED_NOTIFY,
        kn.DEEPEP_LAYOUT,
        kn.DEEPEP_LL_DISPATCH,
        kn.DEEPEP_LL_COMBINE,
        kn.DPSK_DISPATCH,
    ],
)
def test_deepep_kernels_are_alltoall_communication(name: str) -> None:
    assert kn.type_from_name(name) == "AllToAll"
    assert kn.is_comm_name(name) and not kn.is_comm_name(kn.FP8_CAST)
    assert kn.deepep_cpu_op(name).endswith(("_dispatch", "_combine", "get_dispatch_layout"))
    op = Op("comm", 27, 10, 5, 0, name, "AllToAll", metadata=False)
    assert kn.comm_type(op, "legacy") == "AllToAll"


def test_launch_context_types_sendrecv_kernels() -> None:
    def a2a(**kw: Any) -> Op:
        return Op("comm", 20, 10, 5, 0, coll="AllToAll", **kw)

    assert kn.comm_type(a2a(metadata=False, annotated=True), "legacy") == "AllToAll"
    assert kn.comm_type(a2a(metadata=False, annotated=True), "dev") == "AllToAll"  # Generic
    assert kn.comm_type(a2a(metadata=True), "legacy") == "AllToAll"
    # nothing names the collective: the name decides
    assert kn.comm_type(a2a(metadata=False), "legacy") == "SendRecv"
    send = Op("comm", 20, 10, 5, 0, coll="SendRecv", p2p="send", peer=1)
    assert kn.comm_type(send, "legacy") == "SendRecv"


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"annotated": True}, "annotated is for a comm op without metadata"),
        ({"in_splits": (1, 2), "out_splits": (1, 2), "metadata": False}, "need metadata"),
        ({"in_splits": (1, 2), "out_splits": (1,), "nelems": 3 * ROW_ELEMS}, "one size"),
        ({"in_splits": (1, -2), "out_splits": (1, 2), "nelems": 0}, "one size"),
        ({"in_splits": (1, 2), "out_splits": (3, 0), "nelems": 3}, "nelems must be"),
    ],
)
def test_op_refuses_bad_annotation_and_splits(fields: dict[str, Any], says: str) -> None:
    says = "split sizes belong to a comm op with metadata" if says == "need metadata" else says
    with pytest.raises(ValueError, match=says):
        Op("comm", 20, 10, 5, 0, coll="AllToAll", **fields)


def test_schedule_checks_splits_and_deepep_context() -> None:
    good = Op(
        "comm", 20, 10, 5, 0, coll="AllToAll", in_splits=(1, 2), out_splits=(2, 2), nelems=3 * 7168
    )
    with pytest.raises(ValueError, match="2 split sizes for a group of 3"):
        RunSpec(3, (RankSpec(0, (Step(1, 0, 9, (good,)),)),))
    group = ProcessGroup("1", "ep", (0, 2))
    RunSpec(
        3, (RankSpec(0, (Step(1, 0, 9, (dataclasses.replace(good, pg="1"),)),)),), groups=(group,)
    )
    deepep = Op("comm", 27, 10, 5, 0, kn.DEEPEP_DISPATCH, "AllToAll")  # metadata by default
    with pytest.raises(ValueError, match="launches from its own op"):
        RankSpec(0, (Step(1, 0, 9, (deepep,)),))
    # an annotated launch may name a SendRecv kernel, not another collective's
    ar = Op("comm", 20, 10, 5, 0, kn.LEGACY_COMM["AllReduce"], "AllToAll", metadata=False)
    with pytest.raises(ValueError, match="the name implies AllReduce"):
        RankSpec(0, (Step(1, 0, 9, (dataclasses.replace(ar, annotated=True),)),))


# ---- MoE files -------------------------------------------------------------------------------


def test_annotated_alltoalls_are_written_as_older_kineto_did(tmp_path: Path) -> None:
    run = moe_run(ranks=2, steps=4, layers=8, gzip=False)
    docs = docs_of(run, tmp_path)
    for doc in docs:
        kernels = [e for e in xs(doc, "kernel") if e["name"] == SENDRECV]
        # per layer and step: dispatch, combine and their two backward all-to-alls
        assert len(kernels) == 4 * 8 * 4
        cpu = [e for e in xs(doc) if e["cat"] != "kernel" and "External id" in e["args"]]
        cpu_ids = {e["args"]["External id"] for e in cpu}
        cpu_ids -= {e["args"]["External id"] for e in xs(doc, "cuda_runtime")}
        assert max(cpu_ids) > min(k["args"]["correlation"] for k in kernels)  # ranges meet
        for kernel in kernels:
            assert kernel["args"]["External id"] == kernel["args"]["correlation"]
            assert kernel["args"]["External id"] not in cpu_ids  # links to no CPU op
            assert "Collective name" not in kernel["args"]
            call = runtime_of(doc, kernel)
            assert call["name"] == "cudaLaunchKernel"
            (note,) = enclosing(doc, call, "nccl:all_to_all")
            assert note["cat"] == "user_annotation"
            (record,) = enclosing(doc, note, "record_param_comms")
            assert "Collective name" not in record["args"]
            assert len(enclosing(doc, record, "c10d::alltoall_base_")) == 1
        assert not [e for e in xs(doc) if e["name"] == "nccl:coalesced"]


def test_split_sizes_parse_add_up_and_agree_across_ranks(tmp_path: Path) -> None:
    run = moe_run(ranks=4, steps=1, layers=2, metadata=True, imbalance=2.0, hot_rank=2)
    docs = docs_of(run, tmp_path)
    by_seq: dict[int, dict[int, tuple[list[int], list[int]]]] = {}
    for rank, doc in enumerate(docs):
        records = [e for e in xs(doc, "cpu_op") if e["name"] == "record_param_comms"]
        assert len(records) == 2 * 4
        for e in records:
            args = e["args"]
            assert args["Collective name"] == "all_to_all" and args["Group size"] == 4
            ins, outs = json.loads(args["In split size"]), json.loads(args["Out split size"])
            assert len(ins) == len(outs) == 4
            assert sum(ins) * ROW_ELEMS == args["In msg nelems"]
            assert sum(outs) * ROW_ELEMS == args["Out msg nelems"]
            assert args["Process Group Description"] == "ep"
            by_seq.setdefault(args["Seq"], {})[rank] = (ins, outs)
    assert len(by_seq) == 8
    for seq, per_rank in by_seq.items():
        assert sorted(per_rank) == [0, 1, 2, 3], seq
        for r in range(4):
            for p in range(4):
                assert per_rank[r][0][p] == per_rank[p][1][r]  # r sends to p what p receives
        received = [sum(per_rank[r][1]) for r in range(4)]
        assert sum(received) == sum(sum(per_rank[r][0]) for r in range(4))
    # the dispatch: the hot rank receives twice the others' rows
    first = by_seq[min(by_seq)]
    assert [sum(first[r][1]) for r in range(4)] == [4096, 4096, 8192, 4096]


def test_expected_tokens_give_the_imbalance() -> None:
    run = moe_run(ranks=8, steps=1, layers=2, metadata=True, imbalance=3.0, hot_rank=5)
    tokens = expected_tokens(run)
    assert len(tokens) == 2 * 4  # layers x (dispatch, combine, their backwards)
    ratios = Counter((t.ratio, t.max_rank) for t in tokens)
    # dispatch and combine-backward send to the experts; the other two send back (balanced)
    assert ratios == {(3.0, 5): 4, (1.0, 0): 4}
    for t in tokens:
        assert t.group == "1" and t.step == 12 and sorted(t.received) == list(range(8))
        assert sum(t.received.values()) == sum(t.sent.values())
        if t.ratio == 3.0:
            assert t.received[5] == 3 * t.received[0] == 3 * 8 * (4096 // 8)
    assert expected_tokens(moe_run(ranks=2, steps=1, layers=1)) == []  # annotated: no splits


@pytest.mark.parametrize("comm", ["nccl", "deepep"])
def test_overlap_hides_alltoall(comm: Any) -> None:
    def exposed(overlap: bool) -> int:
        run = moe_run(ranks=4, steps=2, layers=2, comm=comm, overlap=overlap, seed=1)
        out = 0
        for rank, truth in expected_run(run).items():
            assert_identity(truth.total)
            for figures in truth.steps.values():
                assert_identity(figures)
            assert set(truth.total.by_type) == {"AllToAll"}
            total, hidden = truth.total.by_type["AllToAll"]
            assert total == truth.total.comm_ns
            # one comm stream: the kernels never overlap each other
            assert expected_alltoall_ns(run)[rank] == total
            out += hidden
        return out

    assert exposed(True) < exposed(False)


def test_hot_rank_computes_its_experts_imbalance_times_as_long() -> None:
    layers, steps = 2, 2
    run = moe_run(ranks=4, steps=steps, layers=layers, imbalance=2.5, hot_rank=3, jitter=0)
    compute = [
        sum(op.dur_ns for s in r.steps for op in s.ops if op.kind == "compute") for r in run.ranks
    ]
    assert len(set(compute[:3])) == 1
    experts_ns = 1000 * sum(d for _, d in _EXPERT_FWD + _EXPERT_BWD) * layers * steps
    kernels = layers * steps * (len(_EXPERT_FWD) + len(_EXPERT_BWD))
    assert abs(compute[3] - compute[0] - 1.5 * experts_ns) <= kernels  # int() per kernel


def test_deepep_file(tmp_path: Path) -> None:
    run = moe_run(ranks=2, steps=1, layers=2, comm="deepep", overlap=True, gzip=False)
    doc = docs_of(run, tmp_path)[0]
    kernels = Counter(e["name"] for e in xs(doc, "kernel") if e["args"]["stream"] == DEEPEP_STREAM)
    micro, layers = 2, 2
    assert kernels == {
        kn.DEEPEP_LAYOUT: 2 * layers * micro,  # each dispatch, forward and backward
        kn.FP8_CAST: 2 * layers * micro,
        kn.DEEPEP_NOTIFY: layers * micro,
        kn.DEEPEP_CACHED_NOTIFY: layers * micro,
        kn.DEEPEP_DISPATCH: 2 * layers * micro,
        kn.DEEPEP_COMBINE: 2 * layers * micro,
    }
    cpu = Counter(e["name"] for e in xs(doc, "cpu_op") if "deep_ep" in e["name"])
    assert cpu == {
        "deep_ep::Buffer::get_dispatch_layout": 8,
        "deep_ep::Buffer::internode_dispatch": 16,
        "deep_ep::Buffer::internode_combine": 8,
    }
    assert not [e for e in xs(doc) if e["name"] == "record_param_comms"]
    assert not [e for e in xs(doc) if e["name"].startswith("nccl:")]
    for kernel in xs(doc, "kernel"):
        if kernel["name"] == kn.DEEPEP_DISPATCH:
            (op,) = enclosing(doc, runtime_of(doc, kernel), "deep_ep::Buffer::internode_dispatch")
            assert op["args"]["External id"] == kernel["args"]["External id"]
    ops = run.ranks[0].all_ops()
    assert {op.kind for op in ops if op.stream == DEEPEP_STREAM} == {"comm", "compute"}


def test_moe_is_deterministic() -> None:
    assert moe_run(ranks=2, steps=1, layers=1, seed=4) == moe_run(
        ranks=2, steps=1, layers=1, seed=4
    )
    assert moe_run(ranks=2, steps=1, layers=1, seed=4) != moe_run(
        ranks=2, steps=1, layers=1, seed=5
    )


@pytest.mark.parametrize(
    ("kwargs", "says"),
    [
        ({"ranks": 1}, "ranks must be >= 2"),
        ({"comm": "deepep", "metadata": True}, "no collective metadata"),
        ({"imbalance": 0.5}, "imbalance must be >= 1"),
        ({"hot_rank": 8}, "hot rank 8"),
        ({"tokens": 4}, "too few tokens"),
    ],
)
def test_moe_refuses(kwargs: dict[str, Any], says: str) -> None:
    with pytest.raises(ValueError, match=says):
        moe_run(**kwargs)


# ---- DLRM ------------------------------------------------------------------------------------


def test_dlrm_file_and_truth(tmp_path: Path) -> None:
    run = dlrm_run(ranks=4, steps=2, gzip=False)
    doc = docs_of(run, tmp_path)[1]
    kernels = xs(doc, "kernel")
    a2a = [e for e in kernels if e["name"] == SENDRECV]
    assert len(a2a) == 2 * 2
    for kernel in a2a:
        (note,) = enclosing(doc, runtime_of(doc, kernel), "nccl:all_to_all")
        outer = enclosing(doc, note, FWD_ANNOTATION) + enclosing(doc, note, BWD_ANNOTATION)
        assert len(outer) == 1 and outer[0]["cat"] == "user_annotation"
    reduces = [e for e in kernels if e["name"] == kn.LEGACY_COMM["AllReduce"]]
    assert len(reduces) == 2 * 3
    for kernel in reduces:
        assert kernel["args"]["stream"] == DDP_STREAM
        assert kernel["args"]["Collective name"] == "allreduce"
    assert {e["name"] for e in kernels} >= {kn.EMB_FWD, kn.EMB_BWD}
    for truth in expected_run(run).values():
        assert_identity(truth.total)
        assert set(truth.total.by_type) == {"AllReduce", "AllToAll"}
        total, exposed = truth.total.by_type["AllReduce"]
        assert exposed < total / 2  # mostly behind the dense backward


def test_dlrm_imbalance_and_metadata(tmp_path: Path) -> None:
    run = dlrm_run(ranks=4, steps=1, metadata=True, imbalance=2.0, hot_rank=0)
    tokens = expected_tokens(run)
    assert [(t.ratio, t.max_rank) for t in tokens] == [(1.0, 0), (2.0, 0)]  # fwd, bwd
    assert tokens[0].sent == {0: 2 * 4 * 512, 1: 4 * 512, 2: 4 * 512, 3: 4 * 512}
    doc = docs_of(run, tmp_path)[0]
    records = [e for e in xs(doc) if e["name"] == "record_param_comms"]
    assert {e["args"]["Collective name"] for e in records} == {"all_to_all", "allreduce"}
    fwd = next(e for e in records if e["args"]["Collective name"] == "all_to_all")
    assert json.loads(fwd["args"]["In split size"]) == [1024] * 4


# ---- CLI -------------------------------------------------------------------------------------


def test_cli_writes_moe_and_dlrm(tmp_path: Path) -> None:
    moe = ["--layout", "moe", "--ranks", "2", "--steps", "1", "--layers", "1"]
    assert main([str(tmp_path / "a"), *moe, "--ep-comm", "deepep", "--overlap"]) == 0
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == [
        "rank0.pt.trace.json.gz",
        "rank1.pt.trace.json.gz",
    ]
    names = {e["name"] for e in xs(load(tmp_path / "a/rank0.pt.trace.json.gz"), "kernel")}
    assert kn.DEEPEP_DISPATCH in names
    args = [str(tmp_path / "b"), *moe, "--metadata", "--imbalance", "2", "--no-gzip"]
    assert main(args) == 0
    text = (tmp_path / "b/rank1.pt.trace.json").read_text()
    assert '"In split size": "[2048, 4096]"' in text and SENDRECV in text
    dlrm = [str(tmp_path / "c"), "--layout", "dlrm", "--ranks", "2", "--steps", "1"]
    assert main([*dlrm, "--no-gzip"]) == 0
    assert FWD_ANNOTATION in (tmp_path / "c/rank0.pt.trace.json").read_text()


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--overlap"], "--overlap: moe and dlrm layouts only"),
        (["--layout", "dp-tp", "--imbalance", "2"], "--imbalance: moe and dlrm layouts only"),
        (["--layout", "dlrm", "--ep-comm", "deepep"], "--ep-comm: not for the dlrm layout"),
        (["--layout", "moe", "--straggler", "1"], "--straggler: not for the moe layout"),
        (["--layout", "moe", "--ep-comm", "deepep", "--metadata"], "no collective metadata"),
        (["--layout", "moe", "--host-bound", "9"], "--host-bound: fsdp layout only"),
    ],
)
def test_cli_refuses_what_does_not_apply(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str], says: str
) -> None:
    assert main([str(tmp_path / "out"), *flags]) == 2
    assert says in capsys.readouterr().err
