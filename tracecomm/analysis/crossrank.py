"""Collective instances across ranks: matching (metrics.md §4) and clock offsets (§5)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from tracecomm.analysis.rank import RankReport
from tracecomm.engine.collectives import INSTANCE_SCHEMA

_RANK_LIST = re.compile(r"^\[\s*\d+(?:\s*,\s*\d+)*\s*\]$")


@dataclass(frozen=True)
class GroupMismatch:
    """A process group whose ranks did not all make the same calls: a hang / desync clue."""

    group: str
    members: tuple[int, ...]
    unmatched: int  # instances that fail the match
    first_instance: str  # the earliest failing instance, e.g. "seq 17" or "AllGather #3"
    missing_ranks: tuple[int, ...]  # members without that instance
    sizes_disagree: bool  # its message sizes differ between ranks
    counts: dict[int, int]  # instances per member rank, when they differ


@dataclass(frozen=True)
class HostClock:
    """One host's clock offset against the reference rank's host (§5)."""

    host: str
    ranks: tuple[int, ...]
    offset_ns: int | None  # subtract from this host's times; None when nothing is shared
    error_ns: int | None  # median absolute deviation of the per-instance differences
    instances: int  # matched instances the estimate rests on


@dataclass(frozen=True)
class CrossRank:
    instances: int  # collective instances keyed across ranks (point-to-point left out)
    matched: int
    unmatched: int
    point_to_point: int  # send/recv kernels: paired by peers, not by group (not matched here)
    keyed_by: dict[str, str]  # group -> "seq" or "ordinal"
    mismatches: tuple[GroupMismatch, ...]
    reference_rank: int | None
    clocks: tuple[HostClock, ...]
    clock_aligned: bool
    groups: dict[str, tuple[int, ...]] = field(default_factory=dict)  # members among analyzed ranks
    pipelines: dict[str, tuple[int, ...]] = field(default_factory=dict)  # send/recv groups
    p2p_paired: int = 0  # send/recv pairs found on both sides (by peer and order)
    p2p_unpaired: int = 0  # sends or recvs whose other side is not in the analyzed traces
    # per send/recv kernel on the aligned clock: rank, step, start_ns, wait (for its peer)
    p2p_waits: pl.DataFrame = field(default_factory=pl.DataFrame, compare=False, repr=False)
    # matched instances per rank, clock-aligned (rank, pg, key, coll_type, step, start_ns, end_ns)
    aligned: pl.DataFrame = field(default_factory=pl.DataFrame, compare=False, repr=False)
    # both kernels of every paired send/recv, aligned (rank, pg, key, step, start_ns, end_ns)
    p2p_pairs: pl.DataFrame = field(default_factory=pl.DataFrame, compare=False, repr=False)


def cross_rank(
    collectives: Mapping[int, pl.DataFrame], hosts: Mapping[int, str], align_clocks: bool = True
) -> CrossRank:
    """Match every collective instance across the analyzed ranks and estimate host offsets."""
    frames = [
        df.with_columns(pl.lit(r, dtype=pl.Int64).alias("rank")) for r, df in collectives.items()
    ]
    every = (
        pl.concat(frames) if frames else pl.DataFrame(schema={**INSTANCE_SCHEMA, "rank": pl.Int64})
    )
    p2p = every.filter(pl.col("coll_type") == "SendRecv")
    keyed, keyed_by = _keys(every.filter(pl.col("coll_type") != "SendRecv"))
    members = _members(keyed, sorted(collectives))
    verdicts = _verdicts(keyed, members)
    matched = verdicts.filter(pl.col("valid"))
    reference = min(collectives) if collectives else None
    on_all = keyed.join(matched.select("pg", "key"), on=["pg", "key"])
    clocks = _clocks(on_all, hosts, reference) if align_clocks else ()
    return CrossRank(
        instances=verdicts.height,
        matched=matched.height,
        unmatched=verdicts.height - matched.height,
        point_to_point=p2p.height,
        keyed_by=keyed_by,
        mismatches=_mismatches(keyed, verdicts, members),
        reference_rank=reference,
        clocks=clocks,
        clock_aligned=align_clocks,
        groups=members,
        pipelines=_members(p2p, sorted(collectives)) if p2p.height else {},
        aligned=_aligned(on_all, clocks),
        **_point_to_point(p2p, clocks),
    )


def _point_to_point(p2p: pl.DataFrame, clocks: tuple[HostClock, ...]) -> dict[str, Any]:
    """Pair each send with the recv of the same order on its peer; a side that started first
    waited for the other (NCCL send/recv rendezvous)."""
    timed = (
        _aligned(p2p.with_columns(pl.lit("").alias("key")), clocks).with_columns(
            p2p.select("direction", "peer", "p2p_ordinal")
        )
        if p2p.height
        else None
    )
    if timed is None or not {"direction", "peer"} <= set(p2p.columns):
        return {}
    sends = timed.filter(pl.col("direction") == "send").select(
        "pg",
        pl.col("rank").alias("sender"),
        pl.col("peer").alias("receiver"),
        pl.col("p2p_ordinal").alias("k"),
        pl.col("step").alias("send_step"),
        pl.col("start_ns").alias("send_start"),
        pl.col("end_ns").alias("send_end"),
    )
    recvs = timed.filter(pl.col("direction") == "recv").select(
        "pg",
        pl.col("rank").alias("receiver"),
        pl.col("peer").alias("sender"),
        pl.col("p2p_ordinal").alias("k"),
        pl.col("step").alias("recv_step"),
        pl.col("start_ns").alias("recv_start"),
        pl.col("end_ns").alias("recv_end"),
    )
    pairs = sends.join(recvs, on=["pg", "sender", "receiver", "k"])
    lag = pl.col("send_start") - pl.col("recv_start")
    waits = pl.concat(
        [
            pairs.select(
                pl.col("receiver").alias("rank"),
                pl.col("recv_step").alias("step"),
                pl.col("recv_start").alias("start_ns"),
                lag.clip(lower_bound=0).alias("wait"),
            ),
            pairs.select(
                pl.col("sender").alias("rank"),
                pl.col("send_step").alias("step"),
                pl.col("send_start").alias("start_ns"),
                (-lag).clip(lower_bound=0).alias("wait"),
            ),
        ]
    )
    key = pl.format("p2p {}->{} #{}", "sender", "receiver", "k").alias("key")
    both = pl.concat(
        [
            pairs.select(
                pl.col(who).alias("rank"),
                "pg",
                key,
                pl.col(f"{side}_step").alias("step"),
                pl.col(f"{side}_start").alias("start_ns"),
                pl.col(f"{side}_end").alias("end_ns"),
            )
            for who, side in (("sender", "send"), ("receiver", "recv"))
        ]
    )
    return {
        "p2p_pairs": both,
        "p2p_paired": pairs.height,
        "p2p_unpaired": sends.height + recvs.height - 2 * pairs.height,
        "p2p_waits": waits,
    }


def _aligned(frame: pl.DataFrame, clocks: tuple[HostClock, ...]) -> pl.DataFrame:
    """Instances on the reference clock: each host's offset subtracted (§5)."""
    offsets = pl.DataFrame(
        {
            "rank": [r for c in clocks for r in c.ranks],
            "offset": [c.offset_ns or 0 for c in clocks for _ in c.ranks],
        },
        schema={"rank": pl.Int64, "offset": pl.Int64},
    )
    return (
        frame.join(offsets, on="rank", how="left", maintain_order="left")
        .with_columns(
            (pl.col("start_ns") - pl.col("offset").fill_null(0)).alias("start_ns"),
            (pl.col("end_ns") - pl.col("offset").fill_null(0)).alias("end_ns"),
        )
        .drop("offset")
    )


def _keys(instances: pl.DataFrame) -> tuple[pl.DataFrame, dict[str, str]]:
    """(group, seq) when every instance of the group carries Seq, else (group, type, ordinal)."""
    has_seq = instances.group_by("pg").agg(pl.col("seq").is_not_null().all().alias("by_seq"))
    keyed = instances.join(has_seq, on="pg").with_columns(
        pl.when(pl.col("by_seq"))
        .then(pl.format("seq {}", pl.col("seq")))
        .otherwise(pl.format("{} #{}", pl.col("coll_type"), pl.col("ordinal")))
        .alias("key"),
        pl.when(pl.col("by_seq")).then(pl.col("seq")).otherwise(pl.col("ordinal")).alias("order"),
    )
    keyed_by = {g: "seq" if s else "ordinal" for g, s in has_seq.iter_rows()}
    return keyed, keyed_by


def _members(keyed: pl.DataFrame, analyzed: list[int]) -> dict[str, tuple[int, ...]]:
    """Each group's member ranks among the analyzed ones: its rank list when the trace spells
    it out in full (Kineto abbreviates long ones), else every analyzed rank."""
    out: dict[str, tuple[int, ...]] = {}
    for group, ranks_text in (
        keyed.group_by("pg").agg(pl.col("pg_ranks").drop_nulls().first()).iter_rows()
    ):
        if isinstance(ranks_text, str) and _RANK_LIST.match(ranks_text.strip()):
            listed = {int(r) for r in ranks_text.strip("[] ").split(",")}
            out[group] = tuple(r for r in analyzed if r in listed)
        else:
            out[group] = tuple(analyzed)
    return out


def _verdicts(keyed: pl.DataFrame, members: dict[str, tuple[int, ...]]) -> pl.DataFrame:
    """One row per (group, key): valid when every member has it and the sizes agree."""
    size = pl.DataFrame(
        {"pg": list(members), "members": [len(m) for m in members.values()]},
        schema={"pg": pl.String, "members": pl.Int64},
    )
    return (
        keyed.group_by("pg", "key")
        .agg(
            pl.col("rank").n_unique().alias("ranks"),
            pl.col("nelems").drop_nulls().n_unique().alias("sizes"),
            pl.col("order").min(),
        )
        .join(size, on="pg")
        .with_columns(
            ((pl.col("ranks") == pl.col("members")) & (pl.col("sizes") <= 1)).alias("valid")
        )
    )


def _mismatches(
    keyed: pl.DataFrame, verdicts: pl.DataFrame, members: dict[str, tuple[int, ...]]
) -> tuple[GroupMismatch, ...]:
    out = []
    for (group,), bad in verdicts.filter(~pl.col("valid")).group_by("pg"):
        first = bad.sort("order").row(0, named=True)
        present = set(
            keyed.filter((pl.col("pg") == group) & (pl.col("key") == first["key"]))["rank"]
        )
        counts = dict(keyed.filter(pl.col("pg") == group).group_by("rank").len().iter_rows())
        counts.update({r: 0 for r in members[str(group)] if r not in counts})
        out.append(
            GroupMismatch(
                group=str(group),
                members=members[str(group)],
                unmatched=bad.height,
                first_instance=first["key"],
                missing_ranks=tuple(r for r in members[str(group)] if r not in present),
                sizes_disagree=first["sizes"] > 1,
                counts=dict(sorted(counts.items())) if len(set(counts.values())) > 1 else {},
            )
        )
    return tuple(sorted(out, key=lambda m: m.group))


def _clocks(
    matched: pl.DataFrame, hosts: Mapping[int, str], reference: int | None
) -> tuple[HostClock, ...]:
    """Per host: the median over matched instances of ``end_r − end_ref`` (collectives finish
    together), the reference being the lowest rank; ranks of one host share one clock."""
    if reference is None:
        return ()
    ref = matched.filter(pl.col("rank") == reference).select(
        "pg", "key", pl.col("end_ns").alias("ref_end")
    )
    host_of = pl.DataFrame(
        {"rank": list(hosts), "host": list(hosts.values())},
        schema={"rank": pl.Int64, "host": pl.String},
    )
    diffs = (
        matched.join(ref, on=["pg", "key"])
        .join(host_of, on="rank")
        .with_columns((pl.col("end_ns") - pl.col("ref_end")).alias("diff"))
    )
    ref_host = hosts[reference]
    estimates = {
        host: (int(median), n)
        for host, median, n in diffs.group_by("host")
        .agg(pl.col("diff").median(), pl.len())
        .iter_rows()
        if median is not None
    }
    errors = dict(
        diffs.join(
            pl.DataFrame(
                {"host": list(estimates), "offset": [v[0] for v in estimates.values()]},
                schema={"host": pl.String, "offset": pl.Int64},
            ),
            on="host",
        )
        .group_by("host")
        .agg((pl.col("diff") - pl.col("offset")).abs().median())
        .iter_rows()
    )
    out = []
    for host in sorted(
        set(hosts.values()), key=lambda h: min(r for r, x in hosts.items() if x == h)
    ):
        ranks = tuple(sorted(r for r, x in hosts.items() if x == host))
        if host == ref_host:
            out.append(
                HostClock(
                    host, ranks, 0, int(errors.get(host) or 0), estimates.get(host, (0, 0))[1]
                )
            )
        elif host in estimates:
            offset, n = estimates[host]
            out.append(HostClock(host, ranks, offset, int(errors[host]), n))
        else:
            out.append(HostClock(host, ranks, None, None, 0))
    return tuple(out)


def ranks_cross_rank(ranks: Sequence[RankReport], align_clocks: bool) -> CrossRank | None:
    """Matching and clocks over the ranks with device collectives (two or more)."""
    gpu = [r for r in ranks if r.breakdown.collectives is not None]
    if len(gpu) < 2:
        return None
    collectives = {
        r.rank: r.breakdown.collectives for r in gpu if r.breakdown.collectives is not None
    }
    # metrics.md §5: ranks that share a host share one clock (host_name, else the file name)
    hosts = {r.rank: r.host or Path(r.path).name for r in gpu}
    return cross_rank(collectives, hosts, align_clocks)
