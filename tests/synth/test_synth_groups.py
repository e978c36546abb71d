"""Host clock offsets, a skipped collective and DP x TP process groups: truths and files agree."""

from __future__ import annotations

import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from synth_helpers import T0, load, op, to_ns

from tracecomm.synth import (
    Figures,
    ProcessGroup,
    RankSpec,
    RunSpec,
    Step,
    dp_tp_groups,
    dp_tp_run,
    expected_run,
    fsdp_run,
    write_run,
)
from tracecomm.synth.fsdp import _HOST_SKEW_NS

Doc = dict[str, Any]


def assert_identity(f: Figures) -> None:
    assert f.compute_ns + f.exposed_comm_ns + f.exposed_memory_ns + f.idle_ns == f.window_ns
    assert f.overlapped_comm_ns + f.exposed_comm_ns == f.comm_ns


def comm_kernels(doc: Doc) -> list[dict[str, Any]]:
    return [
        e
        for e in doc["traceEvents"]
        if e.get("ph") == "X" and e.get("cat") == "kernel" and "Seq" in e["args"]
    ]


def comm_cpu_ops(doc: Doc) -> list[dict[str, Any]]:
    return [
        e
        for e in doc["traceEvents"]
        if e.get("ph") == "X" and e["name"] == "record_param_comms" and "Seq" in e["args"]
    ]


def ends_by_key(doc: Doc) -> dict[tuple[str, int], int]:
    """(process group, Seq) -> absolute end of that collective's kernel, in ns."""
    return {
        (e["args"]["Process Group Name"], e["args"]["Seq"]): to_ns(doc, e["ts"])
        + to_ns({}, e["dur"])
        for e in comm_kernels(doc)
    }


def write_docs(run: RunSpec, tmp_path: Path) -> list[Doc]:
    return [load(p) for p in write_run(run, tmp_path)]


# ---- host clock offsets --------------------------------------------------------------------


def test_default_offsets_are_recorded() -> None:
    run = fsdp_run(world_size=17, steps=1, layers=1)
    assert run.host_offsets_ns == {"node0": 0, "node1": _HOST_SKEW_NS, "node2": 2 * _HOST_SKEW_NS}


@pytest.mark.parametrize("offsets", [(-12_345_678, 37_000_123), (49_999_999, -50_000_000), (0, 0)])
def test_host_offsets_show_in_collective_ends(tmp_path: Path, offsets: tuple[int, int]) -> None:
    run = fsdp_run(world_size=16, steps=2, layers=2, seed=2, host_offsets_ns=offsets, gzip=False)
    assert run.host_offsets_ns == {"node0": offsets[0], "node1": offsets[1]}
    docs = write_docs(run, tmp_path)
    truth = offsets[1] - offsets[0]
    for near, far in ((0, 8), (3, 15)):
        a, b = ends_by_key(docs[near]), ends_by_key(docs[far])
        assert a.keys() == b.keys() and a
        diffs = [b[k] - a[k] - truth for k in a]
        # Ends differ by the simulated transfer jitter only (0.2 % of at most ~1.2 ms).
        assert max(abs(d) for d in diffs) < 6_000
        assert abs(statistics.median(diffs)) < 2_000
    # Ranks on one host share its clock: their ends agree without any offset.
    same = ends_by_key(docs[1])
    assert all(abs(same[k] - end) < 6_000 for k, end in ends_by_key(docs[0]).items())


def test_offsets_in_epoch_us_are_whole_microseconds() -> None:
    run = fsdp_run(
        world_size=9, steps=1, layers=1, time_format="epoch_us", host_offsets_ns=(-1_500, 2_999)
    )
    assert run.host_offsets_ns == {"node0": -2_000, "node1": 2_000}


def test_too_few_offsets_are_rejected() -> None:
    with pytest.raises(ValueError, match="2 hosts"):
        fsdp_run(world_size=9, steps=1, layers=1, host_offsets_ns=[0])


# ---- a rank that skips one collective ------------------------------------------------------


def seqs(doc: Doc) -> list[int]:
    return [e["args"]["Seq"] for e in comm_kernels(doc)]


@pytest.mark.parametrize("skip", [(2, 0), (2, 5), (0, 13), (3, 20)])
def test_skipped_collective_is_absent_on_that_rank_only(
    tmp_path: Path, skip: tuple[int, int]
) -> None:
    run = fsdp_run(world_size=4, steps=2, layers=2, seed=1, skip=skip, gzip=False)
    ((rank, pg, seq),) = run.skipped
    assert (rank, pg) == (skip[0], "0")
    docs = write_docs(run, tmp_path)
    full = sorted(seqs(docs[(rank + 1) % 4]))
    # Seq is the same counter on every rank: the k-th collective carries the k-th Seq.
    assert full == list(range(full[0], full[0] + len(full)))
    assert full[skip[1]] == seq
    for r, doc in enumerate(docs):
        got = sorted(seqs(doc))
        cpu = sorted(e["args"]["Seq"] for e in comm_cpu_ops(doc))
        want = [s for s in full if s != seq] if r == rank else full
        assert got == cpu == want, r
    expected = expected_run(run)
    assert expected[rank].comm_kernels == expected[(rank + 1) % 4].comm_kernels - 1
    for got_rank in expected.values():
        assert got_rank.complete_steps == (12, 13)
        for figures in (got_rank.total, *got_rank.steps.values()):
            assert_identity(figures)


def test_skip_matches_plain_run_elsewhere() -> None:
    plain = fsdp_run(world_size=3, steps=1, layers=2, seed=4)
    skipped = fsdp_run(world_size=3, steps=1, layers=2, seed=4, skip=(1, 3))
    assert plain.skipped == ()
    # Before the skipped collective, nothing changes on any rank.
    for a, b in zip(plain.ranks, skipped.ranks, strict=True):
        comms_a = [o for o in a.all_ops() if o.kind == "comm"]
        comms_b = [o for o in b.all_ops() if o.kind == "comm"]
        assert comms_a[:3] == comms_b[:3]
        assert len(comms_b) == len(comms_a) - (1 if b.rank == 1 else 0)


def test_skip_is_deterministic(tmp_path: Path) -> None:
    def files(sub: str) -> list[bytes]:
        run = fsdp_run(world_size=2, steps=1, layers=2, skip=(1, 2))
        return [p.read_bytes() for p in write_run(run, tmp_path / sub)]

    assert files("a") == files("b")


@pytest.mark.parametrize("skip", [(4, 0), (-1, 0), (0, -1), (0, 10_000)])
def test_bad_skip_is_rejected(skip: tuple[int, int]) -> None:
    with pytest.raises(ValueError, match="skip"):
        fsdp_run(world_size=4, steps=1, layers=1, skip=skip)


# ---- DP x TP -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def dptp(tmp_path_factory: pytest.TempPathFactory) -> tuple[RunSpec, list[Doc]]:
    run = dp_tp_run(4, 4, steps=2, layers=2, seed=3, slow_rank=5, slowdown=0.2, gzip=False)
    return run, write_docs(run, tmp_path_factory.mktemp("dptp"))


def test_dp_tp_groups_layout() -> None:
    groups = {g.name: g for g in dp_tp_groups(2, 4)}
    assert groups["tp0"].ranks == (0, 1, 2, 3) and groups["tp1"].ranks == (4, 5, 6, 7)
    assert groups["dp0"].ranks == (0, 4) and groups["dp3"].ranks == (3, 7)
    assert set(groups) == {"tp0", "tp1", "dp0", "dp1", "dp2", "dp3"}


def test_dp_tp_pg_config(dptp: tuple[RunSpec, list[Doc]]) -> None:
    run, docs = dptp
    assert run.world_size == 16 and len(run.groups) == 8
    for rank, doc in enumerate(docs):
        info = doc["distributedInfo"]
        assert (info["rank"], info["world_size"]) == (rank, 16)
        tp_ranks = list(range(rank // 4 * 4, rank // 4 * 4 + 4))
        dp_ranks = list(range(rank % 4, 16, 4))
        want = [
            ("0", "default_pg", list(range(16))),
            (f"tp{rank // 4}", "mesh_tp", tp_ranks),
            (f"dp{rank % 4}", "mesh_dp", dp_ranks),
        ]
        got = [(c["pg_name"], c["pg_desc"], c["ranks"]) for c in info["pg_config"]]
        assert got == want
        assert info["pg_count"] == 3
        assert all(c["pg_size"] == len(c["ranks"]) for c in info["pg_config"])
        assert doc["host_name"] == f"node{rank // 8}"


def test_dp_tp_collective_metadata(dptp: tuple[RunSpec, list[Doc]]) -> None:
    _, docs = dptp
    for rank, doc in enumerate(docs):
        groups = {c["pg_name"]: c for c in doc["distributedInfo"]["pg_config"]}
        kernels = comm_kernels(doc)
        assert {e["args"]["Process Group Name"] for e in kernels} == {
            f"tp{rank // 4}",
            f"dp{rank % 4}",
        }
        for e in kernels:
            args = e["args"]
            group = groups[args["Process Group Name"]]
            assert args["Process Group Description"] == group["pg_desc"]
            assert args["Process Group Ranks"] == str(group["ranks"])
            assert args["Group size"] == group["pg_size"] == 4
            name = args["Collective name"]
            n_in, n_out = args["In msg nelems"], args["Out msg nelems"]
            if group["pg_desc"] == "mesh_tp":
                assert name == "allreduce" and n_in == n_out
            elif name == "_reduce_scatter_base":
                assert n_in == 4 * n_out
            elif name == "_allgather_base":
                assert n_out == 4 * n_in
            else:
                assert name == "allreduce" and n_in == n_out == 1
        for e in comm_cpu_ops(doc):
            group = groups[e["args"]["Process Group Name"]]
            assert e["args"]["Rank"] == group["ranks"].index(rank)


def test_dp_tp_seq_per_group(dptp: tuple[RunSpec, list[Doc]]) -> None:
    run, docs = dptp
    per_group: dict[str, dict[int, list[tuple[int, str, int, int]]]] = defaultdict(dict)
    for rank, doc in enumerate(docs):
        calls: dict[str, list[tuple[int, str, int, int]]] = defaultdict(list)
        for e in sorted(comm_kernels(doc), key=lambda e: e["args"]["Seq"]):
            a = e["args"]
            calls[a["Process Group Name"]].append(
                (a["Seq"], a["Collective name"], a["In msg nelems"], a["Out msg nelems"])
            )
        for name, seq_calls in calls.items():
            per_group[name][rank] = seq_calls
    assert set(per_group) == {g.name for g in run.groups}
    for group in run.groups:
        members = per_group[group.name]
        assert sorted(members) == list(group.ranks)
        first = members[group.ranks[0]]
        assert all(calls == first for calls in members.values()), group.name
        numbers = [s for s, *_ in first]
        assert numbers == list(range(numbers[0], numbers[0] + len(numbers)))
        # The counter ran before the window opened: 12 earlier steps of the same calls.
        assert numbers[0] == 12 * len(numbers) // 2 + 1


def test_dp_tp_collectives_end_together_per_group(dptp: tuple[RunSpec, list[Doc]]) -> None:
    run, docs = dptp
    # DP groups span both hosts: take each host's clock offset out first.
    offsets = [run.host_offsets_ns[f"node{r // 8}"] for r in range(16)]
    assert offsets[8] == _HOST_SKEW_NS
    ends = [ends_by_key(doc) for doc in docs]
    for group in run.groups:
        keys = {k for k in ends[group.ranks[0]] if k[0] == group.name}
        assert len(keys) == 2 * (8 if group.name.startswith("tp") else 5)  # 2 steps, 2 layers
        for r in group.ranks:
            assert {k for k in ends[r] if k[0] == group.name} == keys
        for key in keys:
            times = [ends[r][key] - offsets[r] for r in group.ranks]
            assert max(times) - min(times) < 6_000


def test_dp_tp_slow_rank_holds_its_groups(dptp: tuple[RunSpec, list[Doc]]) -> None:
    run, _ = dptp
    expected = expected_run(run)

    def comm(rank: int, coll: str) -> int:
        return expected[rank].total.by_type[coll][0]

    # Rank 5 is slow: its TP peers (4, 6, 7) wait in every TP all-reduce, other TP groups don't.
    assert min(comm(r, "AllReduce") for r in (4, 6, 7)) > 1.3 * max(
        comm(r, "AllReduce") for r in (0, 1, 2, 3)
    )
    # Its DP peers (1, 9, 13) wait in the reduce-scatters.
    assert min(comm(r, "ReduceScatter") for r in (1, 9, 13)) > max(
        comm(r, "ReduceScatter") for r in (0, 8, 12)
    )
    assert expected[5].total.compute_ns > 1.15 * expected[4].total.compute_ns


@pytest.mark.parametrize(("dp", "tp"), [(4, 4), (2, 8), (8, 1), (1, 4), (3, 2)])
def test_dp_tp_expected_figures(dp: int, tp: int) -> None:
    run = dp_tp_run(dp, tp, steps=3, layers=3, seed=dp + tp, slowdown=0.1)
    got = expected_run(run)
    assert sorted(got) == list(range(dp * tp))
    colls = {"AllReduce"} if dp == 1 else {"AllReduce", "ReduceScatter", "AllGather"}
    for rank_expected in got.values():
        assert rank_expected.complete_steps == (12, 13, 14)
        assert rank_expected.incomplete_steps == ()
        for figures in (rank_expected.total, *rank_expected.steps.values()):
            assert_identity(figures)
            assert figures.exposed_comm_ns > 0 and figures.idle_ns > 0
            assert set(figures.by_type) == colls
        if dp > 1:
            # The gradient reduce-scatters hide behind backward compute.
            assert rank_expected.total.overlapped_comm_ns > 0


def test_dp_tp_is_deterministic_and_round_trips(tmp_path: Path) -> None:
    run = dp_tp_run(2, 2, steps=1, layers=2, seed=7, host_offsets_ns=[-3_000_001])
    again = dp_tp_run(2, 2, steps=1, layers=2, seed=7, host_offsets_ns=[-3_000_001])
    assert run == again and run.host_offsets_ns == {"node0": -3_000_001}
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


def test_run_spec_checks_groups() -> None:
    comm = op("comm", 20, 10, 20, 0, coll="AllReduce", nelems=4, pg="tp0", seq=3)
    spec = RankSpec(1, (Step(1, T0, T0 + 100, (comm,)),))
    RunSpec(4, (spec,), groups=(ProcessGroup("tp0", "mesh_tp", (0, 1)),))
    with pytest.raises(ValueError, match="does not contain"):
        RunSpec(4, (spec,), groups=(ProcessGroup("tp0", "mesh_tp", (2, 3)),))
    with pytest.raises(ValueError, match="unknown"):
        RunSpec(4, (spec,))
    with pytest.raises(ValueError, match="not all in"):
        RunSpec(4, (), groups=(ProcessGroup("tp0", "mesh_tp", (3, 4)),))
    with pytest.raises(ValueError, match="duplicate group names"):
        RunSpec(4, (), groups=(ProcessGroup("a", "x", (0,)), ProcessGroup("a", "y", (1,))))
    with pytest.raises(ValueError, match="reserved"):
        ProcessGroup("0", "default_pg", (0,))
    with pytest.raises(ValueError, match="Seq"):
        op("compute", 7, 10, 20, 0, seq=2)
