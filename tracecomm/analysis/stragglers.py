"""Stragglers (metrics.md §6): who arrived last at each collective, how long everyone waited,
and which ranks caused the delay rather than inherited it."""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from tracecomm.analysis.crossrank import CrossRank
from tracecomm.analysis.rank import RankReport
from tracecomm.analysis.replay import ReplayEstimate, replay

# A rank is flagged when its root delay exceeds both of these (metrics.md §6).
FLAG_SHARE_OF_STEP = 0.05
FLAG_TIMES_MEDIAN_RANK = 3.0


@dataclass(frozen=True)
class RankStraggle:
    """One rank's figures; ``*_per_step_ns`` are sums over the included steps' instances
    divided by the number of included steps."""

    rank: int
    times_last: int
    times_last_share: float | None  # of the matched instances the rank took part in
    delay_caused_per_step_ns: int
    # of that, lateness it had itself collected earlier in the step waiting in other groups'
    # collectives or in send/recv (a victim passing delay on): left out of the root delay
    inherited_delay_per_step_ns: int
    wait_per_step_ns: int
    compute_per_step_ns: int | None  # median over included steps
    compute_excess_ns: int  # over the peers' median, negative clipped to 0
    # over the median of the other stages of its pipeline (send/recv group): an imbalanced stage
    stage_excess_ns: int
    compute_ratio: float | None  # peers' median / own (1.0 = on par)
    root_delay_ns: int  # max(compute, stage excess) + delay caused − inherited delay, per step
    flagged: bool


@dataclass(frozen=True)
class InstanceRecord:
    """One matched collective instance on the aligned clock (``--detail instances``)."""

    group: str
    key: str
    coll_type: str
    step: int | None
    ranks: int
    last_rank: int | None  # None when several ranks share the latest start
    arrival_skew_ns: int  # latest − earliest start
    transfer_ns: int  # earliest end − latest start: the part everyone spent moving data
    delay_caused_ns: int  # latest − second-latest start


@dataclass(frozen=True)
class GroupTypeDelay:
    """Where the delay happened: one process group and collective type, over included steps."""

    group: str
    coll_type: str
    instances: int
    arrival_skew_ns: int  # median over instances of latest − earliest aligned start
    delay_caused_ns: int  # sum over instances
    top_rank: int | None  # the rank that caused most of it


@dataclass(frozen=True)
class Stragglers:
    ranks: tuple[RankStraggle, ...]  # by root delay, largest first
    flagged: tuple[int, ...]
    median_step_ns: int | None
    threshold_ns: int | None  # the root delay a rank must exceed to be flagged
    step_if_no_straggler_ns: int | None  # first-order estimate (metrics.md §6)
    recoverable_pct: float | None
    delay_by_step: dict[int, dict[int, int]]  # rank -> step -> delay caused (the heat map)
    by_group_type: tuple[GroupTypeDelay, ...] = ()
    instances: tuple[InstanceRecord, ...] = ()  # only when asked for (they grow with the run)
    delay_by_host_step: dict[str, dict[int, int]] = field(default_factory=dict)  # max over ranks
    replay: ReplayEstimate | None = None  # the dependency-replay what-if, when it could run


def stragglers(
    aligned: pl.DataFrame,
    compute_per_step: Mapping[int, int | None],
    step_time: Mapping[int, int | None],
    included_steps: Mapping[int, frozenset[int]],
    keep_instances: bool = False,
    peers: Mapping[int, tuple[int, ...]] | None = None,
    hosts: Mapping[int, str] | None = None,
    p2p_waits: pl.DataFrame | None = None,
    pipelines: Mapping[int, tuple[int, ...]] | None = None,
) -> Stragglers:
    """``aligned``: matched instances on one clock (rank, pg, key, step, start_ns, end_ns);
    ``compute_per_step`` / ``step_time``: each rank's median over its included steps;
    ``peers``: the ranks doing the same work as each rank (default: all ranks)."""
    per_instance = _per_instance(aligned, p2p_waits)
    in_steps = _in_included_steps(per_instance, included_steps)
    lasts = in_steps.filter(pl.col("is_last")).with_columns(
        pl.min_horizontal("inherited", "delay").alias("inherited_delay")
    )
    caused = _sum_by_rank(lasts, "delay", included_steps)
    inherited = _sum_by_rank(lasts, "inherited_delay", included_steps)
    waited = _sum_by_rank(in_steps, "wait", included_steps)
    last_counts = dict(per_instance.filter(pl.col("is_last")).group_by("rank").len().iter_rows())
    taken = dict(per_instance.group_by("rank").len().iter_rows())
    everyone = tuple(compute_per_step)
    rows = []
    for rank in sorted(compute_per_step):
        mine = (peers or {}).get(rank, everyone)
        peers_median = _median([v for p in mine if (v := compute_per_step.get(p)) is not None])
        own = compute_per_step[rank]
        excess = max(0, own - peers_median) if own is not None and peers_median is not None else 0
        stages = (pipelines or {}).get(rank, ())
        stage_median = _median(
            [v for p in stages if p != rank and (v := compute_per_step.get(p)) is not None]
        )
        stage_excess = (
            max(0, own - stage_median) if own is not None and stage_median is not None else 0
        )
        delay = caused.get(rank, 0)
        passed_on = inherited.get(rank, 0)
        rows.append(
            RankStraggle(
                rank=rank,
                times_last=last_counts.get(rank, 0),
                times_last_share=(last_counts.get(rank, 0) / taken[rank])
                if taken.get(rank)
                else None,
                delay_caused_per_step_ns=delay,
                inherited_delay_per_step_ns=passed_on,
                wait_per_step_ns=waited.get(rank, 0),
                compute_per_step_ns=own,
                compute_excess_ns=excess,
                stage_excess_ns=stage_excess,
                compute_ratio=(peers_median / own) if own and peers_median is not None else None,
                root_delay_ns=max(excess, stage_excess) + delay - passed_on,
                flagged=False,
            )
        )
    median_step = _median([v for v in step_time.values() if v is not None])
    median_root = _median([r.root_delay_ns for r in rows]) or 0
    threshold = (
        max(FLAG_SHARE_OF_STEP * median_step, FLAG_TIMES_MEDIAN_RANK * median_root)
        if median_step is not None
        else None
    )
    flagged = {r.rank for r in rows if threshold is not None and r.root_delay_ns > threshold}
    rows = [
        RankStraggle(**{**r.__dict__, "flagged": r.rank in flagged})
        for r in sorted(rows, key=lambda r: (-r.root_delay_ns, r.rank))
    ]
    # First-order what-if (metrics.md §6): a flagged rank's compute at its peers' median and its
    # collectives no longer waiting for it. Its late arrivals are a consequence of its excess
    # compute, so the larger of the two counts, not their sum; and ranks run side by side, so
    # the step gets back the largest such gain among the flagged ranks, not their total.
    saved = max(
        (
            max(
                r.compute_excess_ns,
                r.stage_excess_ns,
                r.delay_caused_per_step_ns - r.inherited_delay_per_step_ns,
            )
            for r in rows
            if r.flagged
        ),
        default=0,
    )
    step_if = None if median_step is None else median_step - saved
    return Stragglers(
        ranks=tuple(rows),
        flagged=tuple(sorted(flagged)),
        median_step_ns=median_step,
        threshold_ns=None if threshold is None else round(threshold),
        step_if_no_straggler_ns=step_if,
        recoverable_pct=(100.0 * saved / median_step) if median_step else None,
        delay_by_step=_delay_by_step(in_steps),
        by_group_type=_by_group_type(in_steps),
        instances=_instance_records(per_instance) if keep_instances else (),
        delay_by_host_step=_by_host(_delay_by_step(in_steps), hosts or {}),
    )


def _by_host(
    by_rank: dict[int, dict[int, int]], hosts: Mapping[int, str]
) -> dict[str, dict[int, int]]:
    """The worst rank's delay per host and step: the heat map of runs too large to list."""
    out: dict[str, dict[int, int]] = {}
    for rank, steps in by_rank.items():
        row = out.setdefault(hosts.get(rank, f"rank {rank}"), {})
        for step, delay in steps.items():
            row[step] = max(row.get(step, 0), delay)
    return out


def _instance_records(per_instance: pl.DataFrame) -> tuple[InstanceRecord, ...]:
    rows = (
        per_instance.group_by("pg", "key", "coll_type")
        .agg(
            pl.col("step").min(),
            pl.len().alias("ranks"),
            pl.col("rank").filter(pl.col("is_last")).first().alias("last_rank"),
            (pl.col("start_ns").max() - pl.col("start_ns").min()).alias("skew"),
            (pl.col("end_ns").min() - pl.col("start_ns").max()).alias("transfer"),
            pl.col("delay").first(),
            pl.col("start_ns").min().alias("first_start"),
        )
        .sort("first_start", "pg", "key")
    )
    return tuple(
        InstanceRecord(
            r["pg"],
            r["key"],
            r["coll_type"],
            r["step"],
            r["ranks"],
            r["last_rank"],
            r["skew"],
            r["transfer"],
            r["delay"],
        )
        for r in rows.iter_rows(named=True)
    )


def _by_group_type(in_steps: pl.DataFrame) -> tuple[GroupTypeDelay, ...]:
    per_instance = in_steps.group_by("pg", "key", "coll_type").agg(
        (pl.col("start_ns").max() - pl.col("start_ns").min()).alias("skew"),
        pl.col("delay").filter(pl.col("is_last")).sum().alias("delay"),
        pl.col("rank").filter(pl.col("is_last")).first().alias("last"),
    )
    by_rank = (
        per_instance.group_by("pg", "coll_type", "last")
        .agg(pl.col("delay").sum())
        .sort("delay", "last", descending=[True, False])
        .group_by("pg", "coll_type", maintain_order=True)
        .agg(pl.col("last").first().alias("top_rank"), pl.col("delay").first().alias("top"))
    )
    rows = (
        per_instance.group_by("pg", "coll_type")
        .agg(pl.len().alias("instances"), pl.col("skew").median(), pl.col("delay").sum())
        .join(by_rank, on=["pg", "coll_type"], how="left")
        .sort("delay", "pg", "coll_type", descending=[True, False, False])
    )
    return tuple(
        GroupTypeDelay(
            group=r["pg"],
            coll_type=r["coll_type"],
            instances=r["instances"],
            arrival_skew_ns=round(r["skew"]),
            delay_caused_ns=r["delay"],
            top_rank=r["top_rank"] if r["top"] else None,
        )
        for r in rows.iter_rows(named=True)
    )


def _per_instance(aligned: pl.DataFrame, p2p_waits: pl.DataFrame | None = None) -> pl.DataFrame:
    """Per (instance, rank): wait = latest start − own start; the last rank carries the delay
    it alone caused, latest start − second-latest start. When several ranks share the latest
    start (common with µs timestamps) nobody alone was last and no rank is counted.
    ``inherited`` is the time the rank spent waiting earlier in the same step in *other*
    groups' collectives or in point-to-point transfers — lateness another rank passed on to
    it, which it cannot have caused."""
    instance = ["pg", "key"]
    per = aligned.with_columns(
        (pl.col("start_ns").max().over(instance) - pl.col("start_ns")).alias("wait"),
        (
            (pl.col("start_ns") == pl.col("start_ns").max().over(instance))
            & ((pl.col("start_ns") == pl.col("start_ns").max()).sum().over(instance) == 1)
        ).alias("is_last"),
        (
            pl.col("start_ns").max().over(instance)
            - pl.col("start_ns").top_k(2).min().over(instance)
        ).alias("delay"),
    ).with_row_index("_row")
    waits = [per.select("_row", "rank", "step", "pg", "start_ns", "wait")]
    if p2p_waits is not None and p2p_waits.height:
        waits.append(
            p2p_waits.select(
                pl.lit(None, dtype=pl.UInt32).alias("_row"),
                "rank",
                "step",
                pl.lit("\x00p2p").alias("pg"),
                "start_ns",
                "wait",
            )
        )
    # waits earlier in the same step on this rank, in other groups: exclusive running sums
    all_before = pl.col("wait").cum_sum().over("rank", "step") - pl.col("wait")
    same_before = pl.col("wait").cum_sum().over("rank", "step", "pg") - pl.col("wait")
    inherited = (
        pl.concat(waits)
        .sort("rank", "start_ns")
        .with_columns((all_before - same_before).fill_null(0).alias("inherited"))
        .filter(pl.col("_row").is_not_null())
        .select("_row", "inherited")
    )
    return per.join(inherited, on="_row", how="left").drop("_row")


def _in_included_steps(
    per_instance: pl.DataFrame, included_steps: Mapping[int, frozenset[int]]
) -> pl.DataFrame:
    included = pl.DataFrame(
        {
            "rank": [r for r, steps in included_steps.items() for _ in steps],
            "step": [s for steps in included_steps.values() for s in steps],
        },
        schema={"rank": pl.Int64, "step": pl.Int64},
    )
    return per_instance.join(included, on=["rank", "step"], how="semi")


def _sum_by_rank(
    frame: pl.DataFrame, column: str, included_steps: Mapping[int, frozenset[int]]
) -> dict[int, int]:
    totals = dict(frame.group_by("rank").agg(pl.col(column).sum()).iter_rows())
    return {
        rank: _halves_up(total / len(included_steps[rank]))
        for rank, total in totals.items()
        if included_steps.get(rank)
    }


def _delay_by_step(in_steps: pl.DataFrame) -> dict[int, dict[int, int]]:
    out: dict[int, dict[int, int]] = {}
    last = in_steps.filter(pl.col("is_last"))
    for rank, step, delay in last.group_by("rank", "step").agg(pl.col("delay").sum()).iter_rows():
        out.setdefault(rank, {})[step] = delay
    return out


def _median(values: list[int]) -> int | None:
    return _halves_up(statistics.median(values)) if values else None


def _halves_up(value: float) -> int:
    """Whole ns, halves rounded up: the rule of every median and mean in the report."""
    return math.floor(value + 0.5)


def rank_stragglers(
    ranks: Sequence[RankReport], cr: CrossRank | None, detail_instances: bool
) -> Stragglers | None:
    """metrics.md §6 over the ranks with analyzed steps, with the replay what-if."""
    timed = [r for r in ranks if r.step_summary is not None]
    if cr is None or cr.matched == 0 or len(timed) < 2:
        return None
    peers = peer_groups(cr.groups, {r.rank: r.breakdown.work_signature for r in timed})
    found = stragglers(
        cr.aligned,
        compute_per_step={
            r.rank: r.step_summary.median.compute_ns for r in timed if r.step_summary
        },
        step_time={r.rank: r.step_summary.median.window_ns for r in timed if r.step_summary},
        included_steps={
            r.rank: frozenset(s.step for s in r.breakdown.included_steps) for r in timed
        },
        keep_instances=detail_instances,
        peers=peers,
        hosts={r.rank: r.host or Path(r.path).name for r in timed},
        p2p_waits=cr.p2p_waits,
        pipelines={r: m for m in cr.pipelines.values() for r in m},
    )
    return dataclasses.replace(found, replay=_replay(timed, cr, found, peers))


def _replay(
    timed: Sequence[RankReport],
    cr: CrossRank,
    found: Stragglers,
    peers: Mapping[int, tuple[int, ...]],
) -> ReplayEstimate | None:
    """The dependency-replay what-if over the included steps, on the aligned clock."""
    offset = {r: c.offset_ns or 0 for c in cr.clocks for r in c.ranks}
    windows = pl.DataFrame(
        [
            (r.rank, s.step, s.window.start_ns, s.window.end_ns)
            for r in timed
            for s in r.breakdown.included_steps
            if s.window is not None
        ],
        schema={"rank": pl.Int64, "step": pl.Int64, "start_ns": pl.Int64, "end_ns": pl.Int64},
        orient="row",
    ).with_columns(pl.col("start_ns", "end_ns") - pl.col("rank").replace_strict(offset, default=0))
    columns = ["rank", "pg", "key", "start_ns", "end_ns"]
    shared = pl.concat(
        [cr.aligned.select(columns)]
        + ([cr.p2p_pairs.select(columns)] if cr.p2p_pairs.height else [])
    )
    # with no unflagged peer to copy, a flagged rank keeps (own − excess) / own of its own work
    factors = {
        r.rank: 1.0 - max(r.compute_excess_ns, r.stage_excess_ns) / r.compute_per_step_ns
        if r.compute_per_step_ns
        else 1.0
        for r in found.ranks
        if r.flagged
    }
    return replay(shared, windows, factors, peers)


def peer_groups(
    groups: Mapping[str, tuple[int, ...]], signatures: Mapping[int, str | None]
) -> dict[int, tuple[int, ...]]:
    """metrics.md §6 peers(r): the largest non-world process group holding r whose members all
    run the same kernels in the same order as r (same work signature); else every rank."""
    everyone = tuple(sorted(signatures))
    out: dict[int, tuple[int, ...]] = {}
    for rank, signature in signatures.items():
        candidates = [
            members
            for members in groups.values()
            if rank in members
            and len(members) < len(everyone)
            and signature is not None
            and all(signatures.get(m) == signature for m in members)
        ]
        out[rank] = max(candidates, key=lambda m: (len(m), m)) if candidates else everyone
    return out
