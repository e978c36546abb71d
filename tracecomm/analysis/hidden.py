"""Hidden dependencies (metrics.md §6): idle before a shared wait that was a wait on another
rank's element the trace does not show.

A rank's GPU idles before an element when its host is held: host work (a data loader, the
optimizer's Python), or a wait the profiler did not time — a CPU barrier over gloo, a file
system, a synchronization through a store. The replay prices idle as the rank's own work
unless it can tell it is a wait, so an unrecorded wait on a straggler hides what fixing the
straggler gives back: the waiting ranks keep their idle and the step does not shrink.

The evidence. For a waiting rank's element (its rank, code and occurrence in the step: the
same element step after step) with idle before it, the *releases* in a step are the shared
waits of other ranks that ended inside the idle, the last of them and those that ended within
``NOISE_NS`` of it (a stage's tensor-parallel ranks end their sends together; which ends last
is noise). The element waited on a release when, across the steps:

- the release is the same element (by its first member's rank, code and occurrence) in at
  least ``MIN_STEP_SHARE`` of the steps, and in at least two (of the elements among the
  releases, the one found in the most steps);
- the idle mostly comes before it: the median lag from the release to the resume is at most
  ``MAX_LAG_SHARE`` of the median idle;
- the resume follows the release, not the idle's own start: the lag varies at most
  ``MAX_SPREAD_RATIO`` as much as the time from the idle's start to the release does (a rank
  that comes back from its own host work at its own time shows the opposite), and the idle's
  start varies by more than clock noise.

The replay then takes the element's own work as ending where the idle began, and its arrival
as the release's end plus the recorded lag (``arrival' ≥ end'[release] + lag``): with recorded
gaps it gives back the recorded timeline exactly, and a faster release frees the waiters.
Idle that passes none of this stays own work; ``Reading.IDLE_AS_WAIT`` takes every idle
before an element as a wait on its last release all the same — the other end of the bounds
the what-if gives (whatif.py) where the trace cannot tell.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass
from enum import Enum

import numpy as np

IDLE_MIN_NS = 1_000_000  # idle shorter than this is launch jitter, not a wait worth a name
MIN_STEP_SHARE = 0.75
MAX_LAG_SHARE = 0.5
MAX_SPREAD_RATIO = 0.5
NOISE_NS = 150_000  # below this, spreads are clock noise (replay.PREDECESSOR_SLACK_NS)


class Reading(Enum):
    """How the replay reads idle before an element that no recorded event explains."""

    INFERRED = "inferred"  # a wait only where the evidence above says so; else own work
    IDLE_AS_WAIT = "idle as wait"  # every such idle a wait on its last release


@dataclass(frozen=True)
class HiddenWaits:
    """Per dependency: the waiting row, the row whose end released it, the lag between, and
    where the waiting row's own work ended (the start of its idle)."""

    row: np.ndarray
    source: np.ndarray
    lag: np.ndarray
    work_end: np.ndarray
    inferred: tuple[InferredWait, ...]
    idle_rows: np.ndarray  # rows with idle before them no inference explains (by rank: bounds)

    @staticmethod
    def none() -> HiddenWaits:
        empty = np.zeros(0, dtype=np.int64)
        return HiddenWaits(empty, empty, empty, empty, (), empty)


@dataclass(frozen=True)
class InferredWait:
    """Ranks whose idle before an element waits for one element of another rank."""

    waiters: tuple[int, ...]
    source_rank: int
    source_kind: str  # what the releasing element is on its rank ("SendRecv send -16", …)
    waiter_kind: str  # the element the waiters resume with
    steps: int  # steps in which every waiter waited for it (the fewest over the waiters)
    of_steps: int  # steps in which the waiters idled before that element
    lag_min_ns: int
    lag_max_ns: int
    idle_per_step_ns: int  # the median waiter's median idle before its element


@dataclass(frozen=True)
class ChainRows:
    """What the inference reads of the chain, one entry per row (rows grouped by rank)."""

    rank: np.ndarray
    inst: np.ndarray
    code: np.ndarray
    label: np.ndarray  # (step, code, occurrence)
    in_step: np.ndarray
    arrival: np.ndarray
    start: np.ndarray  # the kernel's start (after the arrival when it waited before it)
    end: np.ndarray
    idle: np.ndarray  # GPU idle right before the kernel
    pred: np.ndarray
    kind: tuple[str, ...]  # per code: what the element is
    first_row: np.ndarray  # per row: its element's first member row


def hidden_waits(rows: ChainRows, reading: Reading) -> HiddenWaits:
    """The waits the idle before elements hides (module docstring)."""
    waiting = np.flatnonzero(
        (rows.code >= 2)
        & rows.in_step
        & (rows.idle >= IDLE_MIN_NS)
        & (rows.arrival == rows.start)
        & (rows.pred >= 0)
    )
    if waiting.size == 0:
        return HiddenWaits.none()
    candidates = _release_candidates(rows, waiting)
    found = np.array([bool(c) for c in candidates], dtype=bool)
    waiting = waiting[found]
    candidates = [c for c in candidates if c]
    if reading is Reading.IDLE_AS_WAIT:
        last = np.array([c[0] for c in candidates], dtype=np.int64)
        return _waits(rows, waiting, last, (), np.zeros(0, dtype=np.int64))
    accepted, releases, evidence = _accepted(rows, waiting, candidates)
    unexplained = np.setdiff1d(
        np.flatnonzero((rows.code >= 2) & rows.in_step & (rows.idle >= IDLE_MIN_NS)), accepted
    )
    return _waits(rows, accepted, releases, evidence, unexplained)


def _waits(
    rows: ChainRows,
    waiting: np.ndarray,
    releases: np.ndarray,
    evidence: tuple[InferredWait, ...],
    unexplained: np.ndarray,
) -> HiddenWaits:
    t = rows.arrival[waiting]
    return HiddenWaits(
        row=waiting.astype(np.int64),
        source=releases.astype(np.int64),
        lag=(t - rows.end[releases]).astype(np.int64),
        work_end=(t - rows.idle[waiting]).astype(np.int64),
        inferred=evidence,
        idle_rows=unexplained.astype(np.int64),
    )


MAX_LOOK_BACK = 64  # elements ending inside an idle passed over looking for an earlier one
MAX_CANDIDATES = 16  # releases ending together kept per idle


def _release_candidates(rows: ChainRows, waiting: np.ndarray) -> list[list[int]]:
    """Per waiting row: the releases that ended inside its idle, last first — rows of other
    ranks, of elements earlier in the global order, the last of them and those within
    NOISE_NS of it. Several end together where a release's peers finish as one (the
    tensor-parallel ranks of a stage): which of them ends last is clock noise, and the
    evidence picks the one that holds. Searched by element (at most MAX_LOOK_BACK elements
    whose first member ended inside the idle, each its last member of another rank that
    ended there): bounded per idle, however many ranks a collective holds."""
    shared = np.flatnonzero(rows.code >= 2)
    # each element's member rows by end (ties: the later row), elements by their first end
    order = shared[np.lexsort((shared, rows.end[shared], rows.inst[shared]))]
    member_end = rows.end[order]
    element = rows.inst[order]
    heads = np.flatnonzero(np.r_[True, element[1:] != element[:-1]])
    tails = np.r_[heads[1:], order.size]
    by_first = np.argsort(member_end[heads], kind="stable")
    first_end = member_end[heads][by_first]
    t_all = rows.arrival[waiting]
    his = np.searchsorted(first_end, t_all, side="right") - 1
    out: list[list[int]] = []
    for w, t, hi in zip(waiting.tolist(), t_all.tolist(), his.tolist(), strict=True):
        since, rank = t - int(rows.idle[w]), int(rows.rank[w])
        found: list[int] = []
        for k in range(hi, max(-1, hi - MAX_LOOK_BACK), -1):
            if first_end[k] < since:
                break
            e = int(by_first[k])
            lo, top = int(heads[e]), int(tails[e])
            if element[lo] >= rows.inst[w]:
                continue
            p = lo + int(np.searchsorted(member_end[lo:top], t, side="right")) - 1
            while p >= lo and rows.rank[order[p]] == rank:
                p -= 1
            if p >= lo and member_end[p] >= since:
                found.append(int(order[p]))
        found.sort(key=lambda j: (-int(rows.end[j]), -j))
        last = int(rows.end[found[0]]) if found else 0
        out.append([j for j in found if rows.end[j] >= last - NOISE_NS][:MAX_CANDIDATES])
    return out


def _accepted(
    rows: ChainRows, waiting: np.ndarray, candidates: list[list[int]]
) -> tuple[np.ndarray, np.ndarray, tuple[InferredWait, ...]]:
    """The waiting rows the evidence accepts, the release each waited for, and the evidence
    grouped by release."""
    by_waiter: dict[tuple[int, int, int], list[int]] = defaultdict(list)
    for n, w in enumerate(waiting.tolist()):
        by_waiter[(int(rows.rank[w]), int(rows.label[w, 1]), int(rows.label[w, 2]))].append(n)
    accepted: dict[int, int] = {}  # waiting row -> its release
    groups: dict[tuple[int, int, int, int], list[tuple[int, int, list[int]]]] = defaultdict(list)
    for (rank, code, _), members in by_waiter.items():
        # per step, each candidate's element once; the element found in the most steps (ties:
        # the one that ended last more often, then the lowest) is the release
        seen = [{_identity(rows, j): j for j in reversed(candidates[n])} for n in members]
        counts = Counter(key for step in seen for key in step)
        lasts = Counter(_identity(rows, candidates[n][0]) for n in members)
        source = min(counts, key=lambda k: (-counts[k], -lasts[k], k))
        if counts[source] < max(2, MIN_STEP_SHARE * len(members)):
            continue
        hits = [n for n, step in zip(members, seen, strict=True) if source in step]
        w = waiting[hits]
        j = np.array([seen[members.index(n)][source] for n in hits], dtype=np.int64)
        t = rows.arrival[w]
        lag = t - rows.end[j]
        idle = rows.idle[w]
        before = rows.end[j] - (t - idle)  # from the idle's start to the release
        if np.median(lag) > MAX_LAG_SHARE * np.median(idle):
            continue
        if _spread(before) <= NOISE_NS or _spread(lag) > MAX_SPREAD_RATIO * _spread(before):
            continue
        accepted.update(zip(w.tolist(), j.tolist(), strict=True))
        groups[(source[0], source[1], source[2], code)].append((rank, len(members), hits))
    ordered = sorted(accepted)
    evidence = tuple(
        _evidence(rows, waiting, accepted, members) for _, members in sorted(groups.items())
    )
    return (
        np.asarray(ordered, dtype=np.int64),
        np.asarray([accepted[w] for w in ordered], dtype=np.int64),
        evidence,
    )


def _identity(rows: ChainRows, row: int) -> tuple[int, int, int]:
    """A release's element, the same step after step: its first member's rank, code and
    occurrence (a send/recv pair's two rows name one element)."""
    first = int(rows.first_row[row])
    return int(rows.rank[first]), int(rows.label[first, 1]), int(rows.label[first, 2])


def _spread(values: np.ndarray) -> float:
    return float(np.max(values) - np.min(values)) if values.size else 0.0


def _evidence(
    rows: ChainRows,
    waiting: np.ndarray,
    accepted: dict[int, int],
    members: list[tuple[int, int, list[int]]],
) -> InferredWait:
    hits = [n for _, _, h in members for n in h]
    w = waiting[hits]
    j = np.array([accepted[x] for x in w.tolist()], dtype=np.int64)
    source = Counter(int(rows.rank[x]) for x in j.tolist()).most_common(1)[0][0]
    lag = rows.arrival[w] - rows.end[j]
    idle = [int(np.median(rows.idle[waiting[h]])) for _, _, h in members]
    mine = j[rows.rank[j] == source]
    return InferredWait(
        waiters=tuple(sorted(rank for rank, _, _ in members)),
        source_rank=source,
        source_kind=rows.kind[int(rows.code[mine[0]])] if mine.size else "",
        waiter_kind=rows.kind[int(rows.code[w[0]])],
        steps=min(len(h) for _, _, h in members),
        of_steps=max(n for _, n, _ in members),
        lag_min_ns=int(lag.min()),
        lag_max_ns=int(lag.max()),
        idle_per_step_ns=int(np.median(idle)),
    )
