"""DP x PP x TP with what real Megatron jobs show (pp.py, pp_layout.py): tensor-parallel ranks
inside each stage, one send/recv group per stage pair and direction, the embedding all-reduce
between the first and the last stage, receives that start once their send has, no Src/Dst."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from synth_helpers import load

from tracecomm.synth import RunSpec, dp_pp_run, expected_instances, expected_run, write_run
from tracecomm.synth.pp_layout import PipelineLayout

MEGA: dict[str, Any] = dict(
    p2p_groups="pair", embedding_allreduce=True, recv_waits_outside=True, peer_ranks=False
)


@pytest.fixture(scope="module")
def run() -> RunSpec:
    return dp_pp_run(2, 4, microbatches=4, steps=2, tp=2, seed=1, **MEGA)


def test_layout_and_groups() -> None:
    lay = PipelineLayout(2, 4, 2, "pair", True)
    assert lay.world == 16
    assert [lay.place(r) for r in (0, 1, 2, 5, 15)] == [
        (0, 0, 0),
        (0, 0, 1),
        (0, 1, 0),
        (1, 0, 1),
        (3, 1, 1),
    ]
    groups = {g.name: g.ranks for g in lay.groups()}
    assert groups["dp0_t1"] == (1, 3) and groups["tp2_d1"] == (10, 11)
    assert groups["pp_fwd_d0_s0_t0"] == (0, 4) and groups["pp_bwd_d1_s2_t1"] == (11, 15)
    assert groups["emb1_t0"] == (2, 14)
    # every send/recv group has two members, one per adjacent stage
    pair_groups = [m for n, m in groups.items() if n.startswith("pp_")]
    assert len(pair_groups) == 2 * 2 * 3 * 2 and all(len(m) == 2 for m in pair_groups)
    # tp = 1 keeps pp.py's names
    assert {g.name for g in PipelineLayout(2, 2).groups()} == {"dp0", "dp1", "pp0", "pp1"}


def test_tensor_parallel_all_reduces_per_layer(run: RunSpec) -> None:
    step = run.ranks[0].steps[0]
    counts = Counter(op.pg[:2] for op in step.ops if op.kind == "comm" and not op.p2p)
    # 4 micro-batches x 2 layers x (2 forward + 2 backward); one embedding, one DP all-reduce
    assert counts == {"tp": 32, "em": 1, "dp": 1}


def test_send_recv_in_pair_groups_without_peer_ranks(run: RunSpec, tmp_path: Path) -> None:
    paths = write_run(run, tmp_path)
    doc = load(next(p for p in paths if p.name.startswith("rank4.")))
    kernels = [
        e for e in doc["traceEvents"] if e.get("cat") == "kernel" and "SendRecv" in e["name"]
    ]
    assert kernels
    for e in kernels:
        args = e["args"]
        assert "Src Rank" not in args and "Dst Rank" not in args
        assert args["Process Group Name"].startswith("pp_")
        assert args["Process Group Ranks"] in ("[0, 4]", "[4, 8]")


def test_receives_start_once_their_send_has(run: RunSpec) -> None:
    sends: dict[tuple[int, int, str, int], int] = {}
    recvs: list[tuple[tuple[int, int, str, int], int]] = []
    for rank in run.ranks:
        offset = run.host_offsets_ns.get(rank.host, 0)  # back to the shared (true) clock
        seen: Counter[tuple[int, str]] = Counter()
        for op in sorted((o for o in rank.all_ops() if o.p2p), key=lambda o: o.launch_ns):
            k = seen[(op.peer, op.pg)]
            seen[(op.peer, op.pg)] += 1
            if op.p2p == "send":
                sends[(rank.rank, op.peer, op.pg, k)] = op.start_ns - offset
            else:
                recvs.append(((op.peer, rank.rank, op.pg, k), op.start_ns - offset))
    assert len(recvs) == len(sends) > 0
    for key, start in recvs:
        assert start >= sends[key]


def test_the_first_stage_is_last_at_the_embedding_all_reduce(run: RunSpec) -> None:
    embedding = [i for i in expected_instances(run) if i.group.startswith("emb")]
    assert embedding
    first_stage = {r for r in range(16) if r < 4}
    # in 1F1B the first stage runs the last backward: last by schedule, every time
    assert all(i.last_rank in first_stage for i in embedding)


def test_figures_add_up(run: RunSpec) -> None:
    for fig in expected_run(run).values():
        for f in fig.steps.values():
            assert f.compute_ns + f.exposed_comm_ns + f.exposed_memory_ns + f.idle_ns == f.window_ns


def test_an_overloaded_stage_and_a_slowed_worker_slow_the_step() -> None:
    def step(**kw: Any) -> int:
        spec = dp_pp_run(2, 4, microbatches=4, steps=2, jitter=0.0, **MEGA, **kw)
        figures = expected_run(spec)[0]
        return max(f.window_ns for f in figures.steps.values())

    clean = step()
    assert step(layers_per_stage=(2, 2, 2, 3)) > 1.1 * clean
    assert step(slow_rank=0, slowdown=1.0) > 1.1 * clean
