"""Collective instances across ranks: matching (metrics.md §4) and clock offsets (§5)."""

from __future__ import annotations

import re
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, cast

import polars as pl
from msgspec import Meta

from tracecomm.analysis.arrivals import FLOOR_NS, look_through, with_arrivals
from tracecomm.analysis.chains import pipeline_chains
from tracecomm.analysis.rank import RankReport
from tracecomm.doc import Doc, NonNegative
from tracecomm.engine.collectives import INSTANCE_SCHEMA, WORLD

if TYPE_CHECKING:
    from tracecomm.engine.model import RankBreakdown

_RANK_LIST = re.compile(r"^\[\s*\d+(?:\s*,\s*\d+)*\s*\]$")


class GroupMismatch(Doc, frozen=True):
    """A process group whose ranks did not all make the same calls: a hang / desync clue."""

    group: str
    members: tuple[int, ...]
    unmatched: int  # instances that fail the match
    first_instance: str  # the earliest failing instance, e.g. "seq 17" or "AllGather #3"
    missing_ranks: tuple[int, ...]  # members without that instance
    sizes_disagree: bool  # its message sizes differ between ranks
    counts: dict[int, int]  # instances per member rank, when they differ


class HostClock(Doc, frozen=True):
    """One host's clock offset against the reference rank's host (§5)."""

    host: str
    ranks: tuple[int, ...]
    offset_ns: Annotated[
        int | None,
        Meta(description="this host's clock minus the reference host's, from collective ends"),
    ]
    error_ns: Annotated[
        int | None, Meta(description="median absolute deviation of the per-instance differences")
    ]
    instances: int  # matched instances the estimate rests on


KeyedBy = Literal["seq", "ordinal"]


class Clocks(Doc, frozen=True):
    """metrics.md §5: whether the hosts' clocks were aligned, against which rank's host."""

    aligned: bool
    reference_rank: int | None
    hosts: tuple[HostClock, ...]


class CrossRank(Doc, frozen=True):
    """Matching across ranks and clocks (metrics.md §4–§5), as the report states it; the
    matched instances themselves are the analysis's (``Matching``)."""

    instances: NonNegative  # collective instances keyed across ranks (point-to-point left out)
    matched: NonNegative
    unmatched: NonNegative
    point_to_point: Annotated[
        int, Meta(ge=0, description="send/recv kernels: paired by peer, not matched by group here")
    ]
    p2p_paired: Annotated[
        int, Meta(ge=0, description="send/recv pairs found on both sides (by peer and order)")
    ]
    p2p_unpaired: Annotated[
        int,
        Meta(ge=0, description="sends or recvs whose other side is not in the analyzed traces"),
    ]
    unsynchronized: Annotated[
        int,
        Meta(
            ge=0,
            description=(
                "matched instances whose members' kernels do not overlap once every "
                "member arrived (no rendezvous of these ranks): left out of the "
                "straggler figures and the replay"
            ),
        ),
    ]
    keyed_by: dict[str, KeyedBy]  # group -> how its instances were keyed
    mismatches: tuple[GroupMismatch, ...]
    clocks: Clocks


@dataclass(frozen=True)
class Matching:
    """The matched instances of a run, clock-aligned, and what the analysis needs of them
    (groups, pipelines, waits): the working values behind the report's ``CrossRank``."""

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
    # pipelines as chains of send/recv peers (metrics.md §10): name -> ranks, first stage first
    pipelines: dict[str, tuple[int, ...]] = field(default_factory=dict)
    p2p_paired: int = 0  # send/recv pairs found on both sides (by peer and order)
    p2p_unpaired: int = 0  # sends or recvs whose other side is not in the analyzed traces
    # matched instances whose members' kernels do not overlap in time (arrivals.py): no
    # rendezvous of these ranks, left out of the straggler figures and the replay
    unsynchronized: int = 0
    # per send/recv kernel on the aligned clock: rank, step, start_ns, wait (for its peer)
    p2p_waits: pl.DataFrame = field(default_factory=pl.DataFrame, compare=False, repr=False)
    # matched instances per rank, clock-aligned (rank, pg, key, coll_type, step, start_ns,
    # end_ns, idle_before_ns, work_since_ns, ready_ns, ready_since_ns, stream, arrival_ns,
    # synchronized)
    aligned: pl.DataFrame = field(default_factory=pl.DataFrame, compare=False, repr=False)
    # both kernels of every paired send/recv, aligned (rank, pg, key, step, start_ns, end_ns,
    # idle_before_ns, work_since_ns, ready_ns, stream, direction, coll_type, sender, receiver,
    # arrival_ns,
    # synchronized)
    p2p_pairs: pl.DataFrame = field(default_factory=pl.DataFrame, compare=False, repr=False)

    def report(self) -> CrossRank:
        """What the report says of the matching."""
        return CrossRank(
            instances=self.instances,
            matched=self.matched,
            unmatched=self.unmatched,
            point_to_point=self.point_to_point,
            p2p_paired=self.p2p_paired,
            p2p_unpaired=self.p2p_unpaired,
            unsynchronized=self.unsynchronized,
            keyed_by=cast(dict[str, KeyedBy], self.keyed_by),
            mismatches=self.mismatches,
            clocks=Clocks(self.clock_aligned, self.reference_rank, self.clocks),
        )


def cross_rank(
    collectives: Mapping[int, pl.DataFrame], hosts: Mapping[int, str], align_clocks: bool = True
) -> Matching:
    """Match every collective instance across the analyzed ranks and estimate host offsets."""
    frames = [
        df.with_columns(pl.lit(r, dtype=pl.Int64).alias("rank"))
        for r, df in sorted(collectives.items())
    ]
    every = (
        pl.concat(frames) if frames else pl.DataFrame(schema={**INSTANCE_SCHEMA, "rank": pl.Int64})
    )
    if "idle_before_ns" not in every.columns:  # frames from before the column existed
        every = every.with_columns(pl.lit(0, dtype=pl.Int64).alias("idle_before_ns"))
    if "work_since_ns" not in every.columns:
        every = every.with_columns(pl.col("start_ns").alias("work_since_ns"))
    if "ready_ns" not in every.columns:
        every = every.with_columns(pl.col("start_ns").alias("ready_ns"))
    if "ready_since_ns" not in every.columns:
        every = every.with_columns(pl.col("ready_ns").alias("ready_since_ns"))
    if "stream" not in every.columns:
        every = every.with_columns(pl.lit(None, dtype=pl.Int64).alias("stream"))
    analyzed = sorted(collectives)
    p2p = _with_peers(every.filter(pl.col("coll_type") == "SendRecv"), analyzed)
    keyed, keyed_by = _keys(every.filter(pl.col("coll_type") != "SendRecv"))
    members = _members(keyed, analyzed)
    verdicts = _verdicts(keyed, members)
    matched = verdicts.filter(pl.col("valid"))
    reference = min(collectives) if collectives else None
    on_all = keyed.join(matched.select("pg", "key"), on=["pg", "key"], maintain_order="left")
    clocks = _clocks(on_all, hosts, reference, _raw_pairs(p2p)) if align_clocks else ()
    floors = _floors(clocks)
    first = with_arrivals(_aligned(on_all, clocks), ["pg", "key"], floors, align_clocks)
    p2p_aligned = _looked_through(_aligned(p2p, clocks), None, first)
    aligned = _arrivals_again(first, floors, align_clocks)
    point_to_point = _point_to_point(p2p_aligned, floors, align_clocks)
    return Matching(
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
        pipelines=pipeline_chains(p2p_aligned, analyzed) if p2p.height else {},
        unsynchronized=aligned.filter(~pl.col("synchronized"))
        .select(pl.struct("pg", "key"))
        .n_unique()
        if aligned.height
        else 0,
        aligned=aligned,
        **point_to_point,
    )


def _arrivals_again(first: pl.DataFrame, floors: Mapping[int, int], check: bool) -> pl.DataFrame:
    """Arrivals once the idle gaps look through unsynchronized kernels (arrivals.py); an
    instance found unsynchronized the first time stays so."""
    if first.height == 0 or first["synchronized"].all():
        return first  # nothing to look through
    looked = _looked_through(first, first.select("synchronized"), None)
    again = with_arrivals(looked.drop("arrival_ns", "synchronized"), ["pg", "key"], floors, check)
    return again.with_columns(pl.col("synchronized") & first["synchronized"])


def _looked_through(
    frame: pl.DataFrame, synced: pl.DataFrame | None, collectives: pl.DataFrame | None
) -> pl.DataFrame:
    """``frame`` (rank, start_ns, end_ns, idle_before_ns on the aligned clock) with each idle
    gap looking back through the unsynchronized collective kernels — among its own rows
    (``synced``: their flags) or in ``collectives``."""
    if frame.height == 0:
        return frame
    mine = frame.select(
        pl.int_range(pl.len(), dtype=pl.Int64).alias("_row"),
        "rank",
        "start_ns",
        "end_ns",
        "idle_before_ns",
        synced.to_series() if synced is not None else pl.lit(True).alias("synchronized"),
    )
    parts = [mine]
    if collectives is not None:
        parts.append(
            collectives.filter(~pl.col("synchronized")).select(
                pl.lit(-1, dtype=pl.Int64).alias("_row"),
                "rank",
                "start_ns",
                "end_ns",
                "idle_before_ns",
                "synchronized",
            )
        )
    looked = look_through(pl.concat(parts)).filter(pl.col("_row") >= 0).sort("_row")
    return frame.with_columns(looked["idle_before_ns"])


def _with_peers(p2p: pl.DataFrame, analyzed: list[int]) -> pl.DataFrame:
    """A send/recv without Src/Dst Rank in a group of two talks to the other member (the
    group's rank list, else its analyzed members)."""
    if p2p.height == 0:
        return p2p
    pairs = {g: m for g, m in _members(p2p, analyzed).items() if len(m) == 2}
    other = pl.DataFrame(
        {
            "pg": [g for g, m in pairs.items() for _ in m],
            "rank": [r for m in pairs.values() for r in m],
            "_other": [o for m in pairs.values() for o in reversed(m)],
        },
        schema={"pg": pl.String, "rank": pl.Int64, "_other": pl.Int64},
    )
    return (
        p2p.join(other, on=["pg", "rank"], how="left", maintain_order="left")
        .with_columns(pl.coalesce("peer", "_other").alias("peer"))
        .drop("_other")
        .with_columns(
            pl.int_range(pl.len()).over("rank", "pg", "direction", "peer").alias("p2p_ordinal")
        )
    )


def _raw_pairs(p2p: pl.DataFrame) -> pl.DataFrame | None:
    """Both ends of every send/recv pair on the ranks' own clocks (rank, pg, key, end_ns)."""
    if p2p.height == 0 or not {"direction", "peer"} <= set(p2p.columns):
        return None
    sends = p2p.filter(pl.col("direction") == "send").select(
        "pg", pl.col("rank").alias("sender"), pl.col("peer").alias("receiver"), "p2p_ordinal"
    )
    recvs = p2p.filter(pl.col("direction") == "recv").select(
        "pg", pl.col("rank").alias("receiver"), pl.col("peer").alias("sender"), "p2p_ordinal"
    )
    paired = sends.join(recvs, on=["pg", "sender", "receiver", "p2p_ordinal"]).select(
        "pg", "sender", "receiver", "p2p_ordinal"
    )
    key = pl.format("p2p {}->{} #{}", "sender", "receiver", "p2p_ordinal").alias("key")
    ends = p2p.select("rank", "pg", "direction", "peer", "p2p_ordinal", "end_ns")
    sides = [
        paired.join(
            ends.filter(pl.col("direction") == direction),
            left_on=["pg", who, other, "p2p_ordinal"],
            right_on=["pg", "rank", "peer", "p2p_ordinal"],
        ).select(pl.col(who).alias("rank"), "pg", key, "end_ns")
        for direction, who, other in (
            ("send", "sender", "receiver"),
            ("recv", "receiver", "sender"),
        )
    ]
    return pl.concat(sides)


def _floors(clocks: tuple[HostClock, ...]) -> dict[int, int]:
    """Per rank: time differences below this are clock noise (arrivals.py)."""
    return {r: max(FLOOR_NS, 2 * (c.error_ns or 0)) for c in clocks for r in c.ranks}


def _point_to_point(timed: pl.DataFrame, floors: Mapping[int, int], check: bool) -> dict[str, Any]:
    """Pair each send with the recv of the same order on its peer (NCCL send/recv rendezvous);
    a side that arrived first waited for the other. ``timed``: the kernels, clock-aligned."""
    if timed.height == 0 or not {"direction", "peer"} <= set(timed.columns):
        return {}
    side = [
        "pg",
        "k",
        "step",
        "start_ns",
        "end_ns",
        "idle_before_ns",
        "work_since_ns",
        "ready_ns",
        "ready_since_ns",
        "stream",
    ]
    sends = timed.filter(pl.col("direction") == "send").select(
        pl.col("rank").alias("sender"),
        pl.col("peer").alias("receiver"),
        *[pl.col("p2p_ordinal" if c == "k" else c).alias(f"send_{c}") for c in side],
    )
    recvs = timed.filter(pl.col("direction") == "recv").select(
        pl.col("rank").alias("receiver"),
        pl.col("peer").alias("sender"),
        *[pl.col("p2p_ordinal" if c == "k" else c).alias(f"recv_{c}") for c in side],
    )
    pairs = sends.join(
        recvs,
        left_on=["send_pg", "sender", "receiver", "send_k"],
        right_on=["recv_pg", "sender", "receiver", "recv_k"],
        maintain_order="left",
    ).sort("sender", "receiver", "send_pg", "send_k")
    key = pl.format("p2p {}->{} #{}", "sender", "receiver", "send_k").alias("key")
    both = pl.concat(
        [
            pairs.select(
                pl.col(who).alias("rank"),
                pl.col("send_pg").alias("pg"),
                key,
                *[pl.col(f"{prefix}_{c}").alias(c) for c in side if c not in ("pg", "k")],
                pl.lit(direction).alias("direction"),
                pl.lit("SendRecv").alias("coll_type"),
                "sender",
                "receiver",
            )
            for who, prefix, direction in (("sender", "send", "send"), ("receiver", "recv", "recv"))
        ]
    )
    both = with_arrivals(both, ["pg", "key"], floors, check)
    waits = both.filter(pl.col("synchronized")).select(
        "rank",
        "step",
        "start_ns",
        (pl.col("arrival_ns").max().over("pg", "key") - pl.col("arrival_ns")).alias("wait"),
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
    times = [
        c
        for c in ("start_ns", "end_ns", "work_since_ns", "ready_ns", "ready_since_ns")
        if c in frame.columns
    ]
    return (
        frame.join(offsets, on="rank", how="left", maintain_order="left")
        .with_columns(pl.col(c) - pl.col("offset").fill_null(0) for c in times)
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
    keyed_by = {g: "seq" if s else "ordinal" for g, s in sorted(has_seq.iter_rows())}
    return keyed, keyed_by


def _members(keyed: pl.DataFrame, analyzed: list[int]) -> dict[str, tuple[int, ...]]:
    """Each group's member ranks among the analyzed ones: its rank list when the trace spells
    it out in full (Kineto abbreviates long ones); else the ranks that carry the group when
    they are as many as its size says (an Nsight export names a communicator, not its
    members); else every analyzed rank."""
    size = pl.col("group_size") if "group_size" in keyed.columns else pl.lit(None, pl.Int64)
    out: dict[str, tuple[int, ...]] = {}
    for group, ranks_text, carriers, members in (
        keyed.group_by("pg")
        .agg(
            pl.col("pg_ranks").drop_nulls().first(),
            pl.col("rank").unique().sort(),
            size.drop_nulls().max().alias("size"),
        )
        .sort("pg")
        .iter_rows()
    ):
        if isinstance(ranks_text, str) and _RANK_LIST.match(ranks_text.strip()):
            listed = {int(r) for r in ranks_text.strip("[] ").split(",")}
            out[group] = tuple(r for r in analyzed if r in listed)
        elif members is not None and len(carriers) == members < len(analyzed):
            out[group] = tuple(carriers)
        else:
            out[group] = tuple(analyzed)
    return out


def _verdicts(keyed: pl.DataFrame, members: dict[str, tuple[int, ...]]) -> pl.DataFrame:
    """One row per (group, key): valid when every member has it and the sizes agree (an
    all-to-all(v)'s need not: each rank sends and receives its own amount)."""
    size = pl.DataFrame(
        {"pg": list(members), "members": [len(m) for m in members.values()]},
        schema={"pg": pl.String, "members": pl.Int64},
    )
    return (
        keyed.group_by("pg", "key")
        .agg(
            pl.col("rank").n_unique().alias("ranks"),
            pl.col("nelems")
            .filter(pl.col("coll_type") != "AllToAll")
            .drop_nulls()
            .n_unique()
            .alias("sizes"),
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
    matched: pl.DataFrame,
    hosts: Mapping[int, str],
    reference: int | None,
    pairs: pl.DataFrame | None = None,
) -> tuple[HostClock, ...]:
    """Per host: the median over matched instances of ``end_r − end_ref`` (collectives finish
    together), the reference being the lowest rank; ranks of one host share one clock. A host
    that shares no instance with the reference is reached through hosts that do (_relayed),
    over the collectives and the send/recv ``pairs`` (rank, pg, key, end_ns: both ends of a
    pair finish together too)."""
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
    known = {h: v[0] for h, v in estimates.items()} | {ref_host: 0}
    instances = [matched.select("rank", "pg", "key", "end_ns")]
    if pairs is not None and pairs.height:
        instances.append(pairs.select("rank", "pg", "key", "end_ns"))
    missing = set(hosts.values()) - set(known)
    relayed = _relayed(pl.concat(instances), host_of, known) if missing else {}
    for host, (offset, error, n) in relayed.items():
        estimates[host] = (offset, n)
        errors[host] = error
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


def _relayed(
    instances: pl.DataFrame, host_of: pl.DataFrame, known: dict[str, int]
) -> dict[str, tuple[int, int, int]]:
    """Offsets of the hosts that share no instance with the reference host, hop by hop: each
    instance's members finish together, so a host's offset is the median over the instances
    it shares with hosts already aligned of its end − the aligned end of the lowest such
    member. Returns host -> (offset, error: median absolute deviation, instances)."""
    per_host = (
        instances.join(host_of, on="rank")
        .sort("pg", "key", "rank")
        .group_by("pg", "key", "host", maintain_order=True)
        .agg(pl.col("rank").first(), pl.col("end_ns").first())
    )
    found: dict[str, tuple[int, int, int]] = {}
    while True:
        offsets = pl.DataFrame(
            {"host": list(known), "offset": list(known.values())},
            schema={"host": pl.String, "offset": pl.Int64},
        )
        marked = per_host.join(offsets, on="host", how="left")
        anchors = (
            marked.filter(pl.col("offset").is_not_null())
            .sort("pg", "key", "rank")
            .group_by("pg", "key", maintain_order=True)
            .agg((pl.col("end_ns") - pl.col("offset")).first().alias("anchor"))
        )
        diffs = (
            marked.filter(pl.col("offset").is_null())
            .join(anchors, on=["pg", "key"])
            .with_columns((pl.col("end_ns") - pl.col("anchor")).alias("diff"))
        )
        if diffs.height == 0:
            return found
        step = (
            diffs.group_by("host")
            .agg(pl.col("diff").median().alias("median"), pl.col("diff"), pl.len())
            .sort("host")
        )
        for host, median, diff, n in step.iter_rows():
            offset = int(median)
            error = int(statistics.median(abs(d - offset) for d in diff))
            found[host] = (offset, error, n)
            known[host] = offset


def ranks_cross_rank(
    ranks: Sequence[RankReport], breakdowns: Mapping[int, RankBreakdown], align_clocks: bool
) -> Matching | None:
    """Matching and clocks over the ranks with device collectives (two or more)."""
    collectives = {
        r.rank: found for r in ranks if (found := breakdowns[r.rank].collectives) is not None
    }
    gpu = [r for r in ranks if r.rank in collectives]
    if len(gpu) < 2:
        return None
    # metrics.md §5: ranks that share a host share one clock (host_name, else the file name)
    hosts = {r.rank: r.host or Path(r.path).name for r in gpu}
    return cross_rank(collectives, hosts, align_clocks)


def whole_group(world_size: int | None) -> pl.Expr:
    """Per row of matched instances (``aligned``): whether every member of the instance's
    group left a trace (``Group size`` when recorded, the world for the default group). With a
    member missing, the last arrival and the earliest end may be a rank without a trace."""
    present = pl.len().over("pg", "key")
    expected = pl.coalesce(
        pl.col("group_size").max().over("pg", "key"),
        pl.when(pl.col("pg") == WORLD).then(pl.lit(world_size, dtype=pl.Int64)),
        present,
    )
    return present >= expected
