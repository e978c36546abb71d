"""Expected per-rank figures, computed from the schedule alone (metrics.md sections 2-3).

Deliberately naive interval arithmetic on Python lists: it must be easy to check by eye, and it
must not share code with the engine it is the reference for.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from tracecomm.synth.names import comm_type
from tracecomm.synth.schedule import Op, RankSpec, RunSpec, Step

Interval = tuple[int, int]
Intervals = list[Interval]


@dataclass(frozen=True)
class Figures:
    """The partition of one window, in integer ns."""

    compute_ns: int
    comm_ns: int
    overlapped_comm_ns: int
    exposed_comm_ns: int
    exposed_memory_ns: int
    idle_ns: int
    window_ns: int
    by_type: dict[str, tuple[int, int]] = field(default_factory=dict)


@dataclass(frozen=True)
class RankExpected:
    """What the engine must report for one rank."""

    rank: int
    complete_steps: tuple[int, ...]
    incomplete_steps: tuple[int, ...]
    total: Figures
    steps: dict[int, Figures]
    comm_kernels: int


def union(intervals: Intervals) -> Intervals:
    """Sorted, disjoint, non-empty intervals covering the same points."""
    merged: Intervals = []
    for start, end in sorted(i for i in intervals if i[1] > i[0]):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def intersect(a: Intervals, b: Intervals) -> Intervals:
    """Points in both a and b."""
    out: Intervals = []
    ua, ub = union(a), union(b)
    i = j = 0
    while i < len(ua) and j < len(ub):
        start, end = max(ua[i][0], ub[j][0]), min(ua[i][1], ub[j][1])
        if start < end:
            out.append((start, end))
        if ua[i][1] < ub[j][1]:
            i += 1
        else:
            j += 1
    return out


def subtract(a: Intervals, b: Intervals) -> Intervals:
    """Points in a and not in b."""
    out: Intervals = []
    cuts = union(b)
    j = 0
    for start, end in union(a):
        # Both lists are sorted, so cuts that end before this interval never matter again.
        while j < len(cuts) and cuts[j][1] <= start:
            j += 1
        cursor, k = start, j
        while k < len(cuts) and cuts[k][0] < end:
            if cuts[k][0] > cursor:
                out.append((cursor, cuts[k][0]))
            cursor = max(cursor, cuts[k][1])
            k += 1
        if cursor < end:
            out.append((cursor, end))
    return out


def length(intervals: Intervals) -> int:
    return sum(end - start for start, end in union(intervals))


def clip(intervals: Intervals, window: Interval) -> Intervals:
    return intersect(intervals, [window])


def step_window(step: Step) -> Interval | None:
    """[first start, last end] of the recorded ops launched inside the step."""
    ops = [op for op in step.ops if op.launched and op.recorded]
    if not ops:
        return None
    return min(op.start_ns for op in ops), max(op.end_ns for op in ops)


def is_complete(step: Step) -> bool:
    # a launch inside a graph capture runs nothing: never missing
    launched = [op for op in step.ops if op.launched and not op.captured]
    return bool(launched) and all(op.recorded for op in launched)


def figures(spec: RankSpec, window: Interval) -> Figures:
    """Partition of one window over every recorded device event of the rank."""
    ops = [op for op in spec.all_ops() if op.recorded]
    compute = clip(_spans(ops, ("compute",)), window)
    comm = clip(_spans(ops, ("comm",)), window)
    memory = clip(_spans(ops, ("memcpy", "memset")), window)
    busy = union(compute + comm + memory)
    window_ns = window[1] - window[0]
    return Figures(
        compute_ns=length(compute),
        comm_ns=length(comm),
        overlapped_comm_ns=length(intersect(comm, compute)),
        exposed_comm_ns=length(subtract(comm, compute)),
        exposed_memory_ns=length(subtract(memory, compute + comm)),
        idle_ns=window_ns - length(busy),
        window_ns=window_ns,
        by_type=_by_type(spec, ops, compute, window),
    )


def _spans(ops: list[Op], kinds: tuple[str, ...]) -> Intervals:
    return [(op.start_ns, op.end_ns) for op in ops if op.kind in kinds]


def _by_type(
    spec: RankSpec, ops: list[Op], compute: Intervals, window: Interval
) -> dict[str, tuple[int, int]]:
    spans: dict[str, Intervals] = {}
    for op in ops:
        if op.kind == "comm":
            spans.setdefault(comm_type(op, spec.naming), []).append((op.start_ns, op.end_ns))
    out: dict[str, tuple[int, int]] = {}
    for coll in sorted(spans):
        clipped = clip(spans[coll], window)
        if clipped:
            out[coll] = (length(clipped), length(subtract(clipped, compute)))
    return out


def rank_window(spec: RankSpec) -> Interval:
    """Default analysis window: all complete steps; a file without steps is one window."""
    if not spec.steps:
        ops = [op for op in spec.all_ops() if op.recorded]
        if not ops:
            return 0, 0
        return min(op.start_ns for op in ops), max(op.end_ns for op in ops)
    windows = [w for s in spec.steps if is_complete(s) and (w := step_window(s)) is not None]
    if not windows:
        return 0, 0
    return min(w[0] for w in windows), max(w[1] for w in windows)


def expected_figures(spec: RankSpec) -> RankExpected:
    """Figures the engine must report for this rank, derived from the spec only."""
    complete = [s for s in spec.steps if is_complete(s)]
    per_step: dict[int, Figures] = {}
    for step in complete:
        window = step_window(step)
        assert window is not None  # a complete step has a recorded launched op
        per_step[step.number] = figures(spec, window)
    return RankExpected(
        rank=spec.rank,
        complete_steps=tuple(s.number for s in complete),
        incomplete_steps=tuple(s.number for s in spec.steps if not is_complete(s)),
        total=figures(spec, rank_window(spec)),
        steps=per_step,
        comm_kernels=sum(1 for op in spec.all_ops() if op.recorded and op.kind == "comm"),
    )


def expected_run(spec: RunSpec) -> dict[int, RankExpected]:
    return {rank.rank: expected_figures(rank) for rank in spec.ranks}


@dataclass(frozen=True)
class ExpectedInstance:
    """One collective instance as the schedule ran it, on the shared (true) clock."""

    group: str  # process group name as the report shows it ("0" for the default group)
    seq: int
    coll_type: str
    step: int  # the lowest step number that launched it on a member
    arrivals: tuple[int, ...]  # member ranks in order of kernel start (ties: lower rank first)
    last_rank: int | None  # the rank that alone started last; None when the latest is shared
    delay_caused_ns: int  # latest start − second-latest start
    arrival_skew_ns: int  # latest start − earliest start
    transfer_ns: int  # earliest end − latest start
    waits_ns: dict[int, int]  # rank -> latest start − own start


def expected_instances(spec: RunSpec) -> list[ExpectedInstance]:
    """Every collective instance that all members of its group ran (send/recv left out), in
    order of first arrival. Each rank's times are taken back to the true clock by its host's
    offset, so the figures are what a perfect clock alignment gives."""
    starts: dict[tuple[str, int], dict[int, tuple[int, int, int, str]]] = {}
    for rank in spec.ranks:
        offset = spec.host_offsets_ns.get(rank.host, 0)
        for step in rank.steps:
            for op in step.ops:
                if op.kind != "comm" or op.p2p or not op.recorded:
                    continue
                key = (op.pg or "0", op.seq)
                true = (op.start_ns - offset, op.end_ns - offset, step.number)
                starts.setdefault(key, {})[rank.rank] = (*true, comm_type(op, rank.naming))
    members = {g.name: set(g.ranks) for g in spec.groups}
    everyone = {r.rank for r in spec.ranks}
    out = []
    for (group, seq), by_rank in starts.items():
        if set(by_rank) != members.get(group, everyone):
            continue  # a rank skipped it: a mismatch, not a matched instance
        order = sorted(by_rank, key=lambda r: (by_rank[r][0], r))
        first, latest = by_rank[order[0]][0], by_rank[order[-1]][0]
        second = by_rank[order[-2]][0] if len(order) > 1 else latest
        out.append(
            ExpectedInstance(
                group=group,
                seq=seq,
                coll_type=by_rank[order[0]][3],
                step=min(v[2] for v in by_rank.values()),
                arrivals=tuple(order),
                last_rank=order[-1] if second < latest else None,
                delay_caused_ns=latest - second,
                arrival_skew_ns=latest - first,
                transfer_ns=min(v[1] for v in by_rank.values()) - latest,
                waits_ns={r: latest - v[0] for r, v in by_rank.items()},
            )
        )
    return sorted(
        out, key=lambda i: (min(starts[(i.group, i.seq)][r][0] for r in i.arrivals), i.group, i.seq)
    )


@dataclass(frozen=True)
class ExpectedTokens:
    """One all-to-all instance whose ops carry split sizes: the rows each member moved."""

    group: str  # process group name as the report shows it ("0" for the default group)
    seq: int
    step: int  # the lowest step number that launched it on a member
    received: dict[int, int]  # rank -> rows received (sum of its out_splits)
    sent: dict[int, int]  # rank -> rows sent (sum of its in_splits)
    ratio: float  # max received / median received over the members (statistics.median)
    max_rank: int  # the member that received most (the lowest such rank on a tie)


def expected_tokens(spec: RunSpec) -> list[ExpectedTokens]:
    """Per all-to-all instance (group, Seq) with split sizes, in (group, Seq) order: the
    rows each rank received and sent, and how unevenly the members received them."""
    found: dict[tuple[str, int], dict[int, tuple[int, int, int]]] = {}
    for rank in spec.ranks:
        for step in rank.steps:
            for op in step.ops:
                if op.kind == "comm" and op.recorded and op.in_splits:
                    row = (sum(op.out_splits), sum(op.in_splits), step.number)
                    found.setdefault((op.pg or "0", op.seq), {})[rank.rank] = row
    out = []
    for (group, seq), by_rank in sorted(found.items()):
        received = {r: v[0] for r, v in sorted(by_rank.items())}
        middle = statistics.median(received.values())
        top = max(received.values())
        out.append(
            ExpectedTokens(
                group=group,
                seq=seq,
                step=min(v[2] for v in by_rank.values()),
                received=received,
                sent={r: v[1] for r, v in sorted(by_rank.items())},
                ratio=top / middle if middle else float("inf"),
                max_rank=min(r for r, v in received.items() if v == top),
            )
        )
    return out


def expected_alltoall_ns(spec: RunSpec) -> dict[int, int]:
    """Per rank: the summed duration of its recorded kernels the engine must type AllToAll
    (NCCL all-to-alls, annotated or with metadata, and DeepEP kernels), every op of the file."""
    return {
        rank.rank: sum(
            op.dur_ns
            for op in rank.all_ops()
            if op.kind == "comm" and op.recorded and comm_type(op, rank.naming) == "AllToAll"
        )
        for rank in spec.ranks
    }
