"""What-if by replay (metrics.md §6): for each candidate — a rank, a pipeline stage, a
data-parallel replica — the step the dependency replay gives with the candidate's work at its
peers' median; rank and flag by that gain; decompose it by op type.

How a candidate's work is replaced:

- **by its peers, position by position** (a rank, the ranks of a replica): the rank's peers
  (its data-parallel group, stragglers.peer_groups) run the same chain of elements, so the own
  work before each element becomes the median over its peers (the rank itself left out) of
  theirs. A send/recv or collective whose instance holds no other peer (a pipeline transfer, a
  tensor-parallel all-reduce of another replica) also gets its transfer time cut to the peers'
  median at that position: the op-type part of the what-if.
- **by scaling** (a whole stage, or a rank whose chain differs from its peers'): the other
  stages run other work in another order, so there is no position-by-position donor; the
  rank's own work inside its steps is scaled down so that its compute per step drops to the
  target (the other stages' median compute per step; for a rank, its peers' median).

The gain is measured step − replayed step, clipped at 0 (a what-if that makes things slower
gains nothing); as a share of the measured step it lies within 0–100 %.
"""

from __future__ import annotations

import hashlib
import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Literal, cast

import numpy as np
from msgspec import Meta, structs

from tracecomm.analysis.hidden import InferredWait
from tracecomm.analysis.replay import ByStat, Chain, Stat, Timeline, replay, timeline
from tracecomm.doc import Doc, NonNegative, Percent

FLAG_SHARE_OF_STEP = 0.05  # a flagged candidate gains more than this share of the step …
FLAG_TIMES_MEDIAN_RANK = 3.0  # … and more than this many times the median rank's gain
TOLERANCE_PCT = 1.0  # the recorded work must replay to the measured step within this
MAX_RANK_CANDIDATES = 256  # above: the ranks with the largest first-order root delay
RANK_SHORTLIST = 32
MAX_REPLICA_CANDIDATES = 64
DECOMPOSED = 5  # candidates whose gain is split by op type
_CELLS = 1 << 23  # int64 cells per what-if array (64 MiB): how many what-ifs replay at once


CandidateKind = Literal["rank", "stage", "replica", "host"]


FixMethod = Literal["peers", "scaled", "mixed"]


class Candidate(Doc, frozen=True):
    """One thing to fix and what the replay says fixing it gives."""

    kind: CandidateKind
    index: Annotated[
        int,
        Meta(
            ge=0,
            description=(
                "the rank, the stage number, the replica number, or the host's place "
                "among the hosts in name order"
            ),
        ),
    ]
    ranks: tuple[int, ...]
    method: Annotated[
        FixMethod,
        Meta(
            description=(
                "peers: its own work between waits at its peers' median, position by "
                "position; scaled: its own work scaled down to the target compute; mixed: "
                "both, by rank; the waits are always recomputed from the arrivals"
            )
        ),
    ]
    step_if_fixed_ns: NonNegative
    gain_ns: NonNegative  # measured step − replayed step, >= 0
    recoverable_pct: Percent  # 100 · gain / measured step, within 0–100
    flagged: bool = False
    # gain when only that part is fixed: "compute" (own work between shared waits) and each
    # collective type / "SendRecv" (transfer times); None when not decomposed
    by_op_type: Annotated[
        dict[str, NonNegative] | None,
        Meta(
            description=(
                "gain with only that part fixed: compute (own work between shared "
                "waits), each collective type and SendRecv (transfer times); the parts "
                "need not add up to the gain"
            )
        ),
    ] = None
    by_op_type_pct: Annotated[
        dict[str, Percent] | None,
        Meta(description="each by_op_type gain as 100 * gain / the replay's measured step"),
    ] = None  # each as 100 · gain / measured step
    # a stage, replica or host: the rank inside it whose own fix gives half its gain or more
    mostly_rank: Annotated[
        int | None,
        Meta(
            description=(
                "a stage, replica or host: the rank inside whose own fix gives half its gain"
            )
        ),
    ] = None
    host: Annotated[str | None, Meta(description="a host candidate's host name")] = (
        None  # a host candidate's host name
    )
    # over the mean step (all included steps' time): a rank slow in some steps only shows
    # here, the median step hiding it
    total_gain_ns: Annotated[
        int,
        Meta(
            ge=0,
            description=(
                "the gain over the mean step (the run's time over its included steps): a "
                "rank slow in some steps only shows here, the median step hiding it; a "
                "candidate is flagged when either gain passes the flag line"
            ),
        ),
    ] = 0
    total_recoverable_pct: Annotated[
        Percent, Meta(description="100 · total_gain_ns / replay.mean_step_ns")
    ] = 0.0

    @property
    def label(self) -> str:
        return f"host {self.host}" if self.host is not None else f"{self.kind} {self.index}"

    @property
    def gain(self) -> ByStat[int]:
        """gain_ns and total_gain_ns: the gain over each statistic of the step."""
        return ByStat(self.gain_ns, self.total_gain_ns)


@dataclass(frozen=True)
class WhatIf:
    measured_step_ns: int
    replayed_step_ns: int  # the recorded work, replayed (the self-check)
    reproduction_error_pct: float
    tolerance_pct: float
    reproduces: bool
    shared_waits: int
    candidates: tuple[Candidate, ...] = ()  # by gain, largest first
    threshold_ns: int | None = None  # the gain a flagged candidate exceeds
    flagged_ranks: tuple[int, ...] = ()
    step_if_fixed_ns: int | None = None  # every flagged candidate fixed at once
    recoverable_pct: float | None = None
    by_peers: tuple[int, ...] = ()  # flagged ranks whose work came from their peers
    by_scaling: tuple[int, ...] = ()  # flagged ranks whose own work was scaled
    reason: str | None = None  # why the replay does not decide, when it does not
    mean_step_ns: int | None = None  # the recorded work's mean step (replayed)
    # what step_if_fixed_ns and recoverable_pct are of: the ranks' median step, or — when a
    # flagged candidate is slow in some steps only — their mean step (mean_step_ns)
    step_basis: Stat = "median"
    considered: tuple[int, ...] = ()  # ranks weighed as candidates (gain 0 unless listed)
    inferred: tuple[InferredWait, ...] = ()  # the hidden waits the replay took (hidden.py)
    # the waits the flagged fix frees, per step (mean over ranks): inside the kernels, by
    # collective type, and in inferred waits' idle (_freed)
    freed_kernel_wait_ns: Mapping[str, int] = field(default_factory=dict)
    freed_idle_ns: int = 0
    # the other reading of idle no inference explains (hidden.Reading.IDLE_AS_WAIT)
    recoverable_pct_idle_as_wait: float | None = None
    idle_decides: tuple[tuple[int, int, float], ...] = ()  # (rank, idle per step, points)


@dataclass(frozen=True)
class Job:
    """What the candidates are built from, besides the chain."""

    measured_step_ns: int
    peers: Mapping[int, tuple[int, ...]]
    compute: Mapping[int, int | None]  # compute per step (median over included steps)
    compute_by_step: Mapping[int, Mapping[int, int]] = field(default_factory=dict)
    stages: Mapping[int, int] = field(default_factory=dict)  # pipeline rank -> stage
    replicas: tuple[tuple[int, ...], ...] = ()
    first_order: Mapping[int, int] = field(default_factory=dict)  # rank -> root delay
    # hosts holding two ranks or more, in name order (a slow node: one candidate each)
    hosts: tuple[tuple[str, tuple[int, ...]], ...] = ()


@dataclass(frozen=True)
class _Fix:
    """A what-if: some ranks' gaps replaced, some elements' transfers cut (for all members)."""

    gaps: dict[int, np.ndarray]
    cuts: dict[str, tuple[np.ndarray, np.ndarray]]  # op type -> (elements, cut ns)
    method: str


def what_if(chain: Chain, job: Job) -> WhatIf:
    """Replay the recorded work (the check), then every candidate; flag and decompose."""
    recorded = replay(chain, chain.gap[:, None]).map(lambda steps: steps[0] or 0)
    replayed = recorded.median
    measured = job.measured_step_ns
    error = 100.0 * abs(replayed - measured) / measured if measured else 100.0
    check = WhatIf(
        measured,
        replayed,
        error,
        TOLERANCE_PCT,
        error <= TOLERANCE_PCT,
        chain.shared_waits,
        mean_step_ns=recorded.mean,
        inferred=chain.hidden.inferred,
    )
    if not check.reproduces:
        reason = (
            f"the replay of the recorded work gives {replayed} ns for a measured {measured} ns "
            f"({error:.2f} % off, tolerance {TOLERANCE_PCT} %): first-order estimate instead"
        )
        return _replace(check, reason=reason)
    donors = _donors(chain, job.peers)
    raw = _candidate_fixes(chain, job, donors)
    parts = _parts_of([key[2] for key, _ in raw])  # which candidates lie inside which
    fixes = _with_parts(raw, parts)
    keys = [key for key, _ in fixes]
    bases = ByStat(measured, recorded.mean)  # the steps the gains are of
    gains = _gains(chain, bases, [fix for _, fix in fixes]).map(
        lambda by_fix: _at_least_parts(keys, by_fix, parts)
    )
    candidates = [
        _candidate(key, fix, bases, ByStat(median, mean), job)
        for (key, fix), median, mean in zip(fixes, *gains, strict=True)
    ]
    decided = _decide(chain, check, candidates, {(k[0], k[1]): f for k, f in fixes}, parts)
    present = sorted(set(np.unique(chain.rank).tolist()))
    return _replace(decided, considered=tuple(_rank_shortlist(present, job)))


IDLE_DECIDES_PCT = 0.5  # a rank whose idle, read as work again, moves the figure this much
MAX_IDLE_RANKS = 16  # ranks weighed for it, by their idle per step


def with_idle_as_wait(w: WhatIf, chain: Chain, other: Chain, job: Job) -> WhatIf:
    """The flagged fix replayed on ``other``, the chain that reads every idle no inference
    explains as a wait (hidden.Reading.IDLE_AS_WAIT): the other end of the what-if where the
    trace cannot tell. Then, per rank with such idle, that replay with the rank's idle read as
    its own work again: the points it moves are how much its idle decides between the two."""
    flagged = [c for c in w.candidates if c.flagged]
    if not flagged or w.recoverable_pct is None or other.size != chain.size:
        return w
    donors = _donors(other, job.peers)
    merged = _merge([f for c in flagged if (f := _fix_of(other, job, donors, c)) is not None])
    if merged is None:
        return w
    moved = other.gap < chain.gap  # the rows whose idle the other reading takes as a wait
    moved &= ~np.isin(other.rank, list(merged.gaps))
    idle = _idle_per_step(chain, other, moved)
    ranks = sorted(idle, key=lambda r: (-idle[r], r))[:MAX_IDLE_RANKS]
    fixes = [merged]
    for rank in ranks:
        rows = other.rows_of(rank)
        own = np.where(moved[rows], chain.gap[rows], other.gap[rows])
        fixes.append(_Fix({**merged.gaps, rank: own}, merged.cuts, merged.method))
    bases = ByStat(w.measured_step_ns, w.mean_step_ns or w.measured_step_ns)
    base = bases.of(w.step_basis)
    gains = _gains(other, bases, fixes).of(w.step_basis)
    pct = [_pct(g, base) for g in gains]
    decides = tuple(
        (rank, idle[rank], round(pct[0] - p, 2))
        for rank, p in zip(ranks, pct[1:], strict=True)
        if pct[0] - p >= IDLE_DECIDES_PCT
    )
    return _replace(
        w,
        recoverable_pct_idle_as_wait=pct[0],
        idle_decides=tuple(sorted(decides, key=lambda d: (-d[2], d[0]))),
    )


def _fix_of(chain: Chain, job: Job, donors: Mapping[int, _Donor], c: Candidate) -> _Fix | None:
    """A candidate's fix, built again on ``chain`` (as _candidate_fixes builds it)."""
    if c.kind == "stage":
        return _stage_fix(chain, job, c.ranks)
    return _merge([f for r in c.ranks if (f := _rank_fix(chain, job, donors, r)) is not None])


def _idle_per_step(chain: Chain, other: Chain, moved: np.ndarray) -> dict[int, int]:
    """Per rank with moved rows: the idle the other reading takes as a wait, per step."""
    out = {}
    for rank in np.unique(other.rank[moved]).tolist():
        mine = other.rank == rank
        steps = max(1, np.unique(other.step[mine & other.in_step]).size)
        rows = mine & moved & other.in_step
        out[int(rank)] = int(np.sum(chain.gap[rows] - other.gap[rows])) // steps
    return {r: ns for r, ns in out.items() if ns > 0}


def _replace(w: WhatIf, **changes: object) -> WhatIf:
    from dataclasses import replace

    return replace(w, **changes)  # type: ignore[arg-type]


# ---- donors: each rank's work as its peers do it ------------------------------------------


@dataclass(frozen=True)
class _Donor:
    gaps: np.ndarray  # the peers' median gap at each of the rank's positions
    cuts: dict[str, tuple[np.ndarray, np.ndarray]]  # op type -> (elements, transfer excess)


def _donors(chain: Chain, peers: Mapping[int, tuple[int, ...]]) -> dict[int, _Donor]:
    """Per rank with alike peers: its peers' median work, element by element. Peers' chains
    are matched by what each element is (its label), not by its place: concurrent elements
    (a gradient send beside the data-parallel all-reduce) may come in either order."""
    out: dict[int, _Donor] = {}
    groups = sorted({tuple(sorted(g)) for g in peers.values() if len(g) > 1})
    present = set(np.unique(chain.rank).tolist())
    for group in groups:
        alike = _same_shape([r for r in group if r in present], chain)
        if len(alike) < 2:
            continue
        rows = [_canonical_rows(chain, r) for r in alike]
        gaps = _median_of_others(np.stack([chain.gap[i] for i in rows]))
        transfers = _median_of_others(np.stack([chain.transfer[i] for i in rows]))
        elements = np.stack([chain.inst[i] for i in rows])
        shared = _shared_with_peer(elements)
        for i, rank in enumerate(alike):
            own = chain.transfer[rows[i]]
            excess = np.where(shared[i], 0, np.maximum(0, own - transfers[i]))
            back = np.argsort(rows[i], kind="stable")  # canonical order -> the rank's order
            out[rank] = _Donor(gaps[i][back], _cuts_by_type(chain, rows[i], elements[i], excess))
    return out


def _canonical_rows(chain: Chain, rank: int) -> np.ndarray:
    """The rank's rows ordered by label: the same order for every alike peer."""
    span = chain.rows_of(rank)
    label = chain.label[span]
    return span.start + np.lexsort((label[:, 2], label[:, 1], label[:, 0]))


def _same_shape(ranks: list[int], chain: Chain) -> list[int]:
    """The ranks whose chain has the group's most common set of labels (ties: the lowest
    rank's)."""
    digests = {
        r: hashlib.blake2b(
            chain.label[_canonical_rows(chain, r)].tobytes(), digest_size=16
        ).hexdigest()
        for r in ranks
    }
    counts: dict[str, int] = {}
    for r in ranks:
        counts[digests[r]] = counts.get(digests[r], 0) + 1
    best = max(counts.values(), default=0)
    shape = next((digests[r] for r in ranks if counts[digests[r]] == best), None)
    return [r for r in ranks if digests[r] == shape]


def _median_of_others(values: np.ndarray) -> np.ndarray:
    """Per member (row) and position (column): the median of the other members' values,
    halves rounded up."""
    n = values.shape[0]
    order = np.argsort(values, axis=0, kind="stable")
    ordered = np.take_along_axis(values, order, axis=0)
    place = np.empty_like(order)
    np.put_along_axis(place, order, np.arange(n)[:, None].repeat(values.shape[1], 1), axis=0)

    def others(q: int) -> np.ndarray:  # the q-th smallest value once the member is left out
        index = q + (q >= place)
        return np.take_along_axis(ordered, index, axis=0)

    m = n - 1
    middle = others(m // 2) if m % 2 else (others(m // 2 - 1) + others(m // 2)) / 2
    return np.floor(middle + 0.5).astype(np.int64)


def _shared_with_peer(elements: np.ndarray) -> np.ndarray:
    """Per member and position: whether another member takes part in the same element (a
    collective of the peer group itself: its transfer is the group's, not the rank's)."""
    width = int(elements.max()) + 1
    keys = (np.arange(elements.shape[1], dtype=np.int64)[None, :] * width + elements).ravel()
    _, inverse, counts = np.unique(keys, return_inverse=True, return_counts=True)
    return (counts[inverse] > 1).reshape(elements.shape)


def _cuts_by_type(
    chain: Chain, rows: np.ndarray, elements: np.ndarray, excess: np.ndarray
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    keep = excess > 0
    codes = chain.coll_code[rows][keep]
    out = {}
    for code in sorted(set(codes.tolist())):
        pick = codes == code
        out[chain.coll_types[code]] = (elements[keep][pick], excess[keep][pick])
    return dict(sorted(out.items()))


# ---- candidates ---------------------------------------------------------------------------


_Key = tuple[str, int, tuple[int, ...]]  # kind, index, ranks


def _candidate_fixes(
    chain: Chain, job: Job, donors: Mapping[int, _Donor]
) -> list[tuple[_Key, _Fix]]:
    """Every candidate with something to fix (its work above its peers' or the target)."""
    present = sorted(set(np.unique(chain.rank).tolist()))
    out: list[tuple[_Key, _Fix]] = []
    by_rank: dict[int, _Fix | None] = {}  # each rank's fix once, for itself and its groups

    def rank_fix(rank: int) -> _Fix | None:
        if rank not in by_rank:
            by_rank[rank] = _rank_fix(chain, job, donors, rank)
        return by_rank[rank]

    for rank in _rank_shortlist(present, job):
        fix = rank_fix(rank)
        if fix is not None:
            out.append((("rank", rank, (rank,)), fix))
    for stage, members in sorted(_stage_members(job, present).items()):
        fix = _stage_fix(chain, job, members)
        if fix is not None:
            out.append((("stage", stage, tuple(members)), fix))
    for index, replica in _replica_shortlist(job, present):
        fix = _merge([f for r in replica if (f := rank_fix(r)) is not None])
        if fix is not None:
            out.append((("replica", index, replica), fix))
    for index, (_, ranks) in _host_shortlist(job, present):
        fix = _merge([f for r in ranks if (f := rank_fix(r)) is not None])
        if fix is not None:
            out.append((("host", index, ranks), fix))
    return out


def _parts_of(ranks: Sequence[Sequence[int]]) -> list[list[int]]:
    """For each candidate (its ranks), the candidates made of some of its ranks, not all."""
    sets = [frozenset(r) for r in ranks]
    by_size = sorted(range(len(sets)), key=lambda i: len(sets[i]))
    out: list[list[int]] = [[] for _ in sets]
    for i in range(len(sets)):
        for j in by_size:
            if len(sets[j]) >= len(sets[i]):
                break
            if sets[j] < sets[i]:
                out[i].append(j)
    return out


def _at_least_parts(
    keys: Sequence[_Key], gains: Sequence[int], parts: Sequence[Sequence[int]]
) -> list[int]:
    """Each group's gain, at least its best part's. The replayed step is the median over
    ranks of their step windows, and fixing more ranks moves their windows' starts too, so
    the replay of a whole set can come out a hair under one member's (microseconds, where the
    median rank changes); fixing the set includes fixing that member, so the set gets its
    figure."""
    out = list(gains)
    for i, inside in enumerate(parts):
        if keys[i][0] != "rank" and inside:
            out[i] = max(out[i], *(gains[j] for j in inside))
    return out


def _with_parts(
    fixes: list[tuple[_Key, _Fix]], parts: Sequence[Sequence[int]]
) -> list[tuple[_Key, _Fix]]:
    """Each group's fix merged with the fixes of the candidates inside it: fixing a set
    fixes each member at least as its own candidate does, and the replay only shortens
    with shorter work, so a set never gives back less than any of its members."""
    out = []
    for (key, fix), inside in zip(fixes, parts, strict=True):
        if key[0] != "rank" and inside:
            merged = _merge([fix, *(fixes[j][1] for j in inside)])
            assert merged is not None
            fix = _Fix(merged.gaps, merged.cuts, fix.method)
        out.append((key, fix))
    return out


def _host_shortlist(job: Job, present: list[int]) -> list[tuple[int, tuple[str, tuple[int, ...]]]]:
    """The hosts of two ranks or more among several hosts, as (index into job.hosts, host);
    above MAX_REPLICA_CANDIDATES the ones holding the largest first-order root delays."""
    here = set(present)
    hosts = [
        (i, (name, tuple(r for r in ranks if r in here)))
        for i, (name, ranks) in enumerate(job.hosts)
    ]
    hosts = [(i, h) for i, h in hosts if len(h[1]) > 1]
    if len(hosts) < 2:
        return []
    if len(hosts) <= MAX_REPLICA_CANDIDATES:
        return hosts
    worst = sorted(hosts, key=lambda x: (-max(job.first_order.get(r, 0) for r in x[1][1]), x[0]))
    return sorted(worst[:RANK_SHORTLIST])


def _rank_shortlist(present: list[int], job: Job) -> list[int]:
    if len(present) <= MAX_RANK_CANDIDATES:
        return present
    by_delay = sorted(present, key=lambda r: (-job.first_order.get(r, 0), r))
    median = by_delay[len(by_delay) // 2]
    return sorted({*by_delay[:RANK_SHORTLIST], median})


def _stage_members(job: Job, present: list[int]) -> dict[int, list[int]]:
    stages: dict[int, list[int]] = {}
    for rank in present:
        if rank in job.stages:
            stages.setdefault(job.stages[rank], []).append(rank)
    return stages if len(stages) > 1 else {}


def _replica_shortlist(job: Job, present: list[int]) -> list[tuple[int, tuple[int, ...]]]:
    here = set(present)
    replicas = [(i, tuple(r for r in ranks if r in here)) for i, ranks in enumerate(job.replicas)]
    replicas = [(i, ranks) for i, ranks in replicas if len(ranks) > 1]
    if len(replicas) <= MAX_REPLICA_CANDIDATES:
        return replicas
    worst = sorted(replicas, key=lambda x: (-max(job.first_order.get(r, 0) for r in x[1]), x[0]))
    return sorted(worst[:RANK_SHORTLIST])


def _rank_fix(chain: Chain, job: Job, donors: Mapping[int, _Donor], rank: int) -> _Fix | None:
    donor = donors.get(rank)
    if donor is not None:
        # a fix never lengthens the rank's own work: where a peer's is longer, its own stays
        own = chain.gap[chain.rows_of(rank)]
        return _Fix({rank: np.minimum(own, donor.gaps)}, dict(donor.cuts), "peers")
    peers = [p for p in job.peers.get(rank, ()) if p != rank]
    scaled = _scaled(chain, job, rank, _targets(job, peers))
    return None if scaled is None else _Fix({rank: scaled}, {}, "scaled")


def _stage_fix(chain: Chain, job: Job, ranks: Sequence[int]) -> _Fix | None:
    """Every rank of the stage does the other stages' median compute in each step: its own
    work first replaced by its peers' median pattern (one median rank of the stage, where its
    peers run the same chain), then scaled down to that target."""
    stage = job.stages[ranks[0]]
    targets = _targets(job, [r for r, s in sorted(job.stages.items()) if s != stage])
    gaps: dict[int, np.ndarray] = {}
    factors: dict[int, dict[int, float]] = {}
    for group in sorted({tuple(sorted(job.peers.get(r, (r,)))) for r in ranks}):
        members = [r for r in group if r in ranks]
        alike = _same_shape(members, chain)
        pattern = _group_median(chain, alike) if len(alike) > 1 else None
        typical = _median_by_step(job, alike)
        for r in members:
            if pattern is not None and r in alike:
                scaled = _scaled_gaps(pattern[r], chain.step[chain.rows_of(r)], typical, targets)
                factors[r] = _factors(typical, targets)
            else:
                scaled = _scaled(chain, job, r, targets)
                factors[r] = _factors(job.compute_by_step.get(r, {}), targets)
            if scaled is not None:
                gaps[r] = scaled
    if not gaps:
        return None
    return _Fix(gaps, _internal_cuts(chain, ranks, factors), "scaled")


def _factors(own: Mapping[int, int], targets: Mapping[int, int]) -> dict[int, float]:
    """Per step above its target: target / own compute (what _scaled_gaps scales by)."""
    return {s: targets[s] / own[s] for s in own if s in targets and own[s] > targets[s]}


def _internal_cuts(
    chain: Chain, ranks: Sequence[int], factors: Mapping[int, Mapping[int, float]]
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The stage's own collectives (every member inside it: its tensor-parallel all-reduces)
    shrink with its work: a stage that hands layers on hands their communication on too. Per
    op type: (elements, cut ns), the cut being the transfer × (1 − the step's factor)."""
    ordered = chain.by_inst
    inside = np.isin(chain.rank[ordered], np.asarray(list(ranks)))
    lo, hi = chain.inst_offsets[:-1], chain.inst_offsets[1:]
    counts = hi - lo
    present = counts > 0
    count_in = np.zeros(len(counts), dtype=np.int64)
    count_in[present] = np.add.reduceat(inside.astype(np.int64), lo[present])
    first = ordered[np.minimum(lo, len(ordered) - 1)]
    internal = present & (counts > 1) & (count_in == counts) & (chain.code[first] >= 2)
    out: dict[str, list[tuple[int, int]]] = {}
    for e in np.flatnonzero(internal).tolist():
        row = int(first[e])
        f = factors.get(int(chain.rank[row]), {}).get(int(chain.step[row]), 1.0)
        cut = math.floor(chain.transfer[row] * (1.0 - f) + 0.5)
        if cut > 0:
            out.setdefault(chain.coll_types[chain.coll_code[row]], []).append((e, cut))
    return {
        t: (
            np.array([e for e, _ in v], dtype=np.int64),
            np.array([c for _, c in v], dtype=np.int64),
        )
        for t, v in sorted(out.items())
    }


def _group_median(chain: Chain, ranks: Sequence[int]) -> dict[int, np.ndarray]:
    """Per rank: the median gap over ``ranks`` (alike chains) of each of its elements."""
    rows = [_canonical_rows(chain, r) for r in ranks]
    median = np.median(np.stack([chain.gap[i] for i in rows]), axis=0)
    pattern = np.floor(median + 0.5).astype(np.int64)
    return {r: pattern[np.argsort(i, kind="stable")] for r, i in zip(ranks, rows, strict=True)}


def _median_by_step(job: Job, ranks: Sequence[int]) -> dict[int, int]:
    return _targets(job, ranks)


def _targets(job: Job, ranks: Sequence[int]) -> dict[int, int]:
    """Per step: the median compute of ``ranks`` in that step."""
    by_step: dict[int, list[int]] = {}
    for r in ranks:
        for step, compute in sorted(job.compute_by_step.get(r, {}).items()):
            by_step.setdefault(step, []).append(compute)
    return {
        step: m
        for step, values in sorted(by_step.items())
        if (m := _median_int(values)) is not None
    }


def _scaled(chain: Chain, job: Job, rank: int, targets: Mapping[int, int]) -> np.ndarray | None:
    """The rank's gaps with its own work inside each step scaled so that its compute in that
    step drops to the step's target; None when no step is above its target."""
    rows = chain.rows_of(rank)
    return _scaled_gaps(
        chain.gap[rows], chain.step[rows], job.compute_by_step.get(rank, {}), targets
    )


def _scaled_gaps(
    gaps: np.ndarray, step: np.ndarray, own: Mapping[int, int], targets: Mapping[int, int]
) -> np.ndarray | None:
    """``gaps`` (with each one's step) whose positive part in each step shrinks in the ratio
    of the step's target compute to ``own`` compute; None when no step is above its target.
    A ratio, not a difference: part of a rank's compute runs while a shared wait of another
    stream spins (a pipeline's early receive), out of any gap, and shrinks out of sight."""
    steps = sorted(s for s in own if s in targets and own[s] > targets[s])
    if not steps:
        return None
    factor = np.ones(len(gaps))
    for s in steps:  # per step, not per event
        factor[step == s] = targets[s] / own[s]
    return np.where(gaps > 0, np.floor(gaps * factor + 0.5), gaps).astype(np.int64)


def _merge(fixes: Sequence[_Fix]) -> _Fix | None:
    """Several fixes at once: per row the smaller gap, per element the larger cut."""
    if not fixes:
        return None
    gaps: dict[int, np.ndarray] = {}
    cuts: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {}
    for fix in fixes:
        for rank, g in fix.gaps.items():
            gaps[rank] = np.minimum(gaps[rank], g) if rank in gaps else g
        for t, cut in fix.cuts.items():
            cuts.setdefault(t, []).append(cut)
    methods = {f.method for f in fixes}
    merged = {t: _max_cuts(parts) for t, parts in sorted(cuts.items())}
    return _Fix(gaps, merged, methods.pop() if len(methods) == 1 else "mixed")


def _max_cuts(parts: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    elements = np.concatenate([p[0] for p in parts])
    cut = np.concatenate([p[1] for p in parts])
    order = np.lexsort((-cut, elements))
    elements, cut = elements[order], cut[order]
    first = np.r_[True, elements[1:] != elements[:-1]]
    return elements[first], cut[first]


# ---- replaying many what-ifs ----------------------------------------------------------------


def _gains(
    chain: Chain,
    bases: ByStat[int],
    fixes: Sequence[_Fix],
    parts: Sequence[str | None] | None = None,
) -> ByStat[list[int]]:
    """Per fix (with only the named part fixed: "compute", an op type, or None for all), the
    gain over each statistic's step in ``bases`` (the measured median step, the recorded
    work's mean step), clipped at 0; replayed in batches that fit in memory."""
    chosen = list(parts) if parts is not None else [None] * len(fixes)
    width = max(1, min(64, _CELLS // max(chain.size, 1)))
    replayed: list[ByStat[list[int | None]]] = []
    for lo in range(0, len(fixes), width):
        batch = list(zip(fixes[lo : lo + width], chosen[lo : lo + width], strict=True))
        gaps = np.repeat(chain.gap[:, None], len(batch), axis=1)
        transfers = None
        for k, (fix, part) in enumerate(batch):
            transfers = _apply(chain, fix, part, gaps, transfers, k)
        replayed.append(replay(chain, gaps, transfers))
    return ByStat.build(
        lambda stat: [_gain(bases.of(stat), s) for steps in replayed for s in steps.of(stat)]
    )


def _apply(
    chain: Chain,
    fix: _Fix,
    part: str | None,
    gaps: np.ndarray,
    transfers: np.ndarray | None,
    k: int,
) -> np.ndarray | None:
    """Write ``fix`` (only the named part: "compute", an op type, or None for all) into column
    ``k`` of ``gaps`` and of the transfers, which it returns (made when a cut needs them)."""
    if part in (None, "compute"):
        for rank, g in fix.gaps.items():
            gaps[chain.rows_of(rank), k] = g
    for t, (elements, cut) in fix.cuts.items():
        if part not in (None, t):
            continue
        if transfers is None:
            transfers = np.repeat(chain.transfer[:, None], gaps.shape[1], axis=1)
        rows = chain.rows_of_elements(elements)
        lengths = chain.inst_offsets[elements + 1] - chain.inst_offsets[elements]
        transfers[rows, k] = np.maximum(0, transfers[rows, k] - np.repeat(cut, lengths))
    return transfers


def _freed(chain: Chain, fix: _Fix) -> tuple[dict[str, int], int]:
    """What the flagged fix frees of the others' waits, per step (mean over the ranks, each
    rank's total over its steps by its steps): inside the kernels by collective type, and in
    the idle of inferred waits. The recorded timeline against the fixed one, net (a wait the
    fix lengthens counts against it), each rank's waits of a type as their union (a batched
    send and receive wait side by side once): a collective's exposed time that was a wait
    for the straggler is the straggler's (metrics.md §6)."""
    gaps = chain.gap[:, None].copy()
    transfers = _apply(chain, fix, None, gaps, None, 0)
    recorded, fixed = timeline(chain, chain.gap[:, None]), timeline(chain, gaps, transfers)
    inside = chain.in_step & ~np.isin(chain.rank, list(fix.gaps))  # not the fixed ranks'
    ranks, per_rank = np.unique(chain.rank, return_inverse=True)
    steps = np.array(
        [np.unique(chain.step[(per_rank == i) & chain.in_step]).size for i in range(ranks.size)]
    )
    weight = 1.0 / np.maximum(steps, 1) / ranks.size  # per rank: its total -> the mean step
    types = len(chain.coll_types)
    key = per_rank * types + chain.coll_code

    def by_type(
        start_of: Callable[[Timeline], np.ndarray], end_of: Callable[[Timeline], np.ndarray]
    ) -> np.ndarray:
        freed = np.zeros(ranks.size * types)
        for sign, t in ((1, recorded), (-1, fixed)):
            freed += sign * _union(key[inside], start_of(t)[inside], end_of(t)[inside], freed.size)
        return (freed.reshape(ranks.size, types) * weight[:, None]).sum(axis=0)

    kernel = by_type(lambda t: t.arrival, lambda t: t.arrival + t.kernel_wait(chain))
    idle = by_type(lambda t: t.own, lambda t: t.arrival)
    freed_by_type = {
        name: math.floor(float(kernel[code]) + 0.5)
        for code, name in enumerate(chain.coll_types)
        if name
    }
    return (
        {t: ns for t, ns in freed_by_type.items() if ns > 0},
        max(0, math.floor(float(idle.sum()) + 0.5)),
    )


def _union(key: np.ndarray, start: np.ndarray, end: np.ndarray, keys: int) -> np.ndarray:
    """Per key (0 … keys − 1): the length of the union of its intervals [start, end)."""
    keep = end > start
    key, start, end = key[keep], start[keep], end[keep]
    out = np.zeros(keys)
    if not key.size:
        return out
    order = np.lexsort((start, key))
    key, start, end = key[order], start[order], end[order]
    # the running end within each key: offset every key past the one before it
    base = int(start.min())
    span = int(end.max()) - base + 1
    shifted = end - base + key * span
    reach = np.maximum.accumulate(shifted) - key * span + base
    before = np.r_[np.iinfo(np.int64).min, reach[:-1]]
    before = np.where(np.r_[True, key[1:] != key[:-1]], np.iinfo(np.int64).min, before)
    covered = np.maximum(0, end - np.maximum(start, before))
    np.add.at(out, key, covered)
    return out


def _gain(base: int, step: int | None) -> int:
    """What a replayed step gives back of ``base``, clipped at 0 (0: no step replayed)."""
    return max(0, base - step) if step is not None else 0


def _pct(gain: float, base: int) -> float:
    """``gain`` as a share of ``base``, within 0–100 % (0 without a base)."""
    return min(100.0, max(0.0, 100.0 * gain / base)) if base else 0.0


def _candidate(key: _Key, fix: _Fix, bases: ByStat[int], gain: ByStat[int], job: Job) -> Candidate:
    kind, index, ranks = key
    pct = ByStat.build(lambda stat: _pct(gain.of(stat), bases.of(stat)))
    return Candidate(
        kind=cast(CandidateKind, kind),
        index=index,
        ranks=ranks,
        method=cast(FixMethod, fix.method),
        step_if_fixed_ns=bases.median - gain.median,
        gain_ns=gain.median,
        recoverable_pct=pct.median,
        host=job.hosts[index][0] if kind == "host" else None,
        total_gain_ns=gain.mean,
        total_recoverable_pct=pct.mean,
    )


# ---- the decision ---------------------------------------------------------------------------


def _decide(
    chain: Chain,
    check: WhatIf,
    candidates: list[Candidate],
    fixes: Mapping[tuple[str, int], _Fix],
    parts: Sequence[Sequence[int]] | None = None,
) -> WhatIf:
    """Flag: a rank whose gain (over the median step, or over the mean step) exceeds the flag
    line; a stage, replica or host whose gain exceeds it and exceeds by more than it the best
    candidate inside it (``parts``: the candidates inside each, in the same order, found here
    when not given); then the fewest ranks that explain it (_subsumed). Then decompose, and
    replay all flagged at once."""
    bases = ByStat(check.measured_step_ns, check.mean_step_ns or check.measured_step_ns)
    # the flag line over each statistic: an intermittent straggler is flagged on its gain
    # over the mean step
    lines = ByStat.build(
        lambda stat: _flag_line(
            bases.of(stat), [c.gain.of(stat) for c in candidates if c.kind == "rank"]
        )
    )
    threshold = lines.median
    if parts is None:
        parts = _parts_of([c.ranks for c in candidates])
    flagged = [
        _passes(c, [candidates[j] for j in inside], lines)
        for c, inside in zip(candidates, parts, strict=True)
    ]
    candidates = _subsumed(
        [_flag(c, f) for c, f in zip(candidates, flagged, strict=True)], threshold
    )
    ordered = sorted(candidates, key=lambda c: (-c.gain_ns, _KIND_ORDER[c.kind], c.index))
    decomposed = _decompose(chain, bases, ordered, fixes)
    chosen = [f for c in decomposed if c.flagged and (f := fixes.get((c.kind, c.index)))]
    merged = _merge(chosen)
    gains = _gains(chain, bases, [merged]) if merged is not None else ByStat([0], [0])
    # a flagged candidate that only the mean step shows (slow in some steps): the what-if is
    # the mean step's, as the median step would say fixing it gives nothing
    on_mean = any(c.flagged and c.gain_ns <= threshold for c in decomposed)
    basis: Stat = "mean" if on_mean else "median"
    base, gain = bases.of(basis), gains.of(basis)[0]
    ranks = sorted({r for c in decomposed if c.flagged for r in c.ranks})
    freed_kernel, freed_idle = _freed(chain, merged) if merged is not None else ({}, 0)
    return _replace(
        check,
        freed_kernel_wait_ns=freed_kernel,
        freed_idle_ns=freed_idle,
        candidates=_with_mostly(decomposed),
        threshold_ns=threshold,
        flagged_ranks=tuple(ranks),
        step_basis=basis,
        step_if_fixed_ns=base - gain,
        recoverable_pct=_pct(gain, base),
        by_peers=tuple(r for c in decomposed if c.flagged and c.method == "peers" for r in c.ranks),
        by_scaling=tuple(
            r for c in decomposed if c.flagged and c.method != "peers" for r in c.ranks
        ),
    )


_KIND_ORDER = {"rank": 0, "stage": 1, "host": 2, "replica": 3}


def _flag_line(step: int, rank_gains: Sequence[int]) -> int:
    """The gain a flagged candidate exceeds, over one statistic of the step: a share of that
    step (FLAG_SHARE_OF_STEP) and a multiple of the median rank's gain over it."""
    median_rank = statistics.median(rank_gains) if rank_gains else 0
    return math.floor(max(FLAG_SHARE_OF_STEP * step, FLAG_TIMES_MEDIAN_RANK * median_rank) + 0.5)


def _passes(c: Candidate, inside: Sequence[Candidate], lines: ByStat[int]) -> bool:
    """Over either statistic: the gain exceeds the flag line and, for a stage, replica or
    host, exceeds by more than the line the gain of its best part (``inside``: a rank, or a
    smaller group inside it): the group, not a part of it, is the cause."""
    parts = () if c.kind == "rank" else inside
    best = ByStat.build(lambda stat: max((p.gain.of(stat) for p in parts), default=0))
    return any(g - b > line and g > line for g, b, line in zip(c.gain, best, lines, strict=True))


def _subsumed(candidates: list[Candidate], threshold: int) -> list[Candidate]:
    """The fewest ranks that explain the gain. A flagged candidate inside a flagged group is
    the group's part, not a cause of its own: the group (the slow node, the overloaded stage)
    is what to fix and what it costs. A flagged group that overlaps a smaller flagged one and
    gives no more than the flag line beyond it is that one seen wider (the stages a slow node
    straddles): the smaller one stays."""

    groups = [set(c.ranks) for c in candidates if c.flagged]
    out = []
    for c in candidates:
        mine = set(c.ranks)
        if c.flagged and any(mine < g for g in groups):
            c = structs.replace(c, flagged=False)
        out.append(c)
    kept: list[Candidate] = []
    for c in sorted(out, key=lambda c: (len(c.ranks), -c.gain_ns, _KIND_ORDER[c.kind], c.index)):
        if not c.flagged:
            continue
        mine = set(c.ranks)
        wider = [k for k in kept if mine & set(k.ranks) and c.gain_ns <= k.gain_ns + threshold]
        if wider:
            out = [structs.replace(x, flagged=False) if x is c else x for x in out]
        else:
            kept.append(c)
    return out


def _flag(c: Candidate, flagged: bool) -> Candidate:

    return structs.replace(c, flagged=flagged)


def _decompose(
    chain: Chain,
    bases: ByStat[int],
    ordered: list[Candidate],
    fixes: Mapping[tuple[str, int], _Fix],
) -> list[Candidate]:
    """The gain of the flagged candidates (or the best one when none is) and the next ones up
    to DECOMPOSED, split by op type: the gain with only that part of the work fixed."""

    picked = [c for c in ordered if c.flagged] or ordered[:1]
    picked = (picked + [c for c in ordered if c not in picked])[:DECOMPOSED]
    picked = [c for c in picked if c.gain_ns > 0 and (c.kind, c.index) in fixes]
    jobs = [(c, part) for c in picked for part in ["compute", *fixes[(c.kind, c.index)].cuts]]
    gains = _gains(
        chain, bases, [fixes[(c.kind, c.index)] for c, _ in jobs], [p for _, p in jobs]
    ).median
    parts: dict[tuple[str, int], dict[str, int]] = {}
    for (c, part), gain in zip(jobs, gains, strict=True):
        parts.setdefault((c.kind, c.index), {})[part] = gain
    return [
        structs.replace(c, by_op_type=gain, by_op_type_pct=_shares_of(gain, bases.median))
        for c in ordered
        for gain in [parts.get((c.kind, c.index))]
    ]


def _with_mostly(candidates: list[Candidate]) -> tuple[Candidate, ...]:
    """Each stage, replica or host with the rank inside it that gives most of its gain, if
    one gives half of it or more (the "most of it is rank N's" the views print)."""

    by_rank = {c.index: c for c in candidates if c.kind == "rank"}
    out = []
    for c in candidates:
        inside = [by_rank[r] for r in c.ranks if r in by_rank]
        best = max(inside, key=lambda r: r.gain_ns, default=None)
        if c.kind != "rank" and c.gain_ns and best is not None and 2 * best.gain_ns >= c.gain_ns:
            c = structs.replace(c, mostly_rank=best.index)
        out.append(c)
    return tuple(out)


def _shares_of(gains: Mapping[str, int] | None, measured: int) -> dict[str, float] | None:
    """Each gain as a share of the measured step, in 0–100 % (recoverable_pct's base)."""
    if gains is None:
        return None
    return {k: _pct(v, measured) for k, v in gains.items()}


def _median_int(values: list[int]) -> int | None:
    return math.floor(statistics.median(values) + 0.5) if values else None
