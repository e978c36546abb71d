"""Frozen description of what each rank's GPU did: the single source of truth.

Both the writer (which turns a spec into Kineto JSON) and the expected figures (which the
engine is tested against) read these objects and nothing else, so the two cannot disagree
about what happened.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import pairwise

from tracecomm.synth.names import (
    has_metadata,
    is_comm_name,
    is_deepep,
    kernel_name,
    names_collective,
    type_from_name,
)
from tracecomm.synth.ops import (
    COLL_TYPES,
    GRAPH_LINKS,
    LAUNCH_THREADS,
    NAMINGS,
    OP_KINDS,
    TIME_FORMATS,
    CollType,
    LaunchThread,
    Naming,
    Op,
    OpKind,
    TimeFormat,
)

# the op and its kinds live in synth.ops; the schedule is where its users import them from
__all__ = [
    "COLL_TYPES",
    "GRAPH_LINKS",
    "LAUNCH_THREADS",
    "NAMINGS",
    "OP_KINDS",
    "TIME_FORMATS",
    "CollType",
    "CpuCall",
    "LaunchThread",
    "Naming",
    "Op",
    "OpKind",
    "ProcessGroup",
    "RankSpec",
    "RunSpec",
    "Step",
    "TimeFormat",
]


@dataclass(frozen=True, slots=True)
class Step:
    """A ProfilerStep#number annotation and the ops launched inside it."""

    number: int
    cpu_start_ns: int
    cpu_end_ns: int
    ops: tuple[Op, ...]

    def __post_init__(self) -> None:
        _check(
            self.cpu_end_ns > self.cpu_start_ns,
            f"step {self.number}: cpu_end_ns must be > cpu_start_ns",
        )
        for op in self.ops:
            if op.launched and not self.cpu_start_ns <= op.launch_ns < self.cpu_end_ns:
                raise ValueError(
                    f"step {self.number}: op launched at {op.launch_ns} ns lies outside the step "
                    f"span [{self.cpu_start_ns}, {self.cpu_end_ns})"
                )


@dataclass(frozen=True, slots=True)
class CpuCall:
    """A CPU-side event that launches nothing: a synchronize call (``cuda_runtime``) or an
    annotation such as the data loader's (``user_annotation``)."""

    cat: str
    name: str
    thread: str
    start_ns: int
    end_ns: int


@dataclass(frozen=True, slots=True)
class RankSpec:
    """Everything one rank's trace file shows."""

    rank: int
    steps: tuple[Step, ...]
    extra_ops: tuple[Op, ...] = ()
    host: str = "node0"
    naming: Naming = "dev"
    time_format: TimeFormat = "relative"
    cpu_calls: tuple[CpuCall, ...] = ()
    # How replayed kernels name their cudaGraphLaunch: "correlation" (its correlation id, as
    # CUPTI records them) or "node" (only their graph and node ids; a correlation no runtime
    # call carries)
    graph_links: str = "correlation"

    def __post_init__(self) -> None:
        _check(self.rank >= 0, f"rank must be >= 0, got {self.rank}")
        _check(self.naming in NAMINGS, f"unknown naming {self.naming!r}")
        _check(self.time_format in TIME_FORMATS, f"unknown time_format {self.time_format!r}")
        _check(self.graph_links in GRAPH_LINKS, f"unknown graph_links {self.graph_links!r}")
        _check_steps_disjoint(self)
        _check_extras_outside_steps(self)
        _check_thread_order(self)
        if self.time_format == "epoch_us":
            _check_whole_us(self)
        _check_comm_names(self)

    def all_ops(self) -> list[Op]:
        """Every op of the file: the steps' ops in step order, then the extra ops."""
        ops = [op for step in self.steps for op in step.ops]
        ops.extend(self.extra_ops)
        return ops


@dataclass(frozen=True, slots=True)
class ProcessGroup:
    """A non-default process group: its GUID string, label and global member ranks."""

    name: str
    desc: str
    ranks: tuple[int, ...]

    def __post_init__(self) -> None:
        _check(bool(self.name) and self.name != "0", f"group name {self.name!r} is reserved")
        _check(bool(self.ranks), f"group {self.name}: no ranks")
        _check(len(set(self.ranks)) == len(self.ranks), f"group {self.name}: duplicate ranks")


@dataclass(frozen=True, slots=True)
class RunSpec:
    """One trace file per rank of a distributed run.

    groups, host_offsets_ns and skipped are ground truth for tests: groups also reach the
    files (pg_config, collective args), the other two are written nowhere.
    """

    world_size: int
    ranks: tuple[RankSpec, ...]
    gzip: bool = True
    device_name: str = "NVIDIA H100 80GB HBM3"
    groups: tuple[ProcessGroup, ...] = ()
    # Host name -> how far that host's clock runs ahead of the shared simulated time, in ns.
    host_offsets_ns: dict[str, int] = field(default_factory=dict, hash=False)
    # (rank, process group name, Seq) of each collective a rank did not launch.
    skipped: tuple[tuple[int, str, int], ...] = ()

    def __post_init__(self) -> None:
        _check(self.world_size >= 1, f"world_size must be >= 1, got {self.world_size}")
        seen = [r.rank for r in self.ranks]
        _check(len(set(seen)) == len(seen), f"duplicate ranks in {seen}")
        _check(
            all(r < self.world_size for r in seen),
            f"ranks {seen} not all < world_size {self.world_size}",
        )
        _check_groups(self)

    def group(self, name: str) -> ProcessGroup | None:
        """The group called name; None for the default group ("" or "0")."""
        return next((g for g in self.groups if g.name == name), None)

    def groups_of(self, rank: int) -> tuple[ProcessGroup, ...]:
        """The non-default groups rank belongs to, in spec order."""
        return tuple(g for g in self.groups if rank in g.ranks)


def _check_groups(spec: RunSpec) -> None:
    names = [g.name for g in spec.groups]
    _check(len(set(names)) == len(names), f"duplicate group names in {names}")
    for g in spec.groups:
        _check(
            all(0 <= r < spec.world_size for r in g.ranks),
            f"group {g.name}: ranks {list(g.ranks)} not all in [0, {spec.world_size})",
        )
    members = {g.name: set(g.ranks) for g in spec.groups}
    _check_splits(spec)
    for rank in spec.ranks:
        for name in {op.pg for op in rank.all_ops() if op.pg}:
            _check(
                rank.rank in members.get(name, ()),
                f"rank {rank.rank}: collective in group {name!r}, which is unknown or "
                "does not contain the rank",
            )


def _check_splits(spec: RunSpec) -> None:
    sizes = {g.name: len(g.ranks) for g in spec.groups}
    for rank in spec.ranks:
        for op in rank.all_ops():
            if op.in_splits:
                n = sizes.get(op.pg, spec.world_size) if op.pg else spec.world_size
                _check(
                    len(op.in_splits) == n,
                    f"rank {rank.rank}: {len(op.in_splits)} split sizes for a group of {n}",
                )


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise ValueError(message)


def _check_steps_disjoint(spec: RankSpec) -> None:
    numbers = [s.number for s in spec.steps]
    _check(len(set(numbers)) == len(numbers), f"rank {spec.rank}: duplicate step numbers {numbers}")
    spans = sorted((s.cpu_start_ns, s.cpu_end_ns, s.number) for s in spec.steps)
    for (_, end, a), (start, _, b) in pairwise(spans):
        _check(start >= end, f"rank {spec.rank}: steps {a} and {b} overlap on the CPU")


def _check_extras_outside_steps(spec: RankSpec) -> None:
    for op in spec.extra_ops:
        if not op.launched:
            continue
        for step in spec.steps:
            _check(
                not step.cpu_start_ns <= op.launch_ns < step.cpu_end_ns,
                f"rank {spec.rank}: extra op launched at {op.launch_ns} ns lies inside step "
                f"{step.number}; "
                "put it in that step's ops",
            )


def _check_thread_order(spec: RankSpec) -> None:
    # One CPU thread cannot issue two runtime calls at the same instant, and the writer needs a
    # strict order to nest each call inside its own CPU op.
    for thread in LAUNCH_THREADS:
        mine = [op for op in spec.all_ops() if op.launched and op.launch_thread == thread]
        # the ops of one graph replay share its single cudaGraphLaunch
        replays = {(op.graph, op.launch_ns) for op in mine if op.graph}
        launches = sorted([op.launch_ns for op in mine if not op.graph] + [t for _, t in replays])
        for a, b in pairwise(launches):
            if b == a:
                raise ValueError(f"rank {spec.rank}: two launches at {a} ns on the {thread} thread")


def _check_whole_us(spec: RankSpec) -> None:
    # Integer-µs files cannot express sub-µs times, so the spec must not contain any.
    for step in spec.steps:
        for t in (step.cpu_start_ns, step.cpu_end_ns):
            _check(
                t % 1000 == 0,
                f"rank {spec.rank}: step {step.number} time {t} ns is not whole µs (epoch_us)",
            )
    for op in spec.all_ops():
        times = (op.start_ns, op.dur_ns, op.launch_ns) if op.launched else (op.start_ns, op.dur_ns)
        for t in times:
            if t % 1000:
                raise ValueError(f"rank {spec.rank}: op time {t} ns is not whole µs (epoch_us)")


def _check_comm_names(spec: RankSpec) -> None:
    # The engine classifies by kernel name, so a spec whose names would be classified otherwise
    # than its kinds say would make the expected figures unreachable.
    # Many ops share a name: check each (kind, name, type, context) once.
    seen: set[tuple[str, str, str | None, bool, bool, bool]] = set()
    for op in spec.all_ops():
        name = kernel_name(op, spec.naming)
        key = (op.kind, name, op.coll, op.metadata, op.launched, op.annotated)
        if key in seen:
            continue
        seen.add(key)
        if op.kind != "comm":
            _check(not _is_nccl(name), f"{op.kind} op {name!r} looks like an NCCL kernel")
            continue
        _check(_is_nccl(name), f"comm kernel {name!r} has no nccl/rccl/DeepEP in its name")
        _check(
            not (is_deepep(name) and (op.metadata or op.annotated)),
            f"DeepEP kernel {name!r} launches from its own op: metadata=False, annotated=False",
        )
        implied = type_from_name(name)
        # An annotated launch names its collective, but only SendRecv and Generic kernels run
        # other collectives than their name says.
        named = has_metadata(op) or (names_collective(op) and implied in (None, "SendRecv"))
        _check(
            named or implied is None or implied == op.coll,
            f"comm op {name!r} without metadata: the name implies {implied}, coll says {op.coll}; "
            "set metadata=True or give a matching name",
        )


def _is_nccl(name: str) -> bool:
    """A communication library's kernel: NCCL, RCCL or DeepEP (the generator's short list)."""
    return is_comm_name(name)
