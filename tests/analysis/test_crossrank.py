"""Matching collective instances across ranks (metrics.md §4) and host clock offsets (§5)."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

from tracecomm.analysis.crossrank import cross_rank
from tracecomm.cli import EXIT_OK, app
from tracecomm.engine import breakdown
from tracecomm.ingest import load_rank
from tracecomm.synth import fsdp_run, write_run
from tracecomm.synth.fsdp import _HOST_SKEW_NS


@pytest.fixture(scope="module")
def sixteen(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[Path, dict[int, pl.DataFrame], dict[int, str]]:
    """16 ranks on two hosts whose clocks differ by the generator's host skew."""
    run = tmp_path_factory.mktemp("run16")
    write_run(fsdp_run(world_size=16, steps=2, layers=3, seed=4), run)
    collectives, hosts = {}, {}
    for path in sorted(run.iterdir()):
        events = load_rank(path)
        assert events.meta.rank is not None and events.meta.host_name is not None
        found = breakdown(events).collectives
        assert found is not None
        collectives[events.meta.rank] = found
        hosts[events.meta.rank] = events.meta.host_name
    return run, collectives, hosts


def test_every_instance_matches_and_host_offsets_are_recovered(sixteen) -> None:
    _, collectives, hosts = sixteen
    cr = cross_rank(collectives, hosts)
    per_rank = collectives[0].height
    assert all(df.height == per_rank for df in collectives.values())
    assert (cr.instances, cr.matched, cr.unmatched) == (per_rank, per_rank, 0)
    assert cr.keyed_by == {"0": "seq"} and cr.mismatches == ()
    node0, node1 = cr.clocks
    assert (node0.host, node0.ranks, node0.offset_ns) == ("node0", tuple(range(8)), 0)
    assert node1.ranks == tuple(range(8, 16))
    assert node1.offset_ns is not None and abs(node1.offset_ns - _HOST_SKEW_NS) < 1_000
    assert node1.error_ns is not None and node1.error_ns < 2_000
    assert node1.instances == 8 * per_rank


def test_without_seq_instances_are_keyed_by_type_and_ordinal(sixteen) -> None:
    _, collectives, hosts = sixteen
    no_seq = {
        r: df.with_columns(pl.lit(None, dtype=pl.Int64).alias("seq"))
        for r, df in collectives.items()
    }
    cr = cross_rank(no_seq, hosts)
    assert cr.keyed_by == {"0": "ordinal"}
    assert cr.unmatched == 0 and cr.matched == collectives[0].height


def test_a_rank_that_skips_a_collective_is_named(sixteen) -> None:
    _, collectives, hosts = sixteen
    skipped_seq = collectives[5]["seq"][7]
    broken = dict(collectives)
    broken[5] = collectives[5].filter(pl.col("seq") != skipped_seq)
    cr = cross_rank(broken, hosts)
    assert cr.unmatched == 1
    (mismatch,) = cr.mismatches
    assert (mismatch.group, mismatch.first_instance, mismatch.missing_ranks) == (
        "0",
        f"seq {skipped_seq}",
        (5,),
    )
    assert mismatch.counts[5] == collectives[5].height - 1
    assert mismatch.counts[0] == collectives[0].height


def test_disagreeing_message_sizes_fail_the_match(sixteen) -> None:
    _, collectives, hosts = sixteen
    broken = dict(collectives)
    first_seq = collectives[3]["seq"].min()
    broken[3] = collectives[3].with_columns(
        pl.when(pl.col("seq") == first_seq)
        .then(pl.col("nelems") + 1)
        .otherwise("nelems")
        .alias("nelems")
    )
    cr = cross_rank(broken, hosts)
    (mismatch,) = cr.mismatches
    assert mismatch.sizes_disagree and mismatch.missing_ranks == ()
    assert mismatch.first_instance == f"seq {first_seq}"


def test_group_members_come_from_the_rank_list(sixteen) -> None:
    _, collectives, hosts = sixteen
    # a group listing only ranks 0-3: ranks 4-15 are not expected to join it
    sub = {
        r: df.with_columns(pl.lit("tp").alias("pg"), pl.lit("[0, 1, 2, 3]").alias("pg_ranks"))
        for r, df in collectives.items()
        if r < 4
    }
    cr = cross_rank(sub, {r: hosts[r] for r in sub})
    assert cr.unmatched == 0 and cr.keyed_by == {"tp": "seq"}


def test_cli_json_carries_matching_and_clocks(sixteen) -> None:
    run, collectives, _ = sixteen
    result = CliRunner().invoke(app, ["analyze", str(run), "--format", "json"])
    assert result.exit_code == EXIT_OK
    doc = json.loads(result.stdout)["cross_rank"]
    assert doc["matched"] == collectives[0].height and doc["mismatches"] == []
    hosts = {h["host"]: h for h in doc["clocks"]["hosts"]}
    assert abs(hosts["node1"]["offset_ns"] - _HOST_SKEW_NS) < 1_000
    off = CliRunner().invoke(app, ["analyze", str(run), "--format", "json", "--no-clock-align"])
    assert json.loads(off.stdout)["cross_rank"]["clocks"] == {
        "aligned": False,
        "reference_rank": 0,
        "hosts": [],
    }


def test_single_rank_has_no_cross_rank_section(tmp_path: Path) -> None:
    write_run(fsdp_run(world_size=1, steps=2, seed=1), tmp_path)
    result = CliRunner().invoke(app, ["analyze", str(tmp_path), "--format", "json"])
    assert json.loads(result.stdout)["cross_rank"] is None


def test_sendrecv_kernels_of_collectives_are_matched_not_point_to_point(
    shared_traces: Path,
) -> None:
    """hta-trace_filter's 20 SendRecv-named kernels were launched under nccl:all_to_all,
    nccl:all_reduce and nccl:_all_gather_base (metrics.md §1): collectives, keyed by group."""
    result = CliRunner().invoke(
        app, ["analyze", str(shared_traces / "hta-trace_filter"), "--format", "json"]
    )
    doc = json.loads(result.stdout)["cross_rank"]
    assert doc["point_to_point"] == 0
    assert (doc["instances"], doc["matched"]) == (10, 10)


@pytest.mark.parametrize("offsets", [(-20_000_000, 33_000_000), (5_000_000, -45_000_000)])
def test_injected_host_offsets_are_recovered_within_a_microsecond(
    tmp_path: Path, offsets: tuple[int, int]
) -> None:
    spec = fsdp_run(world_size=16, steps=2, layers=3, seed=3, host_offsets_ns=offsets)
    write_run(spec, tmp_path)
    doc = json.loads(CliRunner().invoke(app, ["analyze", str(tmp_path), "--format", "json"]).stdout)
    hosts = {h["host"]: h["offset_ns"] for h in doc["cross_rank"]["clocks"]["hosts"]}
    truth = spec.host_offsets_ns["node1"] - spec.host_offsets_ns["node0"]
    assert hosts["node0"] == 0
    assert abs(hosts["node1"] - truth) < 1_000


def test_a_skipped_collective_is_reported_with_group_instance_and_rank(tmp_path: Path) -> None:
    spec = fsdp_run(world_size=8, steps=2, layers=3, seed=2, skip=(6, 4))
    write_run(spec, tmp_path)
    ((rank, group, seq),) = spec.skipped
    result = CliRunner().invoke(app, ["analyze", str(tmp_path), "--format", "json"])
    doc = json.loads(result.stdout)["cross_rank"]
    assert doc["unmatched"] == 1
    (mismatch,) = doc["mismatches"]
    assert (mismatch["group"], mismatch["first_instance"], mismatch["missing_ranks"]) == (
        group,
        f"seq {seq}",
        [rank],
    )
    terminal = CliRunner().invoke(app, ["analyze", str(tmp_path)]).stdout
    assert f"group {group}: 1 unmatched, first at seq {seq}, missing on ranks {rank}" in terminal


def test_several_process_groups_match_by_their_own_seq(tmp_path: Path) -> None:
    from tracecomm.synth import dp_tp_run

    spec = dp_tp_run(dp=4, tp=2, steps=2, layers=2, seed=1, host_offsets_ns=(0,))
    write_run(spec, tmp_path)
    doc = json.loads(
        CliRunner().invoke(app, ["analyze", str(tmp_path), "--format", "json"]).stdout
    )["cross_rank"]
    names = {g.name for g in spec.groups}
    assert set(doc["keyed_by"]) == names and set(doc["keyed_by"].values()) == {"seq"}
    assert doc["unmatched"] == 0 and doc["matched"] == doc["instances"] > 0


def _rows(rank_rows: list[dict]) -> pl.DataFrame:
    from tracecomm.engine.collectives import INSTANCE_SCHEMA

    defaults = {c: None for c in INSTANCE_SCHEMA}
    return pl.DataFrame([{**defaults, **r} for r in rank_rows], schema=INSTANCE_SCHEMA)


def test_send_recv_pairs_by_peer_and_their_waits_count_as_inherited() -> None:
    from tracecomm.analysis.stragglers import stragglers

    def p2p(direction: str, peer: int, start: int) -> dict:
        return {
            "pg": "pp",
            "coll_type": "SendRecv",
            "direction": direction,
            "peer": peer,
            "p2p_ordinal": 0,
            "start_ns": start,
            "end_ns": start + 10,
            "step": 1,
        }

    def allreduce(group: str, start: int) -> dict:
        return {
            "pg_ranks": {"dp0": "[0, 1]", "dp1": "[2, 3]"}[group],
            "pg": group,
            "seq": 1,
            "coll_type": "AllReduce",
            "ordinal": 0,
            "nelems": 4,
            "start_ns": start,
            "end_ns": 400,
            "step": 1,
        }

    collectives = {
        0: _rows([p2p("send", 2, 100), allreduce("dp0", 200)]),  # stage 0, late sender
        1: _rows([p2p("send", 3, 50), allreduce("dp0", 200)]),
        2: _rows([p2p("recv", 0, 50), allreduce("dp1", 300)]),  # waited 50 for rank 0
        3: _rows([p2p("recv", 1, 50), allreduce("dp1", 260)]),
    }
    cr = cross_rank(collectives, dict.fromkeys(collectives, "host"))
    assert (cr.p2p_paired, cr.p2p_unpaired, cr.point_to_point) == (2, 0, 4)
    waits = {(r, w) for r, w in cr.p2p_waits.select("rank", "wait").iter_rows()}
    assert waits == {(2, 50), (0, 0), (3, 0), (1, 0)}
    st = stragglers(
        cr.aligned,
        dict.fromkeys(collectives, 100),
        dict.fromkeys(collectives, 500),
        dict.fromkeys(collectives, frozenset({1})),
        p2p_waits=cr.p2p_waits,
    )
    two = next(r for r in st.ranks if r.rank == 2)
    # rank 2 arrived 40 late at dp1's all-reduce, but had waited 50 for rank 0's send first
    assert (two.delay_caused_per_step_ns, two.inherited_delay_per_step_ns, two.root_delay_ns) == (
        40,
        40,
        0,
    )
