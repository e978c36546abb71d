"""Dependency replay (metrics.md §6): re-time every rank's timeline with some ranks' own work
changed and see when each step would end.

The model. Each rank's timeline is a chain of elements: the shared waits it takes part in
(synchronized collective instances and send/recv pairs, arrivals.py) and the start and end of
each included step (zero-length marks). Between them lies the rank's own work — compute,
copies, launches, host time. A shared wait's time on a rank splits into wait and transfer:
the wait runs from the rank's arrival to the last member's arrival (inside the kernel, as NCCL
kernels spin, or before it), the transfer from the last arrival to the end — the time of the
member that waited least, the same for every member. A recorded wait is never replayed as
work: waits are recomputed from the arrivals.

An element starts once two things hold: the rank's own work before it is done, and the stream
it runs on is free. The first is ``ready``: the arrival, or, for a kernel that queued behind
another kernel of its stream (it started within RELEASE_SLACK_NS of that kernel's end), the end
of the compute it was launched after (ProcessGroupNCCL makes its stream wait for the calling
stream's queued work; engine/collectives.py ``ready_ns``), where that came earlier — in the
recording the queue hid it. Its work predecessor ``p`` is the rank's element that ended last
before the compute leading to that moment began (one still running beside it, on another
stream, cannot have held it back; a kernel that queued had its own work lead into ``ready``,
not into its start) — within RELEASE_SLACK_NS, or PREDECESSOR_SLACK_NS where no element ended
right before that compute (a coarse clock put it before the end of the wait it followed); its
queue predecessor ``q`` the previous shared wait on its stream, and a hidden wait (hidden.py)
adds ``end'[release] + lag``:

    gap[r, i]      = ready[r, i] − end[r, p]                      (own work before it, >= 0)
    arrival'[r, i] = max(end'[r, p] + gap[r, i], end'[r, q] + hold[r, i])
    end'[r, i]     = max over members m of arrival'[m, i] + (end[r, i] − max_m arrival[m, i])

(``hold``: arrival − end[q] for a kernel that queued, a few µs; 0 otherwise.) Replayed with the
recorded gaps it gives back the recorded timeline exactly (the built-in check the report
carries); replayed with some ranks' gaps (or a shared wait's transfer time) changed, it gives
the step time that change would bring, delays propagating through every collective, send/recv
and stream. An element's own work depends on one predecessor only, the one that held it back
in the recording; a what-if that delays another earlier element past it is not seen (what-ifs
here make work shorter, not longer).

The computation runs level by level (all elements whose inputs are known at once), and for many
what-ifs side by side: ``gaps`` and ``transfers`` are (elements × what-ifs) arrays.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Generic, Literal, TypeVar

import numpy as np
import polars as pl

from tracecomm.analysis.hidden import ChainRows, HiddenWaits, Reading, hidden_waits

T = TypeVar("T")
U = TypeVar("U")

_FAR_PAST = np.iinfo(np.int64).min // 4  # "no constraint" without overflowing an addition
RELEASE_SLACK_NS = 20_000
# how far a work start may precede the end of the wait that released it: coarse clocks (the
# ByteDance conversions put compute up to ~131 µs before the send/recv it waited for ends;
# Kineto's µs timestamps a hair) — the stream-queue rule keeps RELEASE_SLACK_NS
PREDECESSOR_SLACK_NS = 150_000
# the columns of a shared wait build_chain reads (besides ``kind``; ready_ns, stream and
# work_since_ns default to the arrival and no stream when absent)
WAIT_COLUMNS = (
    "rank",
    "pg",
    "key",
    "coll_type",
    "arrival_ns",
    "end_ns",
    "work_since_ns",
    "ready_ns",
    "ready_since_ns",
    "stream",
    "start_ns",
    "idle_before_ns",
)

# one level of the replay: (rows grouped by element, their work predecessors (-1: none), head
# constraint, the positions among them with a queue predecessor, those predecessors, their
# holds, element bounds, rows per element, the positions with a hidden dependency, the rows
# that release them, the lags after)
_Level = tuple[
    np.ndarray,
    np.ndarray,
    np.ndarray,
    np.ndarray,
    np.ndarray,
    np.ndarray,
    np.ndarray,
    np.ndarray,
    np.ndarray,
    np.ndarray,
    np.ndarray,
]


Stat = Literal["median", "mean"]


@dataclass(frozen=True)
class ByStat(Generic[T]):
    """One figure for each statistic of the step a replay gives: the ranks' median step
    (median over ranks of each rank's median step) and their mean step (median over ranks of
    each rank's mean over its included steps). A rank slow in a third of the steps leaves the
    median step where it was and shows in the mean."""

    median: T
    mean: T

    @staticmethod
    def build(figure: Callable[[Stat], U]) -> ByStat[U]:
        """The figure computed for each statistic."""
        return ByStat(figure("median"), figure("mean"))

    def of(self, stat: Stat) -> T:
        return self.median if stat == "median" else self.mean

    def map(self, f: Callable[[T], U]) -> ByStat[U]:
        return ByStat(f(self.median), f(self.mean))

    def __iter__(self) -> Iterator[T]:  # median, mean: zip() pairs up the statistics
        return iter((self.median, self.mean))


@dataclass(frozen=True)
class Chain:
    """Every rank's elements in one array, rows grouped by rank in chain order."""

    rank: np.ndarray  # per row
    pos: np.ndarray  # place in the rank's chain
    inst: np.ndarray  # shared wait (or mark) id, in a global order that respects every chain
    code: np.ndarray  # what the element is: 0 start mark, 1 end mark, else its kind's number
    coll_code: np.ndarray  # the shared wait's type, as a number into coll_types (0: a mark)
    gap: np.ndarray  # recorded own work before the element
    transfer: np.ndarray  # recorded end − last arrival
    in_step: np.ndarray  # the gap lies inside an included step (bool)
    step: np.ndarray  # that step's number (-1 outside included steps)
    # what the element is, whatever the order of concurrent elements on the rank: the step it
    # follows, its code and how many elements of that code came before it there
    label: np.ndarray  # (rows, 3)
    starts: np.ndarray  # rows of step-start marks, one per (rank, included step)
    ends: np.ndarray  # the matching step-end marks
    mark_rank: np.ndarray  # the rank of each (start, end) pair
    levels: tuple[_Level, ...]
    pred: np.ndarray  # each row's work predecessor (-1: none)
    ready: np.ndarray  # when each row's own work was done (its arrival unless it queued)
    end: np.ndarray  # each row's recorded end
    shared_waits: int  # distinct shared waits in the chain
    by_inst: np.ndarray  # rows ordered by element
    inst_offsets: np.ndarray  # element i's rows are by_inst[inst_offsets[i]:inst_offsets[i + 1]]
    coll_types: tuple[str, ...] = ("",)  # the names of coll_code's numbers
    hidden: HiddenWaits = field(default_factory=HiddenWaits.none)  # inferred waits (hidden.py)

    @property
    def size(self) -> int:
        return len(self.rank)

    def rows_of(self, rank: int) -> slice:
        lo, hi = np.searchsorted(self.rank, [rank, rank + 1])
        return slice(int(lo), int(hi))

    def rows_of_elements(self, elements: np.ndarray) -> np.ndarray:
        """All member rows of the given elements, element by element."""
        lo, hi = self.inst_offsets[elements], self.inst_offsets[elements + 1]
        if lo.size == 0:
            return np.zeros(0, dtype=np.int64)
        lengths = hi - lo
        ramp = np.arange(int(lengths.sum())) - np.repeat(np.cumsum(lengths) - lengths, lengths)
        return self.by_inst[np.repeat(lo, lengths) + ramp]


def build_chain(
    waits: pl.DataFrame, windows: pl.DataFrame, reading: Reading = Reading.INFERRED
) -> Chain | None:
    """``waits``: one row per (rank, synchronized shared wait): rank, pg, key, coll_type,
    arrival_ns, end_ns, on one clock, and ``kind`` (what the wait is for the rank, alike on
    peers: its type and group size, a send/recv's direction and peer offset; default the
    type); ``windows``: the included steps (rank, step, start_ns,
    end_ns) on that clock. None when some rank with windows has no shared wait."""
    if waits.height == 0 or windows.height == 0:
        return None
    if windows.select(pl.col("rank").is_in(waits["rank"].unique().implode()).all()).item() is False:
        return None
    frame = _elements(waits, windows)
    frame = frame.with_columns(pl.Series("inst", _global_order(frame)))
    rank = frame["rank"].to_numpy()
    inst = frame["inst"].to_numpy().astype(np.int64)
    queue, hold, ready = _queues(frame, inst)
    queued = ready < frame["arrival_ns"].to_numpy()  # its own work done before it started
    pred = _predecessors(frame, ready, queued)
    # a stream predecessor that is the work predecessor adds nothing unless it held the start
    queue = np.where((queue == pred) & (hold == 0), -1, queue)
    inside = _inside_steps(frame)
    segment = _step_numbers(frame)
    label = _labels(frame, segment)
    codes = frame["code"].to_numpy().astype(np.int64)
    by_code = dict(zip(codes.tolist(), frame["kind"].to_list(), strict=True))
    by_inst = np.argsort(inst, kind="stable")
    inst_offsets = np.searchsorted(inst[by_inst], np.arange(int(inst.max()) + 2))
    first_row = by_inst[inst_offsets[inst]]
    hidden = hidden_waits(
        ChainRows(
            rank=rank,
            inst=inst,
            code=codes,
            label=label,
            in_step=inside,
            arrival=frame["arrival_ns"].to_numpy().astype(np.int64),
            start=frame["start_ns"].to_numpy().astype(np.int64),
            end=frame["end_ns"].to_numpy().astype(np.int64),
            idle=frame["idle_before_ns"].to_numpy().astype(np.int64),
            pred=pred,
            kind=tuple(by_code.get(c, "") for c in range(int(codes.max()) + 1)),
            first_row=first_row,
        ),
        reading,
    )
    # a waiting element's own work ended where its idle began; the wait is the dependency's
    ready[hidden.row] = np.minimum(ready[hidden.row], hidden.work_end)
    ended = frame["end_ns"].to_numpy()[np.maximum(pred, 0)]
    gap = np.where(pred >= 0, np.maximum(0, ready - ended), 0)
    head = np.where(pred < 0, ready, _FAR_PAST)
    starts, ends, mark_rank = _step_marks(frame)
    levels = _levels(inst, pred, head, queue, hold, hidden)
    types = {t: i for i, t in enumerate(["", *sorted(set(frame["coll_type"].unique()) - {""})])}
    return Chain(
        rank=rank,
        pos=frame["pos"].to_numpy(),
        inst=inst,
        code=codes,
        coll_code=frame["coll_type"].replace_strict(types, default=0).to_numpy().astype(np.int64),
        coll_types=tuple(types),
        gap=gap.astype(np.int64),
        transfer=frame["transfer"].to_numpy().astype(np.int64),
        in_step=inside,
        step=np.where(inside, segment, -1),
        label=label,
        starts=starts,
        ends=ends,
        mark_rank=mark_rank,
        levels=levels,
        pred=pred,
        ready=ready.astype(np.int64),
        end=frame["end_ns"].to_numpy().astype(np.int64),
        shared_waits=int(frame.filter(pl.col("code") >= 2)["inst"].n_unique()),
        by_inst=by_inst,
        inst_offsets=inst_offsets,
        hidden=hidden,
    )


def replay(
    chain: Chain, gaps: np.ndarray, transfers: np.ndarray | None = None
) -> ByStat[list[int | None]]:
    """Per column of ``gaps`` (elements × what-ifs; ``transfers`` likewise, default as
    recorded): the step under each statistic (ByStat)."""
    return _steps(_durations(chain, gaps, transfers), chain.mark_rank)


def timeline(chain: Chain, gaps: np.ndarray, transfers: np.ndarray | None = None) -> Timeline:
    """One what-if's replayed timeline, row by row (``gaps`` and ``transfers`` one column)."""
    own = np.zeros((chain.size, gaps.shape[1]), dtype=np.int64)
    arrival = np.zeros_like(own)
    end = _ends(chain, gaps, transfers, own, arrival)
    return Timeline(own[:, 0], arrival[:, 0], end[: chain.size, 0])


@dataclass(frozen=True)
class Timeline:
    """Per row: when its rank's own work before the element was done (stream holds
    included), when it arrived at the element (after a hidden wait, hidden.py), and when the
    element ended. From the arrival to the element's last member's is the wait inside the
    kernel; from the own work to the arrival, the hidden wait's idle."""

    own: np.ndarray
    arrival: np.ndarray
    end: np.ndarray

    def kernel_wait(self, chain: Chain) -> np.ndarray:
        """Per row: the time its kernel waits for the element's last member."""
        last = np.maximum.reduceat(self.arrival[chain.by_inst], chain.inst_offsets[:-1])
        return last[chain.inst] - self.arrival


def _durations(chain: Chain, gaps: np.ndarray, transfers: np.ndarray | None) -> np.ndarray:
    end = _ends(chain, gaps, transfers)
    return end[chain.ends] - end[chain.starts]


def _ends(
    chain: Chain,
    gaps: np.ndarray,
    transfers: np.ndarray | None,
    own: np.ndarray | None = None,
    arrival: np.ndarray | None = None,
) -> np.ndarray:
    """Per row (and a last row for "nothing") and column: when the row's element ended;
    ``own`` and ``arrival``, when given, receive each row's arrival before and after its
    hidden wait (Timeline)."""
    width = gaps.shape[1]
    moved = chain.transfer[:, None] if transfers is None else transfers
    end = np.full((chain.size + 1, width), _FAR_PAST, dtype=np.int64)  # row -1: nothing
    for rows, pred, head, queued, queue, hold, bounds, counts, held, source, lag in chain.levels:
        arrived = np.maximum(end[pred], head[:, None])
        arrived += gaps[rows]
        if queued.size:  # the rows whose stream can hold them beyond their own work
            arrived[queued] = np.maximum(arrived[queued], end[queue] + hold[:, None])
        if own is not None:
            own[rows] = arrived
        if held.size:  # the rows that waited for another rank's element (hidden.py)
            arrived[held] = np.maximum(arrived[held], end[source] + lag[:, None])
        if arrival is not None:
            arrival[rows] = arrived
        last = np.maximum.reduceat(arrived, bounds, axis=0)
        end[rows] = np.repeat(last, counts, axis=0) + moved[rows]
    return end


def _elements(waits: pl.DataFrame, windows: pl.DataFrame) -> pl.DataFrame:
    """Shared waits and step marks with their chain order on each rank: by last arrival, a
    step's start before a wait arriving at the same instant, its end after."""
    if "kind" not in waits.columns:
        waits = waits.with_columns(pl.col("coll_type").alias("kind"))
    if "work_since_ns" not in waits.columns:
        waits = waits.with_columns(pl.col("arrival_ns").alias("work_since_ns"))
    if "ready_ns" not in waits.columns:
        waits = waits.with_columns(pl.col("arrival_ns").alias("ready_ns"))
    if "ready_since_ns" not in waits.columns:
        waits = waits.with_columns(pl.col("ready_ns").alias("ready_since_ns"))
    if "stream" not in waits.columns:
        waits = waits.with_columns(pl.lit(None, dtype=pl.Int64).alias("stream"))
    if "start_ns" not in waits.columns:
        waits = waits.with_columns(pl.col("arrival_ns").alias("start_ns"))
    if "idle_before_ns" not in waits.columns:
        waits = waits.with_columns(pl.lit(0, dtype=pl.Int64).alias("idle_before_ns"))
    # each shared wait numbered in the order of its group and key (a small table: the strings
    # are hashed once, and every later sort and grouping runs on integers)
    instances = (
        waits.group_by("pg", "key")
        .agg(pl.col("arrival_ns").max().alias("at"))
        .sort("pg", "key")
        .with_row_index("id")
        .with_columns(pl.col("id").cast(pl.Int64))
    )
    shared = (
        waits.join(instances, on=["pg", "key"], how="left", maintain_order="left")
        .with_columns((pl.col("end_ns") - pl.col("at")).alias("transfer"))
        .select(
            "rank",
            "at",
            pl.lit(1, pl.Int8).alias("sub"),
            "id",
            "arrival_ns",
            "end_ns",
            pl.min_horizontal("arrival_ns", "work_since_ns").alias("work_since_ns"),
            pl.min_horizontal("arrival_ns", "ready_ns").alias("ready_ns"),
            pl.min_horizontal("arrival_ns", "ready_ns", "ready_since_ns").alias("ready_since_ns"),
            pl.col("stream").cast(pl.Int64),
            pl.col("start_ns").fill_null(pl.col("arrival_ns")).cast(pl.Int64),
            pl.col("idle_before_ns").fill_null(0).cast(pl.Int64),
            "transfer",
            "coll_type",
            "kind",
            pl.lit(None, pl.Int64).alias("mark"),
        )
    )
    marks = pl.concat(
        [
            windows.select(
                "rank",
                pl.col(edge).alias("at"),
                pl.lit(sub, pl.Int8).alias("sub"),
                # after every shared wait: rank, step and edge, in order
                (instances.height + (pl.col("rank") * 2**32 + pl.col("step")) * 2 + sub // 2)
                .cast(pl.Int64)
                .alias("id"),
                pl.col(edge).alias("arrival_ns"),
                pl.col(edge).alias("end_ns"),
                pl.col(edge).alias("work_since_ns"),
                pl.col(edge).alias("ready_ns"),
                pl.col(edge).alias("ready_since_ns"),
                pl.lit(None, pl.Int64).alias("stream"),
                pl.col(edge).alias("start_ns"),
                pl.lit(0, pl.Int64).alias("idle_before_ns"),
                pl.lit(0, pl.Int64).alias("transfer"),
                pl.lit("").alias("coll_type"),
                pl.lit("").alias("kind"),
                (pl.col("step") * 2 + int(sub == 2)).alias("mark"),
            )
            for edge, sub in (("start_ns", 0), ("end_ns", 2))
        ]
    )
    kinds = {"": 0}
    every = pl.concat([shared, marks.cast(shared.schema)])
    codes = sorted(set(every["kind"].unique().to_list()) - {""})
    kinds.update({t: i + 2 for i, t in enumerate(codes)})
    return every.sort("rank", "at", "sub", "id").with_columns(
        pl.int_range(pl.len()).over("rank").alias("pos"),
        pl.when(pl.col("sub") == 0)
        .then(0)
        .when(pl.col("sub") == 2)
        .then(1)
        .otherwise(pl.col("kind").replace_strict(kinds, default=0))
        .cast(pl.Int64)
        .alias("code"),
    )


def _global_order(frame: pl.DataFrame) -> np.ndarray:
    """Per row, its element's number in one order (last arrival, then start / wait / end, then
    id) that every rank's chain follows."""
    order = (
        frame.group_by("id")
        .agg(pl.col("at").first(), pl.col("sub").first())
        .sort("at", "sub", "id")
        .with_row_index("inst")
        .select("id", pl.col("inst").cast(pl.Int64))
    )
    return frame.join(order, on="id", how="left", maintain_order="left")["inst"].to_numpy()


def _queues(frame: pl.DataFrame, inst: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per row: the rank's previous shared wait on the same stream (-1: none, or one that
    ended after this one's arrival), the hold after its end (the arrival − its end when the
    element queued behind it, started within RELEASE_SLACK_NS of its end; else 0), and when
    the element's own work was ready: for an element that queued, the end of the compute it
    was launched after (``ready_ns``) where that came earlier; else its arrival. The replay
    keeps both: an element starts once its own work is done and its stream is free, so a
    wait recorded behind a kernel that waited for a late peer is not replayed as work."""
    rows = (
        frame.select("rank", "stream", "arrival_ns", "code")
        .with_row_index("_row")
        .filter(pl.col("stream").is_not_null() & (pl.col("code") >= 2))
        .sort("rank", "stream", "arrival_ns", "_row")
        .with_columns(pl.col("_row").shift(1).over("rank", "stream").alias("_prev"))
        .filter(pl.col("_prev").is_not_null())
    )
    n = frame.height
    queue = np.full(n, -1, dtype=np.int64)
    here = rows["_row"].to_numpy().astype(np.int64)
    prev = rows["_prev"].to_numpy().astype(np.int64)
    arrival = frame["arrival_ns"].to_numpy().astype(np.int64)
    end = frame["end_ns"].to_numpy().astype(np.int64)
    usable = (end[prev] <= arrival[here]) & (inst[prev] < inst[here])
    queue[here[usable]] = prev[usable]
    safe = np.maximum(queue, 0)
    queued = (queue >= 0) & (arrival - end[safe] <= RELEASE_SLACK_NS)
    hold = np.where(queued, arrival - end[safe], 0)
    known = frame["ready_ns"].fill_null(frame["arrival_ns"]).to_numpy().astype(np.int64)
    ready = np.where(queued, np.minimum(arrival, known), arrival)
    return queue, hold, ready


def _predecessors(
    frame: pl.DataFrame, ready: np.ndarray | None = None, queued: np.ndarray | None = None
) -> np.ndarray:
    """Per row: the rank's earlier element that ended last before the work leading into this
    one began (-1: none). Only an element that had ended can have held this one back; one
    still running beside it (an all-reduce on another stream, the other half of a batched
    send/recv) did not, and chaining it would invent a dependency. Within RELEASE_SLACK_NS:
    timestamps rounded to µs put a kernel a hair before the end of the wait that released it;
    within PREDECESSOR_SLACK_NS where nothing ended right before the work (coarse clocks).
    ``queued``: the rows whose own work led into their ready (ready_since_ns), not their
    start. Rows come grouped by rank in chain order."""
    rank = frame["rank"].to_numpy()
    end = frame["end_ns"].to_numpy()
    arrival = frame["arrival_ns"].to_numpy() if ready is None else ready
    since = frame["work_since_ns"].to_numpy()
    if queued is not None:  # a queued element's own work led into its ready, not its start
        since = np.where(queued, frame["ready_since_ns"].to_numpy(), since)
    strict = _by_rank(rank, end, np.minimum(arrival, since + RELEASE_SLACK_NS))
    wide = _by_rank(rank, end, np.minimum(arrival, since + PREDECESSOR_SLACK_NS))
    # the wider slack only where no element ending right before the work explains its start:
    # an element ending just after it began is then the wait it followed on a coarse clock;
    # otherwise it ran beside the work (a receive on its own stream) and held nothing
    explained = (strict >= 0) & (end[np.maximum(strict, 0)] >= since - RELEASE_SLACK_NS)
    return np.where(explained, strict, wide)


def _by_rank(rank: np.ndarray, end: np.ndarray, released: np.ndarray) -> np.ndarray:
    pred = np.full(len(rank), -1, dtype=np.int64)
    bounds = np.flatnonzero(np.r_[True, rank[1:] != rank[:-1], True])
    for lo, hi in pairwise(bounds.tolist()):  # per rank, not per event
        mine = _rank_predecessors(end[lo:hi], released[lo:hi])
        pred[lo:hi] = np.where(mine >= 0, mine + lo, -1)
    return pred


def _rank_predecessors(end: np.ndarray, released: np.ndarray) -> np.ndarray:
    """One rank's predecessors, as positions in its chain (-1: none)."""
    n = len(end)
    pos = np.arange(n)
    # by end; among equal ends the earliest in the chain comes last
    order = np.lexsort((-pos, end))
    ordered = end[order]
    found = np.searchsorted(ordered, released, side="right") - 1
    pred = np.where(found >= 0, order[np.maximum(found, 0)], -1)
    # itself, or an element placed after it ending exactly then: the latest strictly before
    bad = pred >= pos
    if bad.any():
        strict = np.searchsorted(ordered, released[bad], side="left") - 1
        pred[bad] = np.where(strict >= 0, order[np.maximum(strict, 0)], -1)
    return pred


def _levels(
    inst: np.ndarray,
    pred: np.ndarray,
    head: np.ndarray,
    queue: np.ndarray,
    hold: np.ndarray,
    hidden: HiddenWaits,
) -> tuple[_Level, ...]:
    """Group rows into levels: an element's level is one more than the highest level among its
    members' predecessors (work, queue and hidden), so every level depends only on the ones
    before it (see _Level)."""
    by_inst = np.argsort(inst, kind="stable")
    count = int(inst.max()) + 1 if inst.size else 0
    element = inst[by_inst]
    released_by = np.full(len(inst), -1, dtype=np.int64)
    lag_of = np.zeros(len(inst), dtype=np.int64)
    released_by[hidden.row] = hidden.source
    lag_of[hidden.row] = hidden.lag
    # each (element, element it depends on) once: the members of a collective mostly share
    # their predecessor, so the Python pass below runs over far fewer pairs than rows
    pairs = [
        _distinct_pairs(element, np.where(dep >= 0, inst[np.maximum(dep, 0)], -1)[by_inst])
        for dep in (pred, queue, released_by)
    ]
    on = np.concatenate([p[0] for p in pairs])
    of = np.concatenate([p[1] for p in pairs])
    order = np.argsort(on, kind="stable")
    level = [0] * count
    for e, d in zip(on[order].tolist(), of[order].tolist(), strict=True):
        # elements come in an order that respects chains: d < e is final already
        if level[d] + 1 > level[e]:
            level[e] = level[d] + 1
    row_level = np.asarray(level, dtype=np.int64)[inst]
    order = np.lexsort((inst, row_level))
    cuts = np.flatnonzero(np.diff(row_level[order])) + 1
    out = []
    for rows in np.split(order, cuts):
        element = inst[rows]
        starts = np.flatnonzero(np.r_[True, element[1:] != element[:-1]])
        counts = np.diff(np.r_[starts, len(rows)])
        queued = np.flatnonzero(queue[rows] >= 0)
        waits_on, holds = queue[rows][queued], hold[rows][queued]
        held = np.flatnonzero(released_by[rows] >= 0)
        out.append(
            (
                rows,
                pred[rows],
                head[rows],
                queued,
                waits_on,
                holds,
                starts,
                counts,
                held,
                released_by[rows][held],
                lag_of[rows][held],
            )
        )
    return tuple(out)


def _distinct_pairs(element: np.ndarray, dep: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The (element, dependency) pairs with a dependency, repeats in a row dropped (rows come
    grouped by element)."""
    keep = dep >= 0
    keep[1:] &= (element[1:] != element[:-1]) | (dep[1:] != dep[:-1])
    return element[keep], dep[keep]


def _step_marks(frame: pl.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rows = frame.with_row_index("row").filter(pl.col("mark").is_not_null())
    pairs = (
        rows.with_columns((pl.col("mark") // 2).alias("step"), (pl.col("mark") % 2).alias("edge"))
        .group_by("rank", "step")
        .agg(
            pl.col("row").filter(pl.col("edge") == 0).first().alias("start"),
            pl.col("row").filter(pl.col("edge") == 1).first().alias("end"),
        )
        .drop_nulls()
        .sort("rank", "step")
    )
    return (
        pairs["start"].to_numpy().astype(np.int64),
        pairs["end"].to_numpy().astype(np.int64),
        pairs["rank"].to_numpy(),
    )


def _step_numbers(frame: pl.DataFrame) -> np.ndarray:
    """Per row: the number of the last step that started on its rank at or before it."""
    started = pl.when(pl.col("code") == 0).then(pl.col("mark") // 2)
    return (
        frame.select(started.forward_fill().over("rank").fill_null(-1))
        .to_series()
        .to_numpy()
        .astype(np.int64)
    )


def _labels(frame: pl.DataFrame, segment: np.ndarray) -> np.ndarray:
    """Per row: (step it follows, code, occurrence of that code since that step's start)."""
    rank, code = frame["rank"].to_numpy(), frame["code"].to_numpy().astype(np.int64)
    # rows come by rank in chain order, steps rising: (rank, step) blocks are contiguous
    block = np.cumsum(np.r_[True, (rank[1:] != rank[:-1]) | (segment[1:] != segment[:-1])])
    key = block * (int(code.max()) + 1) + code
    order = np.argsort(key, kind="stable")  # chain order kept inside each group
    starts = np.r_[True, key[order][1:] != key[order][:-1]]
    first = np.maximum.accumulate(np.where(starts, np.arange(len(order)), 0))
    k = np.empty(len(order), dtype=np.int64)
    k[order] = np.arange(len(order)) - first
    return np.column_stack([segment, code, k]).astype(np.int64)


def _inside_steps(frame: pl.DataFrame) -> np.ndarray:
    """Rows whose gap lies inside an included step: after its start mark, up to its end."""
    depth = (
        pl.when(pl.col("code") == 0)
        .then(1)
        .when(pl.col("code") == 1)
        .then(-1)
        .otherwise(0)
        .cum_sum()
        .over("rank")
    )
    inside = frame.select(((depth > 0) | (pl.col("code") == 1)) & (pl.col("code") != 0))
    return inside.to_series().to_numpy()


def _steps(durations: np.ndarray, ranks: np.ndarray) -> ByStat[list[int | None]]:
    """Per column: the median over ranks of each rank's median step and of its mean step,
    halves rounded up (each rank's figure first, then the median's)."""
    if durations.shape[0] == 0:
        none: list[int | None] = [None] * durations.shape[1]
        return ByStat(none, list(none))
    starts = np.flatnonzero(np.r_[True, ranks[1:] != ranks[:-1]])
    bounds = np.r_[starts, len(ranks)]
    per_rank = ByStat(
        median=np.stack([np.median(durations[a:b], axis=0) for a, b in pairwise(bounds.tolist())]),
        mean=np.add.reduceat(durations.astype(np.float64), starts, axis=0)
        / np.diff(bounds)[:, None],
    )
    return per_rank.map(
        lambda v: [math.floor(x + 0.5) for x in np.median(_halves_up(v), axis=0).tolist()]
    )


def _halves_up(values: np.ndarray) -> np.ndarray:
    return np.floor(values + 0.5)
