"""DP x PP (1F1B): groups, schedule order, send/recv pairing, delay propagation, figures."""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest
from synth_helpers import load, to_ns

from tracecomm.synth import (
    Figures,
    Op,
    RunSpec,
    dp_pp_groups,
    dp_pp_run,
    expected_run,
    write_run,
)
from tracecomm.synth.pp import one_f_one_b

Doc = dict[str, Any]
FWD_FIRST = "vectorized_layer_norm_kernel"  # first kernel of a forward layer
BWD_FIRST = "CUDAFunctor_add"  # first kernel of a backward layer (also the loss add)


def assert_identity(f: Figures) -> None:
    assert f.compute_ns + f.exposed_comm_ns + f.exposed_memory_ns + f.idle_ns == f.window_ns
    assert f.overlapped_comm_ns + f.exposed_comm_ns == f.comm_ns


def p2p_ops(run: RunSpec, rank: int) -> list[Op]:
    return [o for o in run.ranks[rank].all_ops() if o.p2p]


@pytest.fixture(scope="module")
def dppp(tmp_path_factory: pytest.TempPathFactory) -> tuple[RunSpec, list[Doc]]:
    run = dp_pp_run(2, 4, microbatches=4, steps=2, seed=3, gzip=False)
    return run, [load(p) for p in write_run(run, tmp_path_factory.mktemp("dppp"))]


def test_one_f_one_b_order() -> None:
    assert one_f_one_b(0, 4, 4) == [
        ("F", 0),
        ("F", 1),
        ("F", 2),
        ("F", 3),
        ("B", 0),
        ("B", 1),
        ("B", 2),
        ("B", 3),
    ]
    assert one_f_one_b(3, 4, 4) == [
        ("F", i // 2) if i % 2 == 0 else ("B", i // 2) for i in range(8)
    ]
    assert one_f_one_b(1, 4, 6)[:4] == [("F", 0), ("F", 1), ("F", 2), ("B", 0)]
    for stage in range(4):
        order = one_f_one_b(stage, 4, 2)
        assert Counter(k for k, _ in order) == {"F": 2, "B": 2}


def test_groups_layout() -> None:
    groups = {g.name: g for g in dp_pp_groups(2, 4)}
    assert groups["dp0"].ranks == (0, 1) and groups["dp3"].ranks == (6, 7)
    assert groups["pp0"].ranks == (0, 2, 4, 6) and groups["pp1"].ranks == (1, 3, 5, 7)
    assert set(groups) == {"dp0", "dp1", "dp2", "dp3", "pp0", "pp1"}


def test_pg_config_and_hosts(dppp: tuple[RunSpec, list[Doc]]) -> None:
    run, docs = dppp
    assert run.world_size == 8 and len(run.ranks) == 8
    for rank, doc in enumerate(docs):
        info = doc["distributedInfo"]
        got = [(c["pg_name"], c["ranks"]) for c in info["pg_config"]]
        stage, d = divmod(rank, 2)
        assert got == [
            ("0", list(range(8))),
            (f"dp{stage}", [2 * stage, 2 * stage + 1]),
            (f"pp{d}", list(range(d, 8, 2))),
        ]
        assert doc["host_name"] == "node0"


def forward_backward_order(run: RunSpec, rank: int, step: int) -> list[str]:
    """F/B per micro-batch as the compute stream ran them, read from the kernel names."""
    step_ops = next(s for s in run.ranks[rank].steps if s.number == step).ops
    compute = sorted((o for o in step_ops if o.kind == "compute"), key=lambda o: o.start_ns)
    out: list[str] = []
    layers = 2
    fwd = [i for i, o in enumerate(compute) if FWD_FIRST in o.name]
    # Each forward has `layers` layer-norm-led layers, two layer norms each.
    out_f = fwd[:: 2 * layers]
    bwd_kernels = [i for i, o in enumerate(compute) if "flash_bwd" in o.name]
    out_b = bwd_kernels[::layers]
    for i in sorted(out_f + out_b):
        out.append("F" if i in out_f else "B")
    return out


@pytest.mark.parametrize("stage", range(4))
def test_compute_follows_1f1b(dppp: tuple[RunSpec, list[Doc]], stage: int) -> None:
    run, _ = dppp
    for d in range(2):
        got = forward_backward_order(run, stage * 2 + d, 12)
        assert got == [k for k, _ in one_f_one_b(stage, 4, 4)]
        # Warm-up: pp - s - 1 forwards before the first backward.
        assert got.index("B") == min(4 - stage - 1, 4) + 1


def test_send_recv_pairs(dppp: tuple[RunSpec, list[Doc]]) -> None:
    run, docs = dppp
    # (pg, src, dst, k) -> {"send": (src, dst, rank, end), "recv": ...}: the k-th op of each
    # direction between two ranks pairs with the k-th on the other end.
    pairs: dict[tuple[str, int, int, int], dict[str, tuple[int, int, int, int]]] = defaultdict(dict)
    for rank, doc in enumerate(docs):
        seqs, seen = [], Counter[tuple[str, int, int, str]]()
        kernels = [
            e
            for e in doc["traceEvents"]
            if e.get("ph") == "X" and e.get("cat") == "kernel" and "Src Rank" in e["args"]
        ]
        for e in sorted(kernels, key=lambda e: to_ns(doc, e["ts"])):
            a = e["args"]
            assert e["name"] == "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)"
            assert a["Process Group Name"] == f"pp{rank % 2}" and a["Group size"] == 4
            assert a["Process Group Ranks"] == str(list(range(rank % 2, 8, 2)))
            kind = a["Collective name"]
            assert kind in ("send", "recv")
            assert (a["Src Rank"] if kind == "send" else a["Dst Rank"]) == rank
            end = to_ns(doc, e["ts"]) + to_ns({}, e["dur"]) - run.host_offsets_ns["node0"]
            link = (a["Process Group Name"], a["Src Rank"], a["Dst Rank"], kind)
            key = (*link[:3], seen[link])
            seen[link] += 1
            assert kind not in pairs[key], key
            pairs[key][kind] = (a["Src Rank"], a["Dst Rank"], rank, end)
            seqs.append(a["Seq"])
        # PyTorch's own per-rank p2p counter, as if steps 0..FIRST_STEP-1 had run before
        per_step = len(seqs) // 2
        assert sorted(seqs) == list(range(12 * per_step + 1, 14 * per_step + 1)), (
            rank
        )  # steps 12, 13
    # 2 pipelines x 2 steps x 4 micro-batches x 3 links x 2 directions.
    assert len(pairs) == 2 * 2 * 4 * 3 * 2
    for key, ends in pairs.items():
        assert set(ends) == {"send", "recv"}, key
        send, recv = ends["send"], ends["recv"]
        assert send[:2] == recv[:2] and (send[2], recv[2]) == send[:2]
        assert abs(send[1] // 2 - send[0] // 2) == 1  # neighbouring stages
        assert send[3] == recv[3]  # both ends of the pair finish together (true time)
    cpu = [
        e["name"]
        for e in docs[2]["traceEvents"]
        if e.get("cat") == "user_annotation" and e["name"][:9] in ("nccl:send", "nccl:recv")
    ]
    # Rank 2 is stage 1 of pp0: group rank 1, neighbours 0 and 2.
    assert set(cpu) == {"nccl:recv 1<-0", "nccl:send 1->2", "nccl:recv 1<-2", "nccl:send 1->0"}


def test_pairs_end_together_in_spec() -> None:
    run = dp_pp_run(1, 3, microbatches=3, steps=1, seed=5, host_offsets_ns=[123_456])
    ends: dict[tuple[str, int, int, int], list[tuple[str, int]]] = defaultdict(list)
    for rank in range(3):
        seen = Counter[tuple[int, int, str]]()
        for o in sorted(p2p_ops(run, rank), key=lambda o: o.start_ns):
            link = (rank, o.peer, "send") if o.p2p == "send" else (o.peer, rank, "recv")
            ends[(o.pg, link[0], link[1], seen[link])].append((o.p2p, o.end_ns))
            seen[link] += 1
            assert o.stream in (32, 36, 40, 44) and o.coll == "SendRecv"
    for pair in ends.values():
        assert sorted(k for k, _ in pair) == ["recv", "send"]
        assert pair[0][1] == pair[1][1]


def test_recv_gates_compute() -> None:
    run = dp_pp_run(1, 2, microbatches=2, steps=1, seed=1)
    ops = run.ranks[1].all_ops()
    for recv in (o for o in ops if o.p2p == "recv"):
        nxt = min(
            (o for o in ops if o.kind == "compute" and o.launch_ns > recv.launch_ns),
            key=lambda o: o.launch_ns,
        )
        assert nxt.start_ns >= recv.end_ns


def test_slow_stage0_delays_its_pipeline() -> None:
    base = dp_pp_run(2, 4, microbatches=4, steps=2, seed=2)
    slow = dp_pp_run(2, 4, microbatches=4, steps=2, seed=2, slow_rank=0, slowdown=0.5)

    def starts(run: RunSpec, rank: int) -> dict[tuple[str, int], int]:
        return {(o.pg, o.seq): o.start_ns for o in run.ranks[rank].all_ops() if o.kind == "comm"}

    for rank in (2, 4, 6):  # the later stages of pipeline pp0
        a, b = starts(base, rank), starts(slow, rank)
        assert a.keys() == b.keys()
        late = [k for k in a if b[k] > a[k] + 50_000]
        assert len(late) > len(a) // 2, rank
        # ... and they reach their stage's gradient all-reduce later than their dp partner.
        ar = [k for k in b if k[0].startswith("dp")]
        partner = starts(slow, rank + 1)
        assert all(b[k] > partner[k] for k in ar)
    # The other pipeline is untouched until the first gradient all-reduce holds it.
    first_ar = min(k for k in starts(base, 3) if k[0] == "dp1")
    assert starts(slow, 2)[first_ar] - starts(base, 2)[first_ar] > 500_000
    assert starts(slow, 3)[first_ar] == starts(base, 3)[first_ar]
    assert slow.host_offsets_ns == base.host_offsets_ns


def test_imbalanced_stage_has_more_compute() -> None:
    run = dp_pp_run(1, 3, layers_per_stage=(2, 4, 2), seed=4)
    got = expected_run(run)
    assert got[1].total.compute_ns > 1.7 * got[0].total.compute_ns


@pytest.mark.parametrize(
    ("dp", "pp", "micro"), [(2, 4, 4), (1, 2, 3), (3, 1, 2), (2, 3, 1), (1, 5, 8)]
)
def test_expected_figures(dp: int, pp: int, micro: int) -> None:
    run = dp_pp_run(dp, pp, microbatches=micro, steps=3, seed=dp + pp, slow_rank=0, slowdown=0.1)
    got = expected_run(run)
    assert sorted(got) == list(range(dp * pp))
    colls = ({"AllReduce"} if dp > 1 else set()) | ({"SendRecv"} if pp > 1 else set())
    for rank_expected in got.values():
        assert rank_expected.complete_steps == (12, 13, 14)
        assert rank_expected.incomplete_steps == ()
        for figures in (rank_expected.total, *rank_expected.steps.values()):
            assert_identity(figures)
            assert figures.idle_ns > 0
            assert set(figures.by_type) == colls


def test_deterministic_and_round_trips(tmp_path: Path) -> None:
    kw: dict[str, Any] = {"seed": 7, "slow_rank": 1, "slowdown": 0.3, "host_offsets_ns": [-3_001]}
    run, again = dp_pp_run(2, 2, **kw), dp_pp_run(2, 2, **kw)
    assert run == again
    a, b = write_run(run, tmp_path / "a"), write_run(again, tmp_path / "b")
    assert [p.read_bytes() for p in a] == [p.read_bytes() for p in b]
    for spec, path in zip(run.ranks, a, strict=True):
        doc = load(path)
        kernels = [
            e
            for e in doc["traceEvents"]
            if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
        ]
        got = sorted((e["tid"], to_ns(doc, e["ts"]), to_ns({}, e["dur"])) for e in kernels)
        want = sorted((o.stream, o.start_ns, o.dur_ns) for o in spec.all_ops() if o.recorded)
        assert got == want
    legacy = dp_pp_run(1, 2, steps=1, naming="legacy", gzip=False)
    doc = load(write_run(legacy, tmp_path / "c")[0])
    names = {e["name"] for e in doc["traceEvents"] if "Src Rank" in e.get("args", {})}
    assert {n for n in names if "nccl" in n.lower()} == {
        "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)"
    }


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="layers_per_stage"):
        dp_pp_run(1, 2, layers_per_stage=(1,))
    with pytest.raises(ValueError, match="slow_rank"):
        dp_pp_run(1, 2, slow_rank=2)
    with pytest.raises(ValueError, match=">= 1"):
        dp_pp_run(0, 2)
    with pytest.raises(ValueError, match="p2p"):
        Op("comm", 32, 10, 5, 1, coll="AllReduce", p2p="send", peer=1)
