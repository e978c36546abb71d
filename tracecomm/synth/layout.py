"""Where the writer puts the CPU side of each launch: ids, nesting and span times.

The spec fixes only the instant of each runtime call. Around it the writer invents the CPU ops
that a real trace shows; they must nest properly, stay inside their ProfilerStep and never cross
the next launch on the same thread, whatever spacing the spec uses.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Mapping
from dataclasses import dataclass, field

from tracecomm.synth.names import (
    COLLECTIVES,
    deepep_cpu_op,
    has_metadata,
    is_deepep,
    kernel_name,
    profile_for,
)
from tracecomm.synth.schedule import Op, RankSpec
from tracecomm.synth.timefmt import Clock

_FAR = 10**12
# libkineto ids start small and grow by one per record; gaps mimic other recorded API calls.
_FIRST_CORRELATION = 1_001
_CORRELATION_STRIDE = 3


@dataclass(slots=True)
class CpuSpan:
    """One CPU-side X event that encloses a launch."""

    name: str
    cat: str
    ext: int
    metadata: bool
    start: int = 0
    end: int = 0


@dataclass(slots=True)
class Launch:
    """A launched op with everything the writer needs to render both sides of it."""

    op: Op
    ordinal: int
    name: str
    corr: int = 0
    ext: int = 0
    seq: int = 0
    rt_dur: int = 0
    spans: list[CpuSpan] = field(default_factory=list)
    device_corr: int = 0  # the correlation its device event carries, when not ``corr``
    # the External id its device event carries, when not ``ext``: older Kineto gave the kernels
    # of annotated collectives their own correlation id, which names no CPU op
    device_ext: int = 0


@dataclass(slots=True)
class Plan:
    """Ids and CPU times for one rank's file."""

    launches: list[Launch]
    unlinked: list[Launch]
    step_ext: dict[int, int]
    next_corr: int
    # the other ops of a graph replay, by the ordinal of the launch that stands for the replay
    # (its first op): one cudaGraphLaunch, several device events
    replayed: dict[int, list[Launch]] = field(default_factory=dict)


# The CPU op the generator puts around a cudaGraphLaunch (PyTorch records none of its own;
# models wrap the replay in a record_function or a compiled region).
GRAPH_REPLAY_OP = "CUDAGraph::replay"


def plan_rank(
    spec: RankSpec, clock: Clock, groups: Mapping[str, tuple[int, ...]] | None = None
) -> Plan:
    """Assign ids in CPU time order and lay out the CPU spans of every launch.

    groups (name -> global member ranks) turns the global ranks of point-to-point ops into the
    group ranks their ``nccl:send a->b`` annotations show.
    """
    ops = spec.all_ops()
    launches = [
        Launch(op, i, kernel_name(op, spec.naming, i)) for i, op in enumerate(ops) if op.launched
    ]
    launches.sort(key=lambda x: (x.op.launch_ns, x.op.launch_thread != "main"))
    launches, replayed = _graph_replays(launches)
    for i, launch in enumerate(launches):
        launch.corr = _FIRST_CORRELATION + _CORRELATION_STRIDE * i
    next_corr = _FIRST_CORRELATION + _CORRELATION_STRIDE * len(launches)
    unlinked = [
        Launch(op, i, kernel_name(op, spec.naming, i))
        for i, op in enumerate(ops)
        if not op.launched
    ]
    for launch in unlinked:
        # A correlation id that no runtime call carries: the kernel came from an untraced thread.
        launch.corr = next_corr
        next_corr += _CORRELATION_STRIDE
    for launch in launches:
        if launch.op.annotated:
            launch.device_ext = launch.corr
    step_ext = _assign_external_ids(spec, launches, groups or {})
    _assign_seq(spec, launches)
    _place(spec, launches, clock)
    for launch in launches:
        members = replayed.get(launch.ordinal, [])
        device_corr = 0
        if members and spec.graph_links == "node":
            # only the graph and node ids tell which launch replayed them
            device_corr, next_corr = next_corr, next_corr + _CORRELATION_STRIDE
        launch.device_corr = device_corr if launch.op.graph else 0
        for member in members:
            member.corr, member.ext, member.device_corr = launch.corr, launch.ext, device_corr
    return Plan(launches, unlinked, step_ext, next_corr, replayed)


def _graph_replays(launches: list[Launch]) -> tuple[list[Launch], dict[int, list[Launch]]]:
    """The launches with one per graph replay (its first op stands for it), and the other ops
    of each replay by that launch's ordinal."""
    kept: list[Launch] = []
    first: dict[tuple[int, int, str], Launch] = {}
    replayed: dict[int, list[Launch]] = {}
    for launch in launches:
        op = launch.op
        if op.graph:
            key = (op.graph, op.launch_ns, op.launch_thread)
            if key in first:
                replayed.setdefault(first[key].ordinal, []).append(launch)
                continue
            first[key] = launch
            replayed[launch.ordinal] = []
        kept.append(launch)
    return kept, replayed


def _levels(
    launch: Launch, rank: int, groups: Mapping[str, tuple[int, ...]]
) -> list[tuple[str, str, bool]]:
    """(name, cat, carries collective args) of the CPU ops around a launch, outermost first."""
    inner = _inner_levels(launch, rank, groups)
    if launch.op.outer:
        return [(launch.op.outer, "user_annotation", False), *inner]
    return inner


def _inner_levels(
    launch: Launch, rank: int, groups: Mapping[str, tuple[int, ...]]
) -> list[tuple[str, str, bool]]:
    op = launch.op
    if op.graph:
        return [(GRAPH_REPLAY_OP, "cpu_op", False)]
    if op.p2p and has_metadata(op):
        # ProcessGroupNCCL names the work with ranks inside the group, like c10d's API.
        members = groups.get(op.pg, ())
        me, peer = (
            (members.index(rank), members.index(op.peer))
            if rank in members and op.peer in members
            else (rank, op.peer)
        )
        arrow = f"send {me}->{peer}" if op.p2p == "send" else f"recv {me}<-{peer}"
        return [
            ("c10d::send" if op.p2p == "send" else "c10d::recv_", "cpu_op", False),
            ("record_param_comms", "cpu_op", True),
            (f"nccl:{arrow}", "user_annotation", False),
        ]
    if op.kind == "memcpy":
        return [("aten::copy_", "cpu_op", False)]
    if op.kind == "memset":
        return [("aten::zero_", "cpu_op", False)]
    if op.kind == "compute":
        return [(profile_for(launch.name).cpu_op, "cpu_op", False)]
    if is_deepep(launch.name):
        # DeepEP launches from its own C++ op: no c10d op, record_param_comms nor annotation.
        return [(deepep_cpu_op(launch.name), "cpu_op", False)]
    info = COLLECTIVES[op.coll or "Other"]
    if has_metadata(op) or op.annotated:
        # annotated: as older Kineto wrote it, the same spans, no collective args
        return [
            (info.c10d_op, "cpu_op", False),
            ("record_param_comms", "cpu_op", has_metadata(op)),
            (info.annotation, "user_annotation", False),
        ]
    # Coalesced paths launch from an op that carries no collective args (pytorch #131462).
    return [("record_param_comms", "cpu_op", False), ("nccl:coalesced", "user_annotation", False)]


def _assign_external_ids(
    spec: RankSpec, launches: list[Launch], groups: Mapping[str, tuple[int, ...]]
) -> dict[int, int]:
    items: list[tuple[int, int, int, Launch | None]] = [
        (s.cpu_start_ns, 0, s.number, None) for s in spec.steps
    ]
    items.extend((x.op.launch_ns, 1, i, x) for i, x in enumerate(launches))
    items.sort(key=lambda item: item[:3])
    step_ext: dict[int, int] = {}
    # ids that name a kernel already (an annotated collective's correlation): no CPU op takes one
    taken = {x.device_ext for x in launches if x.device_ext}
    ext = 1
    for _, _, number, launch in items:
        levels = [] if launch is None else _levels(launch, spec.rank, groups)
        while taken and any(ext + j in taken for j in range(max(1, len(levels)))):
            ext += 1
        if launch is None:
            step_ext[number] = ext
            ext += 1
            continue
        launch.spans = [
            CpuSpan(name, cat, ext + j, meta) for j, (name, cat, meta) in enumerate(levels)
        ]
        # The kernel links to the innermost cpu_op: record_param_comms for collectives.
        launch.ext = next(s.ext for s in reversed(launch.spans) if s.cat == "cpu_op")
        ext += len(launch.spans)
    return step_ext


def _assign_seq(spec: RankSpec, launches: list[Launch]) -> None:
    comms = [x for x in launches if x.op.kind == "comm"]
    first_step = spec.steps[0] if spec.steps else None
    per_step = (
        sum(1 for op in first_step.ops if op.kind == "comm" and op.launched) if first_step else 0
    )
    # A counter that already ran before the window opened, identical on every rank of the run.
    base = (first_step.number * per_step if first_step else 0) + 1
    for i, launch in enumerate(comms):
        # An explicit Seq wins: per-group counters, or a rank that skipped a collective.
        launch.seq = launch.op.seq or base + i


def _place(spec: RankSpec, launches: list[Launch], clock: Clock) -> None:
    bounds = {t for s in spec.steps for t in (s.cpu_start_ns, s.cpu_end_ns)}
    for thread in ("main", "autograd"):
        mine = [x for x in launches if x.op.launch_thread == thread]
        walls = sorted(bounds | {x.op.launch_ns for x in mine})
        for launch in mine:
            t = launch.op.launch_ns
            after = bisect_right(walls, t)
            next_gap = walls[after] - t if after < len(walls) else _FAR
            before = bisect_left(walls, t)
            prev_gap = 0 if t in bounds else (t - walls[before - 1] if before else _FAR)
            _place_one(launch, prev_gap, next_gap, clock)


def _place_one(launch: Launch, prev_gap: int, next_gap: int, clock: Clock) -> None:
    # Each launch owns at most a third of the gap on either side, so neighbours never touch
    # and the spans stay inside the step even when the spec packs launches 1 ns apart.
    is_comm = launch.op.kind == "comm"
    c = launch.corr
    rt_cap = 3_000 + (c * 7_919) % 5_000
    pre_cap = (18_000 if is_comm else 2_500) + (c * 131) % 4_000
    post_cap = (9_000 if is_comm else 1_200) + (c * 37) % 1_500
    rt = max(clock.unit, clock.floor(min(rt_cap, next_gap // 3)))
    pre = clock.floor(min(pre_cap, prev_gap // 3))
    post = clock.floor(min(post_cap, (next_gap - rt) // 3))
    t = launch.op.launch_ns
    launch.rt_dur = rt
    n = len(launch.spans)
    for depth, span in enumerate(launch.spans):
        span.start = t - pre + clock.floor(pre * depth // n)
        span.end = t + rt + post - clock.floor(post * depth // n)
