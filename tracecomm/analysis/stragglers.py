"""Stragglers (metrics.md §6): who arrived last at each shared wait, how long everyone waited,
which ranks caused the delay rather than inherited it, and — deciding — what the step would
take with each candidate's work at its peers' median (whatif.py, by dependency replay)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal, cast

import polars as pl
from msgspec import Meta, structs
from msgspec import field as doc_field

from tracecomm.analysis.chains import chain_of, stage_of
from tracecomm.analysis.crossrank import Matching
from tracecomm.analysis.hidden import InferredWait, Reading
from tracecomm.analysis.rank import RankReport
from tracecomm.analysis.replay import WAIT_COLUMNS, build_chain
from tracecomm.analysis.whatif import (
    FLAG_SHARE_OF_STEP,
    FLAG_TIMES_MEDIAN_RANK,
    Candidate,
    Job,
    WhatIf,
    what_if,
    with_idle_as_wait,
)
from tracecomm.doc import Doc, NonNegative, Percent

if TYPE_CHECKING:
    from tracecomm.engine.model import RankBreakdown

FlagBasis = Literal["replay gain", "root delay"]
RecoverableBasis = Literal["replay", "replay (mean step)", "first-order"]

__all__ = ["FLAG_SHARE_OF_STEP", "FLAG_TIMES_MEDIAN_RANK", "Candidate", "WhatIf"]


class RankStraggle(Doc, frozen=True):
    """One rank's figures; ``*_per_step_ns`` are sums over the included steps' instances
    divided by the number of included steps."""

    rank: int
    times_last: Annotated[
        int,
        Meta(
            description=(
                "instances the rank alone arrived last at, groups whose order of "
                "arrival the pipeline schedule sets left out"
            )
        ),
    ]
    times_last_share: float | None  # of the matched instances the rank took part in
    delay_caused_per_step_ns: int
    # of that, lateness it had itself collected earlier in the step waiting in other groups'
    # collectives or in send/recv (a victim passing delay on): left out of the root delay
    inherited_delay_per_step_ns: Annotated[
        int,
        Meta(
            description=(
                "part of delay caused that the rank had collected waiting in other "
                "groups' collectives since its previous call in the group; not counted "
                "in root_delay_ns"
            )
        ),
    ]
    wait_per_step_ns: int
    compute_per_step_ns: int | None  # median over included steps
    compute_excess_ns: int  # over the peers' median, negative clipped to 0
    # over the median of the other stages of its pipeline (chain): an imbalanced stage
    stage_excess_ns: Annotated[
        int,
        Meta(
            description=(
                "compute per step over the median of the other stages of its pipeline "
                "(the chain of send/recv peers); 0 outside pipelines"
            )
        ),
    ]
    compute_ratio: float | None  # peers' median / own (1.0 = on par)
    root_delay_ns: int  # max(compute, stage excess) + delay caused − inherited delay, per step
    flagged: bool
    gain_ns: Annotated[
        NonNegative | None,
        Meta(
            description=(
                "what-if gain of fixing this rank alone: measured median step − the "
                "step replayed with its work at its peers' median (metrics.md §6); null"
                " when the rank was not replayed"
            )
        ),
    ] = None  # what-if gain of fixing this rank alone (None: not replayed)
    fix: Annotated[
        str | None,
        Meta(
            description=(
                'the flagged candidate the rank belongs to ("rank 5", "stage 1", '
                '"replica 3"); null when none'
            )
        ),
    ] = None  # the flagged candidate it belongs to ("rank 5", "stage 1", …)


class InstanceRecord(Doc, frozen=True):
    """One matched collective instance on the aligned clock (``--detail instances``)."""

    group: str
    key: str
    coll_type: str
    step: int | None
    ranks: int
    last_rank: Annotated[
        int | None,
        Meta(
            description=(
                "the rank that alone started last; null when the latest start is shared"
                " (nobody held the others)"
            )
        ),
    ]
    arrival_skew_ns: int  # latest − earliest arrival
    transfer_ns: int  # earliest end − latest arrival: the part everyone spent moving data
    delay_caused_ns: int  # latest − second-latest arrival


class GroupTypeDelay(Doc, frozen=True):
    """Where the delay happened: one process group and collective type, over included steps."""

    group: str
    coll_type: str
    instances: int
    arrival_skew_ns: Annotated[
        int, Meta(description="median over instances of latest − earliest aligned start")
    ]
    delay_caused_ns: int  # sum over instances
    top_rank: int | None  # the rank that caused most of it
    by_schedule: Annotated[
        bool,
        Meta(
            description=(
                "members at different pipeline stages (the embedding all-reduce): "
                "lateness by schedule, left out of the ranks' delay caused"
            )
        ),
    ] = False  # members at different pipeline stages: lateness by schedule


class InferredDependency(Doc, frozen=True):
    """Ranks whose idle before an element is a wait on another rank's element that the trace
    does not record (metrics.md §6, hidden dependencies): the replay takes it as one."""

    waiters: tuple[int, ...]
    waiter_element: Annotated[
        str, Meta(description="the element the waiters resume with (its type and group size)")
    ]
    source_rank: Annotated[int, Meta(description="the rank whose element's end releases them")]
    source_element: Annotated[
        str, Meta(description="that element, in words (a send/recv names both ranks)")
    ]
    steps: Annotated[int, Meta(ge=0, description="steps in which every waiter resumed after it")]
    of_steps: Annotated[int, Meta(ge=0, description="steps in which the waiters idled there")]
    lag_min_ns: NonNegative
    lag_max_ns: NonNegative
    idle_per_step_ns: Annotated[
        int, Meta(ge=0, description="the median waiter's median idle before its element")
    ]

    @property
    def line(self) -> str:
        """One line, as the terminal and the finding's evidence say it."""
        one = len(self.waiters) == 1
        who = f"rank{'' if one else 's'} {_ranks_text(self.waiters)} wait{'s' if one else ''}"
        return (
            f"{who} for {self.source_element} before {self.waiter_element} in "
            f"{self.steps} of {self.of_steps} steps ({self.idle_per_step_ns / 1e6:,.1f} ms idle"
            f" per step, resuming {self.lag_min_ns / 1e6:,.1f}–{self.lag_max_ns / 1e6:,.1f} ms"
            " after it): inferred, not recorded"
        )


class IdleDecides(Doc, frozen=True):
    """A rank whose unexplained idle decides between the what-if's two readings."""

    rank: int
    idle_per_step_ns: Annotated[
        int, Meta(ge=0, description="idle before elements that no inference explains, per step")
    ]
    moves_pct: Annotated[
        float,
        Meta(
            ge=0,
            description=(
                "points recoverable_pct_idle_as_wait loses when this rank's idle is read as "
                "its own work again"
            ),
        ),
    ]


class Replay(Doc, frozen=True):
    measured_step_ns: NonNegative
    step_ns: Annotated[
        int, Meta(ge=0, description="the median step replayed with the recorded work")
    ]
    reproduction_error_pct: Annotated[float, Meta(ge=0)]
    tolerance_pct: Annotated[float, Meta(ge=0)]
    reproduces: Annotated[
        bool,
        Meta(
            description=(
                "the replayed step is within the tolerance of the measured one: only "
                "then does the replay decide"
            )
        ),
    ]
    shared_waits: Annotated[
        int,
        Meta(ge=0, description="synchronized collective instances and send/recv pairs replayed"),
    ]
    step_if_no_straggler_ns: NonNegative | None
    recoverable_pct: Percent | None
    by_peers: Annotated[
        tuple[int, ...],
        Meta(description="flagged ranks whose work came from their peers, position by position"),
    ]
    by_scaling: Annotated[
        tuple[int, ...],
        Meta(
            description=(
                "flagged ranks whose own work was scaled to the target compute (a whole"
                " stage; a rank without shape-alike peers)"
            )
        ),
    ]
    reason: Annotated[
        str | None, Meta(description="why the replay does not decide, when it does not")
    ]
    mean_step_ns: Annotated[
        NonNegative | None,
        Meta(
            description=(
                "the recorded work's mean step (median over ranks of each rank's mean over "
                "its included steps): the base of the candidates' total_recoverable_pct"
            ),
        ),
    ] = None
    inferred_waits: Annotated[
        tuple[InferredDependency, ...],
        Meta(description="waits the trace does not record, inferred and replayed as waits"),
    ] = ()
    freed_kernel_wait_ns: Annotated[
        dict[str, int],
        Meta(
            description=(
                "per collective type: the wait inside its kernels, per step (mean over ranks),"
                " that the flagged fix frees; that part of its exposed time is the straggler's"
            )
        ),
    ] = doc_field(default_factory=dict)
    freed_idle_ns: Annotated[
        NonNegative,
        Meta(description="the idle of inferred waits, per step (mean over ranks), it frees"),
    ] = 0
    recoverable_pct_idle_as_wait: Annotated[
        Percent | None,
        Meta(
            description=(
                "recoverable_pct with every idle before an element that no inference "
                "explains read as a wait (recoverable_pct reads it as work): the bounds"
            )
        ),
    ] = None
    idle_decides: Annotated[
        tuple[IdleDecides, ...],
        Meta(description="the ranks whose idle decides between the two readings, most first"),
    ] = ()


class StepDelay(Doc, frozen=True):
    rank: int
    step: int
    delay_caused_ns: Annotated[
        int, Meta(description="the delay the rank alone caused in the step, inherited included")
    ]
    root_delay_ns: Annotated[
        int | None,
        Meta(
            description=(
                "what the rank caused itself in the step (the heat map): max(compute "
                "excess over its peers, over the other stages) + delay caused − inherited"
            )
        ),
    ] = None


class Stragglers(Doc, frozen=True, kw_only=True):
    ranks: Annotated[
        tuple[RankStraggle, ...],
        Meta(
            description=(
                "flagged ranks first (by the gain of the candidate that flags them), "
                "then by replay gain and root delay; by root delay when the first-order"
                " figures decide"
            )
        ),
    ]
    flagged: tuple[int, ...]
    flag_basis: Annotated[
        FlagBasis,
        Meta(
            description=(
                "what ranks and flags: the replay's gains when the replay reproduces "
                "the measured step, else the first-order root delay"
            )
        ),
    ]
    median_step_ns: int | None
    threshold_ns: Annotated[
        int | None,
        Meta(
            description=(
                "the gain (or root delay, see flag_basis) a flagged candidate exceeds: "
                "max(5 % of the median step, 3 × the median rank's)"
            )
        ),
    ]
    step_if_no_straggler_ns: Annotated[
        int | None,
        Meta(
            description=(
                "the median step with every flagged candidate fixed: the dependency "
                "replay's what-if where the replay reproduces the run, else the "
                "first-order estimate (recoverable_basis says which)"
            )
        ),
    ]
    recoverable_pct: Annotated[
        Percent | None,
        Meta(description="100 · (median step − step_if_no_straggler_ns) / median step"),
    ]
    recoverable_basis: Annotated[
        RecoverableBasis,
        Meta(
            description=(
                "what step_if_no_straggler_ns and recoverable_pct come from: the replay of "
                "the ranks' median step; the replay of their mean step (replay."
                "mean_step_ns), when a flagged candidate is slow in some steps only and the "
                "median step hides it; or the first-order estimate"
            )
        ),
    ] = "first-order"
    first_order_step_ns: Annotated[
        int | None,
        Meta(
            description=(
                "the fast estimate: the median step minus the largest gain among the"
                " flagged ranks (the larger of their compute / stage excess and the "
                "delay they alone caused, per step), never below the longest rank's own"
                " work once fixed; never the headline where the replay reproduces the run"
            )
        ),
    ] = None
    first_order_recoverable_pct: Percent | None = None
    step_if_no_straggler_replay_ns: Annotated[
        int | None,
        Meta(
            description=(
                "dependency-replay estimate with every flagged candidate fixed at once "
                "(null when the replay could not run or did not reproduce the measured "
                "step)"
            )
        ),
    ]
    recoverable_pct_replay: Percent | None
    replay: Annotated[
        Replay | None,
        Meta(
            description=(
                "the dependency replay (metrics.md §6): its self-check and its what-if "
                "with every flagged candidate fixed"
            )
        ),
    ]
    candidates: Annotated[
        tuple[Candidate, ...],
        Meta(
            description=(
                "what-if candidates (ranks, pipeline stages, data-parallel replicas) by"
                " replay gain, largest first; empty when the replay does not decide"
            )
        ),
    ]
    by_group_type: Annotated[
        tuple[GroupTypeDelay, ...],
        Meta(
            description=(
                "delay per process group and collective type over the included steps, largest first"
            )
        ),
    ]
    instances: Annotated[
        tuple[InstanceRecord, ...],
        Meta(description="every matched collective instance (empty unless --detail instances)"),
    ]
    delay_by_step: tuple[StepDelay, ...]
    slowest_instances: Annotated[
        tuple[InstanceRecord, ...],
        Meta(
            description=(
                "the 10 instances that took longest from the first member's arrival to the "
                "earliest end (the wait for the last member, arrival_skew_ns, plus the "
                "transfer, transfer_ns), slowest first"
            )
        ),
    ] = ()

    def root_delay_by_rank(self) -> dict[int, dict[int, int]]:
        """The heat map (metrics.md §6): per rank and step the delay it caused itself."""
        out: dict[int, dict[int, int]] = {}
        for d in self.delay_by_step:
            if d.root_delay_ns is not None:
                out.setdefault(d.rank, {})[d.step] = d.root_delay_ns
        return out

    def root_delay_by_host(self, hosts: Mapping[int, str]) -> dict[str, dict[int, int]]:
        """The heat map of a run too large to list: per host its worst rank's root delay."""
        return _by_host(self.root_delay_by_rank(), hosts)


def decides(st: Stragglers) -> bool:
    """The replay reproduces the measured step, so its gains flag and price (metrics.md §6)."""
    return st.replay is not None and st.replay.reproduces


def on_mean_step(st: Stragglers) -> bool:
    """The replay's what-if is of the mean step (a flagged rank slow in some steps only)."""
    return st.recoverable_basis == "replay (mean step)"


@dataclass(frozen=True)
class StragglerWork:
    """The first-order figures and the replay's what-if as the analysis computes them (dicts
    by rank and step); ``Stragglers`` is what the report states of them."""

    ranks: tuple[RankStraggle, ...]  # flagged first, by gain (else root delay)
    flagged: tuple[int, ...]
    median_step_ns: int | None
    threshold_ns: int | None  # the gain (or root delay) a flagged rank exceeds
    # the step with every flagged rank fixed, and its share back: the replay's what-if where
    # the replay reproduces the run (recoverable_basis "replay"), else the first-order
    # estimate (metrics.md §6)
    step_if_no_straggler_ns: int | None
    recoverable_pct: float | None
    delay_by_step: dict[int, dict[int, int]]  # rank -> step -> delay caused (the heat map)
    by_group_type: tuple[GroupTypeDelay, ...] = ()
    instances: tuple[InstanceRecord, ...] = ()  # only when asked for (they grow with the run)
    slowest: tuple[InstanceRecord, ...] = ()  # the longest, first arrival to earliest end
    # the heat map: per rank and step the delay it caused itself (root delay: its compute
    # over its peers' or the other stages' that step, whichever is larger, plus the delay it
    # alone caused less what it had inherited), and per host its worst rank's
    root_delay_by_step: dict[int, dict[int, int]] = field(default_factory=dict)
    delay_by_host_step: dict[str, dict[int, int]] = field(default_factory=dict)
    what_if: WhatIf | None = None  # the replay what-if, when it could run
    flag_basis: str = "root delay"  # "replay gain" when the replay decides
    # "replay" (of the median step), "replay (mean step)" (a flagged rank slow in some steps
    # only) or "first-order"
    recoverable_basis: str = "first-order"
    # the fast estimate, whatever decides: larger excess or own delay of the flagged ranks
    first_order_step_ns: int | None = None
    first_order_recoverable_pct: float | None = None


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
    by_schedule: frozenset[str] = frozenset(),
    compute_by_step: Mapping[int, Mapping[int, int]] | None = None,
) -> StragglerWork:
    """The first-order figures. ``aligned``: matched instances on one clock (rank, pg, key,
    step, start_ns, end_ns; arrival_ns and synchronized when known); ``compute_per_step`` /
    ``step_time``: each rank's median over its included steps; ``peers``: the ranks doing the
    same work as each rank (default: all ranks); ``pipelines``: each pipeline rank's chain;
    ``by_schedule``: groups whose order of arrival the pipeline schedule sets."""
    per_instance = _per_instance(_synchronized(aligned), p2p_waits, by_schedule)
    in_steps = _in_included_steps(per_instance, included_steps)
    lasts = in_steps.filter(pl.col("counted")).with_columns(
        pl.min_horizontal("inherited", "delay").alias("inherited_delay")
    )
    caused = _sum_by_rank(lasts, "delay", included_steps)
    inherited = _sum_by_rank(lasts, "inherited_delay", included_steps)
    waited = _sum_by_rank(in_steps, "wait", included_steps)
    last_counts = _counts(per_instance.filter(pl.col("counted")))
    taken = _counts(per_instance)
    rows = [
        _rank_row(
            rank,
            compute_per_step,
            (peers or {}).get(rank, tuple(compute_per_step)),
            (pipelines or {}).get(rank, ()),
            caused.get(rank, 0),
            inherited.get(rank, 0),
            waited.get(rank, 0),
            last_counts.get(rank, 0),
            taken.get(rank, 0),
        )
        for rank in sorted(compute_per_step)
    ]
    median_step = _median([v for v in step_time.values() if v is not None])
    threshold = _root_threshold(rows, median_step)
    flagged = {r.rank for r in rows if threshold is not None and r.root_delay_ns > threshold}
    rows = [
        structs.replace(r, flagged=r.rank in flagged)
        for r in sorted(rows, key=lambda r: (-r.root_delay_ns, r.rank))
    ]
    step_if = _first_order_step(rows, median_step, compute_per_step)
    by_rank = _delay_by_step(in_steps)
    root = _root_by_step(lasts, compute_by_step or {}, peers or {}, pipelines or {}, included_steps)
    return StragglerWork(
        ranks=tuple(rows),
        flagged=tuple(sorted(flagged)),
        median_step_ns=median_step,
        threshold_ns=threshold,
        step_if_no_straggler_ns=step_if,
        recoverable_pct=_recoverable(median_step, step_if),
        first_order_step_ns=step_if,
        first_order_recoverable_pct=_recoverable(median_step, step_if),
        delay_by_step=by_rank,
        by_group_type=_by_group_type(in_steps),
        instances=_instance_records(per_instance) if keep_instances else (),
        slowest=_slowest(in_steps),  # the included steps, as the other figures
        delay_by_host_step=_by_host(root, hosts or {}),
        root_delay_by_step=root,
    )


def _rank_row(
    rank: int,
    compute_per_step: Mapping[int, int | None],
    peers: Sequence[int],
    chain: Sequence[int],
    delay: int,
    passed_on: int,
    waited: int,
    times_last: int,
    taken: int,
) -> RankStraggle:
    own = compute_per_step[rank]
    peers_median = _median([v for p in peers if (v := compute_per_step.get(p)) is not None])
    stage_median = _median(
        [v for p in chain if p != rank and (v := compute_per_step.get(p)) is not None]
    )
    excess = max(0, own - peers_median) if own is not None and peers_median is not None else 0
    stage_excess = max(0, own - stage_median) if own is not None and stage_median is not None else 0
    return RankStraggle(
        rank=rank,
        times_last=times_last,
        times_last_share=times_last / taken if taken else None,
        delay_caused_per_step_ns=delay,
        inherited_delay_per_step_ns=passed_on,
        wait_per_step_ns=waited,
        compute_per_step_ns=own,
        compute_excess_ns=excess,
        stage_excess_ns=stage_excess,
        compute_ratio=(peers_median / own) if own and peers_median is not None else None,
        root_delay_ns=max(excess, stage_excess) + delay - passed_on,
        flagged=False,
    )


def _root_threshold(rows: Sequence[RankStraggle], median_step: int | None) -> int | None:
    if median_step is None:
        return None
    median_root = _median([r.root_delay_ns for r in rows]) or 0
    return round(max(FLAG_SHARE_OF_STEP * median_step, FLAG_TIMES_MEDIAN_RANK * median_root))


def _first_order_step(
    rows: Sequence[RankStraggle], median_step: int | None, compute: Mapping[int, int | None]
) -> int | None:
    """metrics.md §6's first-order what-if: a flagged rank's compute at its peers' median and
    its collectives no longer waiting for it. Its late arrivals are a consequence of its excess
    compute, so the larger of the two counts, not their sum; ranks run side by side, so the
    step gets back the largest such gain among the flagged ranks, not their total. Never
    shorter than the longest rank's own work once fixed, never negative."""
    if median_step is None:
        return None
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
    fixed = {r.rank: max(r.compute_excess_ns, r.stage_excess_ns) if r.flagged else 0 for r in rows}
    floor = max(
        (max(0, own - fixed.get(rank, 0)) for rank, own in compute.items() if own is not None),
        default=0,
    )
    return max(min(median_step, floor), median_step - max(0, saved))


def _recoverable(median_step: int | None, step_if: int | None) -> float | None:
    if not median_step or step_if is None:
        return None
    return min(100.0, max(0.0, 100.0 * (median_step - step_if) / median_step))


def _counts(frame: pl.DataFrame) -> dict[int, int]:
    return dict(frame.group_by("rank").len().sort("rank").iter_rows())


def _synchronized(aligned: pl.DataFrame) -> pl.DataFrame:
    """The instances that were a rendezvous of their members, with each member's arrival."""
    frame = (
        aligned
        if "arrival_ns" in aligned.columns
        else aligned.with_columns(pl.col("start_ns").alias("arrival_ns"))
    )
    return frame.filter(pl.col("synchronized")) if "synchronized" in frame.columns else frame


def _by_host(
    by_rank: dict[int, dict[int, int]], hosts: Mapping[int, str]
) -> dict[str, dict[int, int]]:
    """The worst rank's delay per host and step: the heat map of runs too large to list."""
    out: dict[str, dict[int, int]] = {}
    for rank, steps in sorted(by_rank.items()):
        row = out.setdefault(hosts.get(rank, f"rank {rank}"), {})
        for step, delay in sorted(steps.items()):
            row[step] = max(row.get(step, 0), delay)
    return dict(sorted(out.items()))


SLOWEST_INSTANCES = 10


def _slowest(per_instance: pl.DataFrame) -> tuple[InstanceRecord, ...]:
    """The instances that took longest from the first member's arrival to the earliest end
    (wait for the last member + transfer): which call, which ranks, wait vs transfer."""
    return _instance_records(per_instance, SLOWEST_INSTANCES)


def _instance_records(
    per_instance: pl.DataFrame, slowest: int | None = None
) -> tuple[InstanceRecord, ...]:
    """Every instance in time order; ``slowest``: only that many, the slowest first."""
    rows = (
        per_instance.group_by("pg", "key", "coll_type")
        .agg(
            pl.col("step").min(),
            pl.len().alias("ranks"),
            pl.col("rank").filter(pl.col("is_last")).first().alias("last_rank"),
            (pl.col("arrival_ns").max() - pl.col("arrival_ns").min()).alias("skew"),
            (pl.col("end_ns").min() - pl.col("arrival_ns").max()).alias("transfer"),
            pl.col("delay").first(),
            pl.col("arrival_ns").min().alias("first_arrival"),
        )
        .sort("first_arrival", "pg", "key")
    )
    if slowest is not None:
        span = pl.col("skew") + pl.col("transfer").clip(0)
        rows = rows.sort(span, "first_arrival", descending=[True, False]).head(slowest)
    return tuple(
        InstanceRecord(
            r["pg"],
            r["key"],
            r["coll_type"],
            r["step"],
            r["ranks"],
            r["last_rank"],
            r["skew"],
            max(0, r["transfer"]),
            r["delay"],
        )
        for r in rows.iter_rows(named=True)
    )


def _by_group_type(in_steps: pl.DataFrame) -> tuple[GroupTypeDelay, ...]:
    per_instance = in_steps.group_by("pg", "key", "coll_type").agg(
        (pl.col("arrival_ns").max() - pl.col("arrival_ns").min()).alias("skew"),
        pl.col("delay").filter(pl.col("is_last")).sum().alias("delay"),
        pl.col("rank").filter(pl.col("is_last")).first().alias("last"),
        pl.col("structural").first(),
    )
    by_rank = (
        per_instance.group_by("pg", "coll_type", "last")
        .agg(pl.col("delay").sum())
        .sort("delay", "pg", "coll_type", "last", descending=[True, False, False, False])
        .group_by("pg", "coll_type", maintain_order=True)
        .agg(pl.col("last").first().alias("top_rank"), pl.col("delay").first().alias("top"))
    )
    rows = (
        per_instance.group_by("pg", "coll_type")
        .agg(
            pl.len().alias("instances"),
            pl.col("skew").median(),
            pl.col("delay").sum(),
            pl.col("structural").first(),
        )
        .join(by_rank, on=["pg", "coll_type"], how="left")
        .sort("delay", "pg", "coll_type", descending=[True, False, False])
    )
    return tuple(
        GroupTypeDelay(
            group=r["pg"],
            coll_type=r["coll_type"],
            instances=r["instances"],
            arrival_skew_ns=_halves_up(r["skew"]),
            delay_caused_ns=r["delay"],
            top_rank=r["top_rank"] if r["top"] else None,
            by_schedule=bool(r["structural"]),
        )
        for r in rows.iter_rows(named=True)
    )


def _per_instance(
    aligned: pl.DataFrame, p2p_waits: pl.DataFrame | None, by_schedule: frozenset[str]
) -> pl.DataFrame:
    """Per (instance, rank): wait = latest arrival − own arrival; the last rank carries the
    delay it alone caused, latest − second-latest arrival. When several ranks share the latest
    arrival (common with µs timestamps) nobody alone was last and no rank is counted; nor is
    anyone in a group whose order of arrival the pipeline schedule sets (``counted``).
    ``inherited`` is the time the rank spent waiting earlier in the same step in *other*
    groups' collectives or in point-to-point transfers — lateness another rank passed on to
    it, which it cannot have caused."""
    instance = ["pg", "key"]
    latest = pl.col("arrival_ns").max().over(instance)
    per = aligned.with_columns(
        (latest - pl.col("arrival_ns")).alias("wait"),
        (
            (pl.col("arrival_ns") == latest)
            & ((pl.col("arrival_ns") == pl.col("arrival_ns").max()).sum().over(instance) == 1)
        ).alias("is_last"),
        (latest - pl.col("arrival_ns").top_k(2).min().over(instance)).alias("delay"),
        pl.col("pg").is_in(sorted(by_schedule)).alias("structural"),
    ).with_columns((pl.col("is_last") & ~pl.col("structural")).alias("counted"))
    per = per.with_row_index("_row")
    waits = [per.select("_row", "rank", "step", "pg", "arrival_ns", "wait")]
    if p2p_waits is not None and p2p_waits.height:
        waits.append(
            p2p_waits.select(
                pl.lit(None, dtype=pl.UInt32).alias("_row"),
                "rank",
                "step",
                pl.lit("\x00p2p").alias("pg"),
                pl.col("start_ns").alias("arrival_ns"),
                "wait",
            )
        )
    # waits earlier in the same step on this rank, in other groups: exclusive running sums
    all_before = pl.col("wait").cum_sum().over("rank", "step") - pl.col("wait")
    same_before = pl.col("wait").cum_sum().over("rank", "step", "pg") - pl.col("wait")
    inherited = (
        pl.concat(waits)
        .sort("rank", "arrival_ns", "pg", "_row", nulls_last=True)
        .with_columns((all_before - same_before).fill_null(0).alias("inherited"))
        .filter(pl.col("_row").is_not_null())
        .select("_row", "inherited")
    )
    return per.join(inherited, on="_row", how="left").sort("_row").drop("_row")


def _in_included_steps(
    per_instance: pl.DataFrame, included_steps: Mapping[int, frozenset[int]]
) -> pl.DataFrame:
    included = pl.DataFrame(
        {
            "rank": [r for r, steps in sorted(included_steps.items()) for _ in steps],
            "step": [s for _, steps in sorted(included_steps.items()) for s in sorted(steps)],
        },
        schema={"rank": pl.Int64, "step": pl.Int64},
    )
    return per_instance.join(included, on=["rank", "step"], how="semi", maintain_order="left")


def _sum_by_rank(
    frame: pl.DataFrame, column: str, included_steps: Mapping[int, frozenset[int]]
) -> dict[int, int]:
    totals = dict(frame.group_by("rank").agg(pl.col(column).sum()).sort("rank").iter_rows())
    return {
        rank: _halves_up(total / len(included_steps[rank]))
        for rank, total in totals.items()
        if included_steps.get(rank)
    }


def _delay_by_step(in_steps: pl.DataFrame) -> dict[int, dict[int, int]]:
    out: dict[int, dict[int, int]] = {}
    last = in_steps.filter(pl.col("counted"))
    for rank, step, delay in (
        last.group_by("rank", "step").agg(pl.col("delay").sum()).sort("rank", "step").iter_rows()
    ):
        out.setdefault(rank, {})[step] = delay
    return out


def _root_by_step(
    lasts: pl.DataFrame,
    compute: Mapping[int, Mapping[int, int]],
    peers: Mapping[int, tuple[int, ...]],
    pipelines: Mapping[int, tuple[int, ...]],
    included: Mapping[int, frozenset[int]],
) -> dict[int, dict[int, int]]:
    """Per rank and included step: max(compute excess over its peers' median that step,
    excess over the other stages of its pipeline) + max(0, delay caused − inherited), the
    root delay of §6 step by step (zeros left out). A rank that is late only because it
    waited for another carries none of it: the heat map shows causes, not victims."""
    own: dict[tuple[int, int], int] = {}
    for rank, step, delay, inherited in (
        lasts.group_by("rank", "step")
        .agg(pl.col("delay").sum(), pl.col("inherited_delay").sum())
        .sort("rank", "step")
        .iter_rows()
    ):
        if step is not None:
            own[(rank, step)] = max(0, delay - inherited)
    everyone = tuple(sorted(compute))
    out: dict[int, dict[int, int]] = {}
    for rank in sorted(included):
        for step in sorted(included[rank]):
            mine = compute.get(rank, {}).get(step)
            excess = 0
            if mine is not None:
                group = peers.get(rank, everyone)
                by_peers = _median(
                    [v for p in group if (v := compute.get(p, {}).get(step)) is not None]
                )
                stages = [
                    v
                    for p in pipelines.get(rank, ())
                    if p != rank and (v := compute.get(p, {}).get(step)) is not None
                ]
                by_stage = _median(stages)
                excess = max(
                    0,
                    mine - by_peers if by_peers is not None else 0,
                    mine - by_stage if by_stage is not None else 0,
                )
            value = excess + own.get((rank, step), 0)
            if value > 0:
                out.setdefault(rank, {})[step] = value
    return out


def _median(values: list[int]) -> int | None:
    return _halves_up(statistics.median(values)) if values else None


def _halves_up(value: float) -> int:
    """Whole ns, halves rounded up: the rule of every median and mean in the report."""
    return math.floor(value + 0.5)


# ---- the whole analysis over a report's ranks -----------------------------------------------


def rank_stragglers(
    ranks: Sequence[RankReport],
    breakdowns: Mapping[int, RankBreakdown],
    cr: Matching | None,
    detail_instances: bool,
) -> tuple[Stragglers | None, WhatIf | None]:
    """metrics.md §6 over the ranks with analyzed steps: first-order figures, then the
    what-if by replay, which decides the flags when it reproduces the measured step; and the
    what-if's working values (the all-to-all view prices its imbalance with them)."""
    timed = [r for r in ranks if r.step_median is not None]
    if cr is None or cr.matched == 0 or len(timed) < 2:
        return None, None
    found = _work(timed, breakdowns, cr, detail_instances)
    return stragglers_report(found), found.what_if


def _work(
    timed: Sequence[RankReport],
    breakdowns: Mapping[int, RankBreakdown],
    cr: Matching,
    detail_instances: bool,
) -> StragglerWork:
    signatures = {r.rank: breakdowns[r.rank].work_signature for r in timed}
    peers = peer_groups(cr.groups, signatures)
    chains = chain_of(cr.pipelines)
    compute = {r.rank: r.step_median.compute_ns for r in timed if r.step_median}
    compute_by_step = {
        r.rank: {s.step: s.window.figures.compute_ns for s in r.included_steps if s.window}
        for r in timed
    }
    found = stragglers(
        cr.aligned,
        compute_per_step=compute,
        step_time={r.rank: r.step_median.window_ns for r in timed if r.step_median},
        included_steps={r.rank: frozenset(s.step for s in r.included_steps) for r in timed},
        keep_instances=detail_instances,
        peers=peers,
        hosts={r.rank: r.host or Path(r.path).name for r in timed},
        p2p_waits=cr.p2p_waits,
        pipelines=chains,
        by_schedule=by_schedule_groups(cr.groups, stage_of(cr.pipelines)),
        compute_by_step=compute_by_step,
    )
    if found.median_step_ns is None:
        return found
    job = Job(
        measured_step_ns=found.median_step_ns,
        peers=peers,
        compute=compute,
        compute_by_step=compute_by_step,
        stages=stage_of(cr.pipelines),
        replicas=replicas(cr.groups, cr.pipelines, peers, sorted(compute)),
        first_order=_shortlist_delay(found),
        hosts=_hosts_of(timed),
    )
    return _decided(found, _what_if(timed, cr, job), compute)


def stragglers_report(found: StragglerWork) -> Stragglers:
    """What the report states of the stragglers (metrics.md §6): the replay's figures only
    where it decides."""
    w = found.what_if
    decided = w is not None and w.reproduces
    return Stragglers(
        ranks=found.ranks,
        flagged=found.flagged,
        flag_basis=cast(FlagBasis, found.flag_basis),
        median_step_ns=found.median_step_ns,
        threshold_ns=found.threshold_ns,
        step_if_no_straggler_ns=found.step_if_no_straggler_ns,
        recoverable_pct=found.recoverable_pct,
        recoverable_basis=cast(RecoverableBasis, found.recoverable_basis),
        first_order_step_ns=found.first_order_step_ns,
        first_order_recoverable_pct=found.first_order_recoverable_pct,
        step_if_no_straggler_replay_ns=w.step_if_fixed_ns if w is not None and decided else None,
        recoverable_pct_replay=w.recoverable_pct if w is not None and decided else None,
        replay=None if w is None else _replay(w),
        candidates=w.candidates if w is not None and decided else (),
        by_group_type=found.by_group_type,
        instances=found.instances,
        delay_by_step=tuple(
            StepDelay(
                rank,
                step,
                found.delay_by_step.get(rank, {}).get(step, 0),
                found.root_delay_by_step.get(rank, {}).get(step, 0),
            )
            for rank in sorted({*found.delay_by_step, *found.root_delay_by_step})
            for step in sorted(
                {*found.delay_by_step.get(rank, {}), *found.root_delay_by_step.get(rank, {})}
            )
        ),
        slowest_instances=found.slowest,
    )


def _replay(w: WhatIf) -> Replay:
    """The replay's self-check and its all-flagged what-if (metrics.md §6)."""
    return Replay(
        measured_step_ns=w.measured_step_ns,
        step_ns=w.replayed_step_ns,
        reproduction_error_pct=w.reproduction_error_pct,
        tolerance_pct=w.tolerance_pct,
        reproduces=w.reproduces,
        shared_waits=w.shared_waits,
        step_if_no_straggler_ns=w.step_if_fixed_ns,
        recoverable_pct=w.recoverable_pct,
        by_peers=w.by_peers,
        by_scaling=w.by_scaling,
        reason=w.reason,
        mean_step_ns=w.mean_step_ns,
        inferred_waits=tuple(_dependency(i) for i in w.inferred),
        freed_kernel_wait_ns=dict(w.freed_kernel_wait_ns),
        freed_idle_ns=w.freed_idle_ns,
        recoverable_pct_idle_as_wait=w.recoverable_pct_idle_as_wait,
        idle_decides=tuple(IdleDecides(r, ns, pts) for r, ns, pts in w.idle_decides),
    )


def _dependency(i: InferredWait) -> InferredDependency:
    return InferredDependency(
        waiters=i.waiters,
        waiter_element=_element_words(i.waiter_kind, None),
        source_rank=i.source_rank,
        source_element=_element_words(i.source_kind, i.source_rank),
        steps=i.steps,
        of_steps=i.of_steps,
        lag_min_ns=max(0, i.lag_min_ns),
        lag_max_ns=max(0, i.lag_max_ns),
        idle_per_step_ns=max(0, i.idle_per_step_ns),
    )


def _element_words(kind: str, rank: int | None) -> str:
    """A chain element's kind ("AllReduce ×2", "SendRecv recv 16") in words: a send/recv
    names its two ranks (the offset is the peer's rank less this one's)."""
    parts = kind.split()
    if len(parts) == 3 and parts[0] == "SendRecv" and parts[2].lstrip("-").isdigit():
        if rank is None:
            return "a send/recv"
        peer = rank + int(parts[2])
        sender, receiver = (rank, peer) if parts[1] == "send" else (peer, rank)
        return f"the send/recv {sender}→{receiver}"
    return f"the {kind}" if rank is None else f"rank {rank}'s {kind}"


def _ranks_text(ranks: Sequence[int]) -> str:
    return ", ".join(str(r) for r in ranks)


def _shortlist_delay(found: StragglerWork) -> dict[int, int]:
    """What ranks the candidates of a large run (whatif.MAX_RANK_CANDIDATES): each rank's
    root delay per step, or its mean over the steps of the heat map where that is larger — a
    rank slow in a third of the steps has a median of nothing and still costs the run."""
    out = {}
    for r in found.ranks:
        steps = found.root_delay_by_step.get(r.rank, {})
        mean = sum(steps.values()) // max(1, len(steps)) if steps else 0
        out[r.rank] = max(r.root_delay_ns, mean)
    return out


def _hosts_of(timed: Sequence[RankReport]) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """Each named host's ranks, by host name (ranks without a host name are on none)."""
    out: dict[str, list[int]] = {}
    for r in sorted(timed, key=lambda r: r.rank):
        if r.host:
            out.setdefault(r.host, []).append(r.rank)
    return tuple((h, tuple(ranks)) for h, ranks in sorted(out.items()))


def _what_if(timed: Sequence[RankReport], cr: Matching, job: Job) -> WhatIf | None:
    """The replay what-if over the included steps, on the aligned clock."""
    offset = {r: c.offset_ns or 0 for c in cr.clocks for r in c.ranks}
    windows = pl.DataFrame(
        [
            (r.rank, s.step, s.window.start_ns, s.window.end_ns)
            for r in timed
            for s in r.included_steps
            if s.window is not None
        ],
        schema={"rank": pl.Int64, "step": pl.Int64, "start_ns": pl.Int64, "end_ns": pl.Int64},
        orient="row",
    ).with_columns(pl.col("start_ns", "end_ns") - pl.col("rank").replace_strict(offset, default=0))
    columns = WAIT_COLUMNS
    # what each wait is for its rank, the same on its peers: a collective's type and group
    # size; a send/recv's direction and how far its peer's rank number lies from its own
    collectives = _synchronized(cr.aligned).select(
        *columns, pl.format("{} ×{}", "coll_type", pl.len().over("pg", "key")).alias("kind")
    )
    shared = [collectives]
    if cr.p2p_pairs.height:
        peer_offset = (
            pl.when(pl.col("direction") == "send")
            .then(pl.col("receiver") - pl.col("sender"))
            .otherwise(pl.col("sender") - pl.col("receiver"))
        )
        shared.append(
            _synchronized(cr.p2p_pairs).select(
                *columns, pl.format("SendRecv {} {}", "direction", peer_offset).alias("kind")
            )
        )
    waits = pl.concat(shared)
    chain = build_chain(waits, windows)
    if chain is None:
        return None
    found = what_if(chain, job)
    if not found.reproduces or not found.flagged_ranks or not chain.hidden.idle_rows.size:
        return found
    other = build_chain(waits, windows, Reading.IDLE_AS_WAIT)
    return found if other is None else with_idle_as_wait(found, chain, other, job)


def _decided(
    found: StragglerWork, whatif: WhatIf | None, compute: Mapping[int, int | None]
) -> StragglerWork:
    """With a replay that reproduces the measured step, its gains rank and flag the ranks (and
    the first-order estimate is taken for those ranks); else the first-order figures keep
    deciding and the what-if says why."""
    if whatif is None or not whatif.reproduces:
        return replace(found, what_if=whatif)
    rank_gain = dict.fromkeys(whatif.considered, 0)
    rank_gain.update({c.index: c.gain_ns for c in whatif.candidates if c.kind == "rank"})
    fix: dict[int, Candidate] = {}
    for c in whatif.candidates:  # by gain, largest first: each rank's best flagged candidate
        if c.flagged:
            for r in c.ranks:
                fix.setdefault(r, c)
    flagged = set(whatif.flagged_ranks)
    rows = [
        structs.replace(
            r,
            flagged=r.rank in flagged,
            gain_ns=rank_gain.get(r.rank),
            fix=fix[r.rank].label if r.rank in fix else None,
        )
        for r in found.ranks
    ]

    def order(r: RankStraggle) -> tuple[int, int, int, int]:
        best = fix[r.rank].gain_ns if r.rank in fix else 0
        return (-best, -(r.gain_ns or 0), -r.root_delay_ns, r.rank)

    step_if = _first_order_step(rows, found.median_step_ns, compute)
    return replace(
        found,
        ranks=tuple(sorted(rows, key=order)),
        flagged=tuple(sorted(flagged)),
        threshold_ns=whatif.threshold_ns,
        step_if_no_straggler_ns=whatif.step_if_fixed_ns,
        recoverable_pct=whatif.recoverable_pct,
        first_order_step_ns=step_if,
        first_order_recoverable_pct=_recoverable(found.median_step_ns, step_if),
        what_if=whatif,
        flag_basis="replay gain",
        recoverable_basis="replay" if whatif.step_basis == "median" else "replay (mean step)",
    )


def by_schedule_groups(
    groups: Mapping[str, tuple[int, ...]], stages: Mapping[int, int]
) -> frozenset[str]:
    """Groups whose members sit at different stages of the pipelines (the embedding all-reduce
    between the first and the last stage): their order of arrival is the schedule's (in 1F1B
    the first stage finishes its backward last), not evidence of slowness."""
    return frozenset(
        g for g, members in groups.items() if len({stages[m] for m in members if m in stages}) > 1
    )


def peer_groups(
    groups: Mapping[str, tuple[int, ...]], signatures: Mapping[int, str | None]
) -> dict[int, tuple[int, ...]]:
    """metrics.md §6 peers(r): the largest non-world process group holding r whose members all
    run the same kernels in the same order as r (same work signature); else every rank. Ties
    between equally large groups go to the one spread widest over rank numbers (in Megatron's
    layout data-parallel groups stride over the tensor-parallel ones, which wait for each
    other at every layer), then to the one whose member list sorts last."""
    everyone = tuple(sorted(signatures))
    out: dict[int, tuple[int, ...]] = {}
    ordered = sorted(set(groups.values()))
    for rank, signature in sorted(signatures.items()):
        candidates = [
            members
            for members in ordered
            if rank in members
            and len(members) < len(everyone)
            and signature is not None
            and all(signatures.get(m) == signature for m in members)
        ]
        out[rank] = max(candidates, key=_peer_preference) if candidates else everyone
    return out


def _peer_preference(members: tuple[int, ...]) -> tuple[int, int, tuple[int, ...]]:
    return (len(members), max(members) - min(members), members)


def replicas(
    groups: Mapping[str, tuple[int, ...]],
    pipelines: Mapping[str, tuple[int, ...]],
    peers: Mapping[int, tuple[int, ...]],
    ranks: Sequence[int],
) -> tuple[tuple[int, ...], ...]:
    """The data-parallel replicas: ranks joined by send/recv (a pipeline) and by every
    non-world group that holds no two peers (tensor parallel, the embedding group): one model
    copy each. Ordered by their lowest rank; a pure data-parallel job has one rank per replica."""
    parent = {r: r for r in ranks}

    def root(r: int) -> int:
        while parent[r] != r:
            parent[r] = parent[parent[r]]
            r = parent[r]
        return r

    def join(members: Sequence[int]) -> None:
        present = sorted(m for m in members if m in parent)
        for m in present[1:]:
            a, b = root(present[0]), root(m)
            parent[max(a, b)] = min(a, b)

    everyone = set(ranks)
    for chain in pipelines.values():
        join(chain)
    for members in sorted(set(groups.values())):
        inside = [m for m in members if m in everyone]
        if len(inside) < len(everyone) and all(
            len(set(peers.get(m, ())) & set(inside)) <= 1 for m in inside
        ):
            join(inside)
    out: dict[int, list[int]] = {}
    for r in sorted(ranks):
        out.setdefault(root(r), []).append(r)
    return tuple(tuple(v) for _, v in sorted(out.items()))
