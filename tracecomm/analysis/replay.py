"""Dependency replay (metrics.md §6, ``recoverable_pct_replay``): re-time every rank's timeline
with the flagged ranks' own work at their peers' median and see when each step would end.

The model. Each rank's timeline is a chain of shared waits — matched collective instances and
send/recv pairs — separated by the rank's own work (compute, launches, idle: whatever lies
between the end of one shared wait and the start of the next). A shared wait starts on every
member when that member's own work before it is done, and each member leaves it its recorded
transfer time after the last member arrived:

    start'[r, i] = end'[r, i-1] + gap[r, i]
    end'[r, i]   = max over members q of start'[q, i] + (end[r, i] - max_q start[q, i])

Replayed with the recorded gaps it gives back the recorded timeline exactly (a built-in check);
replayed with the flagged ranks' gaps taken from their unflagged peers, position by position, it
gives the step time without the stragglers, delays propagating through every collective and
pipeline dependency. Ranks whose peers are all flagged (a slow pipeline stage: other stages
run other work in another order, so no position-by-position donor exists) have their own work
scaled to the target compute instead, a coarser estimate. Two shared waits on different
streams of one rank are chained in order of their last arrival, a dependency the hardware may
not have.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from dataclasses import dataclass
from itertools import pairwise

import numpy as np
import polars as pl


@dataclass(frozen=True)
class ReplayEstimate:
    step_ns: int  # median step replayed with the recorded gaps (equals the measured median)
    step_if_no_straggler_ns: int
    recoverable_pct: float
    shared_waits: int  # collective instances and send/recv pairs replayed
    by_peers: tuple[int, ...]  # flagged ranks re-timed from their peers' gaps
    by_scaling: tuple[int, ...]  # flagged ranks whose own work was scaled instead


def replay(
    shared: pl.DataFrame,
    windows: pl.DataFrame,
    flagged: Mapping[int, float],
    peers: Mapping[int, tuple[int, ...]],
) -> ReplayEstimate | None:
    """``shared``: one row per (rank, shared wait): rank, pg, key, start_ns, end_ns, on one clock;
    ``windows``: the included steps, rank, step, start_ns, end_ns on the same clock;
    ``flagged``: rank -> factor its own work is scaled by when no unflagged peer matches it;
    None when a rank with windows has no shared wait (nothing to propagate through)."""
    chain = _chain(shared, windows)
    if chain.is_empty() or chain.filter(pl.col("inst") >= 0).is_empty():
        return None
    gaps = chain["gap"].to_numpy().copy()
    base = _replayed_steps(chain, gaps)
    by_peers, by_scaling = [], []
    shapes = _shapes(chain) if flagged else {}
    for rank, factor in sorted(flagged.items()):
        own = (chain["rank"] == rank).to_numpy()
        if not own.any():
            continue
        alike = [
            p
            for p in peers.get(rank, ())
            if p not in flagged and p != rank and shapes.get(p) == shapes[rank]
        ]
        donor = _peer_gaps(chain, alike)
        if donor is not None:
            gaps[own] = donor
            by_peers.append(rank)
        else:
            gaps[own] = np.where(gaps[own] > 0, np.rint(gaps[own] * factor), gaps[own])
            by_scaling.append(rank)
    what_if = _replayed_steps(chain, gaps)
    if base is None or what_if is None:
        return None
    return ReplayEstimate(
        step_ns=base,
        step_if_no_straggler_ns=what_if,
        recoverable_pct=100.0 * (base - what_if) / base if base else 0.0,
        shared_waits=chain.filter(pl.col("inst") >= 0)["inst"].n_unique(),
        by_peers=tuple(by_peers),
        by_scaling=tuple(by_scaling),
    )


def _chain(shared: pl.DataFrame, windows: pl.DataFrame) -> pl.DataFrame:
    """Every rank's elements in one global order that respects each rank's chain: shared waits
    keyed by their last arrival, step starts and ends (local, zero length) by their own time.
    ``gap`` is the own work before each element; ``transfer`` what follows the last arrival."""
    waits = (
        shared.select("rank", "pg", "key", "start_ns", "end_ns")
        .with_columns(pl.col("start_ns").max().over("pg", "key").alias("at"))
        .with_columns((pl.col("end_ns") - pl.col("at")).alias("transfer"))
    )
    order = (
        waits.group_by("pg", "key")
        .agg(pl.col("at").first())
        .sort("at", "pg", "key")
        .with_row_index("inst")
        .select("pg", "key", pl.col("inst").cast(pl.Int64))
    )
    waits = waits.join(order, on=["pg", "key"]).select(
        "rank", "at", "inst", "start_ns", "end_ns", "transfer", pl.lit(None, pl.Int64).alias("step")
    )
    marks = pl.concat(
        [
            windows.select(
                "rank",
                pl.col(edge).alias("at"),
                pl.lit(-1, pl.Int64).alias("inst"),
                pl.col(edge).alias("start_ns"),
                pl.col(edge).alias("end_ns"),
                pl.lit(0, pl.Int64).alias("transfer"),
                (pl.col("step") * 2 + int(edge == "end_ns")).alias("step"),
            )
            for edge in ("start_ns", "end_ns")
        ]
    )
    return (
        pl.concat([waits, marks.cast(waits.schema)])
        # a step's start before a wait arriving at the same instant, its end after
        .sort("rank", "at", pl.col("step").fill_null(-1) % 2 == 1, "inst")
        .with_row_index("row")
        .with_columns(
            (pl.col("start_ns") - pl.col("end_ns").shift(1).over("rank")).fill_null(0).alias("gap"),
            pl.col("rank").cum_count().over("rank").alias("pos"),
            pl.when(pl.col("inst") >= 0)
            .then(pl.col("row").cast(pl.Int64))
            .shift(1)
            .forward_fill()
            .over("rank")
            .fill_null(-1)
            .alias("prev_wait"),
            pl.col("start_ns").first().over("rank").alias("head"),
        )
    )


def _peer_gaps(chain: pl.DataFrame, donors: list[int]) -> np.ndarray | None:
    """The median gap per chain position over the donor ranks (chains of one shape)."""
    if not donors:
        return None
    gaps = (
        chain.filter(pl.col("rank").is_in(donors))
        .group_by("pos")
        .agg(pl.col("gap").median())
        .sort("pos")["gap"]
        .to_numpy()
    )
    return np.floor(gaps + 0.5).astype(np.int64)


def _shapes(chain: pl.DataFrame) -> dict[int, tuple[int, int]]:
    """Per rank, a digest of its chain's shape: the sequence of waits and step marks (the same
    for ranks doing the same work in the same order) and its length."""
    return {
        rank: (digest, n)
        for rank, digest, n in chain.group_by("rank")
        .agg(pl.struct("pos", pl.col("step").fill_null(-1)).hash().sum(), pl.len())
        .iter_rows()
    }


def _replayed_steps(chain: pl.DataFrame, gaps: np.ndarray) -> int | None:
    """Median over ranks of each rank's median replayed step (halves round up)."""
    marks = chain.with_columns(pl.Series("t", _replay_times(chain, gaps))).filter(
        pl.col("inst") < 0
    )
    steps = (
        marks.group_by("rank", pl.col("step") // 2)
        .agg(
            (
                pl.col("t").filter(pl.col("step") % 2 == 1).first()
                - pl.col("t").filter(pl.col("step") % 2 == 0).first()
            ).alias("window")
        )
        .group_by("rank")
        .agg(pl.col("window").median())
    )
    per_rank = [math.floor(v + 0.5) for v in steps["window"].drop_nulls().to_list()]
    return math.floor(statistics.median(per_rank) + 0.5) if per_rank else None


def _replay_times(chain: pl.DataFrame, gaps: np.ndarray) -> np.ndarray:
    """Replayed time of every element (a wait's end, a mark's instant). Shared waits go in
    global order; a mark follows from the rank's wait before it. A rank's chain starts where
    it was recorded to start."""
    ranks = chain["rank"].to_numpy()
    inst = chain["inst"].to_numpy()
    transfer = chain["transfer"].to_numpy()
    prev = chain["prev_wait"].to_numpy()  # the rank's latest wait before the element, -1: none
    head = chain["head"].to_numpy()  # the rank's chain start
    # own work since the rank's chain start: the gap sums between any two elements
    first = np.r_[True, ranks[1:] != ranks[:-1]]
    head_row = np.maximum.accumulate(np.where(first, np.arange(len(ranks)), 0))
    total = np.cumsum(gaps)
    since_head = total - (total - gaps)[head_row]
    lead = since_head - np.where(prev >= 0, since_head[np.maximum(prev, 0)], 0)
    times = np.zeros(len(ranks), dtype=np.int64)
    rows = np.flatnonzero(inst >= 0)
    rows = rows[np.argsort(inst[rows], kind="stable")]
    bounds = np.flatnonzero(np.r_[True, np.diff(inst[rows]) != 0, True])
    for a, b in pairwise(bounds.tolist()):
        members = rows[a:b]
        before = prev[members]
        starts = np.where(before >= 0, times[np.maximum(before, 0)], head[members])
        times[members] = (starts + lead[members]).max() + transfer[members]
    marks = np.flatnonzero(inst < 0)
    before = prev[marks]
    times[marks] = np.where(before >= 0, times[np.maximum(before, 0)], head[marks]) + lead[marks]
    return times
