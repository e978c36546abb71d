"""A realistic FSDP training schedule, simulated for all ranks in lockstep.

Every rank runs the same program (launch sequence). The simulation is discrete: each launch
starts when the CPU has issued it, its stream is free and its dependencies have finished; a
collective ends a transfer time after the last rank arrived, so fast ranks wait inside their
NCCL kernels as they do on real hardware.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field

from tracecomm.synth import names as kn
from tracecomm.synth.schedule import (
    CollType,
    CpuCall,
    Naming,
    Op,
    OpKind,
    RankSpec,
    RunSpec,
    Step,
    TimeFormat,
)
from tracecomm.synth.writer import render_rank

COMPUTE_STREAM = 7
COMM_STREAM = 20
SIDE_STREAM = 24
FIRST_STEP = 12
# Mid-November 2024, well inside one libkineto base period; sub-µs part on purpose.
_T0_NS = 1_731_650_000_123_456_789
# Default relative spread of simulated durations.
JITTER = 0.03
_HOST_SKEW_NS = 41_000_347

_FORWARD_LAYER: tuple[tuple[str, float], ...] = (
    (kn.LAYER_NORM, 18.3),
    (kn.GEMM_SM90, 121.7),
    (kn.FLASH_FWD, 148.9),
    (kn.GEMM_CUTLASS, 61.2),
    (kn.ADD, 12.4),
    (kn.LAYER_NORM, 18.1),
    (kn.GEMM_SM90, 221.5),
    (kn.GELU, 24.6),
    (kn.GEMM_SM90, 219.8),
    (kn.ADD, 12.2),
)
_BACKWARD_LAYER: tuple[tuple[str, float], ...] = (
    (kn.ADD, 12.1),
    (kn.GEMM_SM90, 230.4),
    (kn.GEMM_SM90, 225.3),
    (kn.GELU, 30.2),
    (kn.GEMM_SM90, 232.7),
    (kn.GEMM_SM90, 228.1),
    (kn.LAYER_NORM_BWD, 34.6),
    (kn.GEMM_CUTLASS, 64.3),
    (kn.GEMM_CUTLASS, 62.9),
    (kn.FLASH_BWD, 372.5),
    (kn.GEMM_SM90, 125.2),
    (kn.GEMM_SM90, 122.8),
    (kn.LAYER_NORM_BWD, 33.4),
)
# µs; the forward AllGather of the middle layer outlasts the compute it should hide behind.
_AG_FWD_US, _AG_FWD_SLOW_US, _AG_BWD_US, _RS_US, _AR_US = 420.3, 1_210.7, 650.9, 1_150.3, 38.7
_SHARD_NELEMS = 6_291_456
DATALOADER = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
SYNC_CALL = "cudaStreamSynchronize"
_SYNC_RETURN_US = 2.1  # a synchronize returns a little after the GPU drains


@dataclass(frozen=True, slots=True)
class _Launch:
    key: int
    kind: OpKind
    stream: int
    dur_us: float
    name: str = ""
    coll: CollType | None = None
    nelems: int = 0
    thread: str = "main"
    deps: tuple[int, ...] = ()
    cost_us: float = 9.0
    recorded: bool = True
    group: str = ""  # which kind of process group a collective runs in ("" = world)


@dataclass(frozen=True, slots=True)
class _Topology:
    """Process groups of a run and the collective one rank leaves out.

    groups maps a group kind (a collective's _Launch.group) to that kind's groups, each as
    (name, member ranks); name "" is the default world group. seq_base is where each group's
    Seq counter stands when the first step opens.
    """

    groups: dict[str, tuple[tuple[str, tuple[int, ...]], ...]]
    seq_base: dict[str, int]
    skip: tuple[int, int] | None = None


@dataclass(frozen=True, slots=True)
class _Cpu:
    dur_us: float
    label: str = ""  # recorded as a user annotation of that name (idle_detail runs)


@dataclass(frozen=True, slots=True)
class _Sync:
    gap_us: float
    stream: int | None = None  # a stream synchronize (pp.py); None: every stream


@dataclass(frozen=True, slots=True)
class _StepMark:
    number: int | None  # None closes the last step


_Instr = _Launch | _Cpu | _Sync | _StepMark


@dataclass
class _Builder:
    """Appends the program's instructions; keys are unique across the whole program."""

    layers: int
    scale: int
    world: int
    program: list[_Instr] = field(default_factory=list)
    next_key: int = 0
    comm_factor: Mapping[str, float] = field(default_factory=dict)  # per collective type
    dataloader_us: float = 183.4
    step_end_sync: bool = True
    optimizer_launch_us: float = 9.0  # CPU cost of each Adam launch: above 33.1 the GPU starves
    # one more compute kernel in every step: (name, µs, "start" / "middle" / "end")
    extra_kernel: tuple[str, float, str] | None = None

    def add(self, launch: _Launch) -> int:
        self.program.append(launch)
        self.next_key += 1
        return launch.key

    def kernel(
        self,
        name: str,
        dur_us: float,
        thread: str = "main",
        deps: tuple[int, ...] = (),
        recorded: bool = True,
    ) -> int:
        return self.add(
            _Launch(
                self.next_key,
                "compute",
                COMPUTE_STREAM,
                dur_us,
                name,
                thread=thread,
                deps=deps,
                recorded=recorded,
            )
        )

    def kernels(
        self, pattern: tuple[tuple[str, float], ...], thread: str, deps: tuple[int, ...]
    ) -> int:
        last = -1
        for rep in range(self.scale):
            for i, (name, dur) in enumerate(pattern):
                last = self.kernel(name, dur, thread, deps if rep == 0 and i == 0 else ())
        return last

    def comm(
        self,
        coll: CollType,
        dur_us: float,
        nelems: int,
        thread: str = "main",
        deps: tuple[int, ...] = (),
    ) -> int:
        dur_us *= self.comm_factor.get(coll, 1.0)
        launch = _Launch(
            self.next_key, "comm", COMM_STREAM, dur_us, "", coll, nelems, thread, deps, cost_us=31.0
        )
        return self.add(launch)

    def step(self, number: int, partial: bool) -> None:
        self.program += [_StepMark(number), _Cpu(self.dataloader_us, DATALOADER)]
        self.add(_Launch(self.next_key, "memcpy", COMPUTE_STREAM, 47.6, cost_us=14.2))
        self.program.append(_Cpu(71.9))
        self.extra("start")
        self.forward()
        self.extra("middle")
        last_rs = self.backward()
        self.extra("end")
        self.optimizer(last_rs, partial)

    def extra(self, where: str) -> None:
        if self.extra_kernel is not None and self.extra_kernel[2] == where:
            self.kernel(self.extra_kernel[0], self.extra_kernel[1])

    def forward(self) -> None:
        slow = self.layers // 2
        size = self.scale * _SHARD_NELEMS

        def gather(i: int) -> int:
            return self.comm(
                "AllGather", self.scale * (_AG_FWD_SLOW_US if i == slow else _AG_FWD_US), size
            )

        # FSDP prefetch: layer i+1's gather is queued before layer i's compute.
        gathers = [gather(0)]
        for i in range(self.layers):
            if i + 1 < self.layers:
                gathers.append(gather(i + 1))
            self.kernels(_FORWARD_LAYER, "main", (gathers[i],))
        loss = self.kernel(kn.GEMM_CUTLASS, 84.6)
        self.kernel(kn.ADD, 11.8, deps=(loss,))
        self.program.append(_Sync(93.1))  # loss.item() for logging

    def backward(self) -> int:
        size = self.scale * _SHARD_NELEMS
        top = self.layers - 1
        gathers = {top: self.comm("AllGather", self.scale * _AG_BWD_US, size, "autograd")}
        reduce_scatter = -1
        for i in range(top, -1, -1):
            if i > 0:
                gathers[i - 1] = self.comm("AllGather", self.scale * _AG_BWD_US, size, "autograd")
            last = self.kernels(_BACKWARD_LAYER, "autograd", (gathers[i],))
            reduce_scatter = self.comm(
                "ReduceScatter", self.scale * _RS_US, size * self.world, "autograd", (last,)
            )
        return reduce_scatter

    def optimizer(self, last_rs: int, partial: bool) -> None:
        norm = self.kernel(kn.NORM, 14.7, deps=(last_rs,))
        self.comm("AllReduce", _AR_US, 1, deps=(norm,))
        self.program.append(_Sync(61.3))  # clip_grad_norm_ reads the total norm
        count = self.layers * self.scale
        for i in range(count):
            self.add(
                _Launch(
                    self.next_key,
                    "compute",
                    COMPUTE_STREAM,
                    33.1,
                    kn.ADAM,
                    cost_us=self.optimizer_launch_us,
                    recorded=not (partial and i == count - 1),
                )
            )
        if partial:
            # The window closed while the step ran: its tail never reached the trace.
            self.program.append(_Cpu(43.0))
            return
        self.add(_Launch(self.next_key, "memset", COMPUTE_STREAM, 8.9, cost_us=6.1))
        if self.step_end_sync:
            self.program.append(_Sync(118.6))  # end-of-step logging


class _RankSim:
    """One rank's CPU cursor, stream queues and finished ops while the program runs."""

    def __init__(
        self,
        rank: int,
        seed: int,
        factor: float,
        epoch_us: bool,
        offset_ns: int | None = None,
        jitter: float = JITTER,
    ) -> None:
        self.rank = rank
        self.rng = random.Random(seed * 1000 + rank)
        self.jitter = jitter / JITTER  # scales every spread; 0 = every duration as scheduled
        self.epoch_us = epoch_us
        self.factor = factor
        # Ranks on other hosts read a skewed clock; simulated time itself is shared.
        self.offset = self.floor((rank // 8) * _HOST_SKEW_NS if offset_ns is None else offset_ns)
        self.comms = 0  # collectives reached so far, launched or skipped
        self.seqs: dict[str, int] = {}
        self.skipped: list[tuple[int, str, int]] = []
        self.cpu = self.floor(_T0_NS) + self.ns(180.0)
        self.free: dict[int, int] = {}
        self.ends: dict[int, int] = {}
        self.steps: list[Step] = []
        self.ops: list[Op] = []
        self.open: tuple[int, int] | None = None
        self.calls: list[CpuCall] | None = None  # a list: synchronize calls and annotations
        self.slow_steps: frozenset[int] | None = None  # steps its factor holds in (None: all)

    @property
    def compute_factor(self) -> float:
        """How much slower than scheduled its compute runs in the step now open."""
        if self.slow_steps is None or (self.open is not None and self.open[0] in self.slow_steps):
            return self.factor
        return 1.0

    def floor(self, t: int) -> int:
        return t - t % 1000 if self.epoch_us else t

    def ns(self, us: float, spread: float = 0.03) -> int:
        """A jittered duration, whole µs for epoch_us files, never a whole µs otherwise."""
        spread *= self.jitter
        # always draw, so that runs of one seed stay comparable whatever the jitter
        value = us * 1000 * self.rng.uniform(1 - spread, 1 + spread)
        if self.epoch_us:
            return max(1000, round(value / 1000) * 1000)
        n = max(1, int(value))
        return n + 7 if n % 1000 == 0 else n

    def ready(self, launch: _Launch) -> tuple[int, int]:
        """(launch time, earliest device start) of the next launch; advances the CPU."""
        at = self.cpu
        start = max(
            [at + self.ns(3.1), self.free.get(launch.stream, 0)]
            + [self.ends[d] for d in launch.deps]
        )
        self.cpu += self.ns(launch.cost_us)
        return at, start

    def finish(
        self, launch: _Launch, at: int, start: int, end: int, pg: str = "", seq: int = 0
    ) -> None:
        self.free[launch.stream] = self.ends[launch.key] = end
        o = self.offset
        self.ops.append(
            Op(
                launch.kind,
                launch.stream,
                start + o,
                end - start,
                at + o,
                launch.name,
                launch.coll,
                recorded=launch.recorded,
                nelems=launch.nelems,
                launch_thread=launch.thread,
                pg=pg,
                seq=seq,
            )
        )

    def reach_collective(self, pg: str, topo: _Topology) -> tuple[int, bool]:
        """(Seq, skipped) of the next collective in group pg; counts it either way."""
        seq = self.seqs.get(pg, topo.seq_base[pg])
        self.seqs[pg] = seq + 1
        skipped = topo.skip == (self.rank, self.comms)
        self.comms += 1
        if skipped:
            self.skipped.append((self.rank, pg or "0", seq))
        return seq, skipped

    def skip(self, launch: _Launch) -> None:
        """The rank never launches this collective: nothing waits for it, the CPU moves on."""
        self.ends[launch.key] = self.cpu

    def mark(self, number: int | None) -> None:
        if self.open is not None:
            self.steps.append(
                Step(
                    self.open[0],
                    self.open[1] + self.offset,
                    self.cpu + self.offset,
                    tuple(self.ops),
                )
            )
            self.ops = []
        self.open = None if number is None else (number, self.cpu)

    def sync(self, gap_us: float) -> None:
        drained = max([self.cpu, *self.free.values()])
        if self.calls is not None:
            returned = drained + self.ns(_SYNC_RETURN_US)
            self.record("cuda_runtime", SYNC_CALL, self.cpu, returned)
            drained = returned
        self.cpu = drained + self.ns(gap_us)

    def work(self, cpu: _Cpu) -> None:
        start = self.cpu
        self.cpu += self.ns(cpu.dur_us)
        if cpu.label and self.calls is not None:
            self.record("user_annotation", cpu.label, start, self.cpu)

    def record(self, cat: str, name: str, start: int, end: int) -> None:
        assert self.calls is not None
        o = self.offset
        self.calls.append(CpuCall(cat, name, "main", start + o, end + o))


def _run_program(program: list[_Instr], sims: list[_RankSim], topo: _Topology) -> None:
    """Run the program on every rank; sims[r] must be rank r."""
    for instr in program:
        if isinstance(instr, _Launch):
            _run_launch(instr, sims, topo)
        elif isinstance(instr, _Cpu):
            for sim in sims:
                sim.work(instr)
        elif isinstance(instr, _Sync):
            for sim in sims:
                sim.sync(instr.gap_us)
        else:
            for sim in sims:
                sim.mark(instr.number)


def _run_launch(launch: _Launch, sims: list[_RankSim], topo: _Topology) -> None:
    if launch.kind == "comm":
        for pg, members in topo.groups[launch.group]:
            _run_collective(launch, [sims[r] for r in members], pg, topo)
        return
    timing = [sim.ready(launch) for sim in sims]
    for sim, (at, start) in zip(sims, timing, strict=True):
        scale = sim.compute_factor if launch.kind == "compute" else 1.0
        sim.finish(launch, at, start, start + sim.ns(launch.dur_us * scale))


def _run_collective(launch: _Launch, members: list[_RankSim], pg: str, topo: _Topology) -> None:
    arrived: list[tuple[_RankSim, int, int, int]] = []
    for sim in members:
        seq, skipped = sim.reach_collective(pg, topo)
        if skipped:
            sim.skip(launch)
        else:
            arrived.append((sim, *sim.ready(launch), seq))
    if not arrived:
        return
    # Nobody finishes before the last rank that takes part has arrived.
    last = max(start for _, _, start, _ in arrived)
    for sim, at, start, seq in arrived:
        sim.finish(launch, at, start, last + sim.ns(launch.dur_us, spread=0.002), pg, seq)


def _seq_base(program: list[_Instr]) -> dict[str, int]:
    """Per group kind: Seq of the first collective in the first step, as if every earlier
    step (numbered from 0) had run the same collectives."""
    marks = [i for i, x in enumerate(program) if isinstance(x, _StepMark)]
    first = program[marks[0]]
    assert isinstance(first, _StepMark) and first.number is not None
    counts: dict[str, int] = {}
    for instr in program[marks[0] : marks[1]]:
        if isinstance(instr, _Launch) and instr.kind == "comm":
            counts[instr.group] = counts.get(instr.group, 0) + 1
    return {kind: first.number * n + 1 for kind, n in counts.items()}


def _offsets(world_size: int, host_offsets_ns: Sequence[int] | None) -> list[int | None]:
    """Per rank: its host's clock offset, None for the default skew."""
    hosts = (world_size + 7) // 8
    if host_offsets_ns is None:
        return [None] * world_size
    if len(host_offsets_ns) < hosts:
        raise ValueError(f"host_offsets_ns has {len(host_offsets_ns)} entries for {hosts} hosts")
    return [int(host_offsets_ns[r // 8]) for r in range(world_size)]


def _host_truth(sims: list[_RankSim]) -> dict[str, int]:
    return {f"node{sim.rank // 8}": sim.offset for sim in sims}


def _extras(sim: _RankSim) -> tuple[Op, ...]:
    """Device events outside every step: an early copy and two unlinked side-stream kernels."""
    steps = sim.steps
    launch = steps[0].cpu_start_ns - sim.ns(310.0)
    start = launch + sim.ns(12.3)
    early = Op(
        "memcpy", COMPUTE_STREAM, start, sim.ns(25.7), launch, "Memcpy DtoH (Device -> Pinned)"
    )
    extras = [early]
    gap = _largest_gap(steps[1 % len(steps)])
    if gap is not None:
        length = gap[1] - gap[0]
        at = sim.floor(gap[0] + 3 * length // 10)
        dur = sim.floor(length // 5)
        if dur > 0:
            extras.append(Op("compute", SIDE_STREAM, at, dur, at, kn.ADD, launched=False))
    longest = max(
        (op for op in steps[2 % len(steps)].ops if op.kind == "compute"),
        key=lambda op: op.dur_ns,
        default=None,
    )
    if longest is not None and sim.floor(longest.dur_ns // 4) > 0:
        at = sim.floor(longest.start_ns + longest.dur_ns // 4)
        extras.append(
            Op(
                "compute",
                SIDE_STREAM,
                at,
                sim.floor(longest.dur_ns // 4),
                at,
                kn.ADD,
                launched=False,
            )
        )
    return tuple(extras)


def _largest_gap(step: Step) -> tuple[int, int] | None:
    spans = sorted((op.start_ns, op.end_ns) for op in step.ops if op.recorded)
    best: tuple[int, int] | None = None
    cursor = spans[0][1] if spans else 0
    for start, end in spans[1:]:
        if start > cursor and (best is None or start - cursor > best[1] - best[0]):
            best = (cursor, start)
        cursor = max(cursor, end)
    return best


EXTRA_PLACES = ("start", "middle", "end")


def fsdp_run(
    world_size: int = 8,
    steps: int = 4,
    layers: int = 6,
    seed: int = 0,
    naming: Naming = "dev",
    time_format: TimeFormat = "relative",
    gzip: bool = True,
    partial_last_step: bool = True,
    scale: int = 1,
    slow_rank: int | None = None,
    slowdown: float = 0.06,
    host_offsets_ns: Sequence[int] | None = None,
    skip: tuple[int, int] | None = None,
    jitter: float = JITTER,
    comm_slowdown: Mapping[str, float] | None = None,
    idle_detail: bool = False,
    dataloader_us: float = 183.4,
    step_end_sync: bool = True,
    optimizer_launch_us: float = 9.0,
    slow_ranks: Mapping[int, float] | None = None,
    slow_steps: Collection[int] | None = None,
    extra_kernel: tuple[str, float, str] | None = None,
) -> RunSpec:
    """An FSDP-style run: steps complete steps (plus one incomplete one) on every rank.

    One rank, ``slow_rank`` (default ``(seed + 3) % world_size``), runs its compute kernels
    ``slowdown`` slower (0.06 = 6 %; 0 = no straggler).

    ``host_offsets_ns[h]`` is how far the clock of host ``node{h}`` (ranks 8h..8h+7) runs ahead
    of the shared simulated time; None keeps the default skew of about 41 ms per host index.
    The offsets actually applied are in ``RunSpec.host_offsets_ns``.

    ``skip=(rank, k)``: that rank never launches its k-th collective (0-based, launch order,
    counted over the whole run); the others complete it without waiting for that rank. The
    skipped rank's Seq counter still advances, so only that Seq is missing from its file. The
    skipped instance is in ``RunSpec.skipped`` as (rank, "0", Seq).

    ``jitter``: the relative spread of compute and CPU durations (collectives get 1/15 of it);
    0 gives a jitter-free schedule, every duration exactly as scheduled on every rank.

    ``slow_ranks`` (rank -> slowdown) replaces ``slow_rank`` and ``slowdown``; ``slow_steps``
    limits the slowness to those steps (an intermittent straggler).

    ``comm_slowdown={"ReduceScatter": 0.1}``: that collective type's kernels run 10 % longer on
    every rank (a regression for the CI gate to catch).

    Idle-time causes (metrics.md §10): ``idle_detail`` records the synchronize calls
    (``cudaStreamSynchronize``, returning 2.1 µs after the GPU drains) and the data loader's
    annotation in the files; ``dataloader_us`` is the data loading at each step start (longer
    than the GPU's queued work with ``step_end_sync=False``: the GPU waits for the data
    loader); ``optimizer_launch_us`` above the Adam kernels' 33.1 µs makes the GPU wait for the
    CPU's launches (host-bound gaps).

    ``extra_kernel=(name, us, where)``: one more compute kernel in every step, at its
    ``start`` (before the forward pass), in the ``middle`` (between forward and backward) or
    at its ``end`` (before the optimizer): a kernel a change added, for compare's diff by
    kernel (its truth: the same run without it).
    """
    if world_size < 1 or steps < 1 or layers < 1 or scale < 1:
        raise ValueError("world_size, steps, layers and scale must all be >= 1")
    if extra_kernel is not None and (
        extra_kernel[2] not in EXTRA_PLACES or not extra_kernel[1] > 0 or not extra_kernel[0]
    ):
        raise ValueError(
            f"extra_kernel {extra_kernel!r}: (name, µs > 0, one of {', '.join(EXTRA_PLACES)})"
        )
    builder = _Builder(
        layers,
        scale,
        world_size,
        comm_factor={t: 1.0 + x for t, x in (comm_slowdown or {}).items()},
        dataloader_us=dataloader_us,
        step_end_sync=step_end_sync,
        optimizer_launch_us=optimizer_launch_us,
        extra_kernel=extra_kernel,
    )
    total = steps + (1 if partial_last_step else 0)
    for i in range(total):
        builder.step(FIRST_STEP + i, partial=partial_last_step and i == total - 1)
    builder.program.append(_StepMark(None))
    _check_skip(skip, world_size, builder.program)
    slow = (seed + 3) % world_size if slow_rank is None else slow_rank
    factors = slow_factors(world_size, {slow: slowdown} if slow_ranks is None else slow_ranks)
    offsets = _offsets(world_size, host_offsets_ns)
    sims = [
        _RankSim(r, seed, factors[r], time_format == "epoch_us", off, jitter)
        for r, off in enumerate(offsets)
    ]
    slow_in(sims, slow_steps)
    for sim in sims:
        sim.calls = [] if idle_detail else None
    topo = _Topology({"": (("", tuple(range(world_size))),)}, _seq_base(builder.program), skip)
    _run_program(builder.program, sims, topo)
    ranks = tuple(
        RankSpec(
            sim.rank,
            tuple(sim.steps),
            _extras(sim),
            f"node{sim.rank // 8}",
            naming,
            time_format,
            tuple(sim.calls or ()),
        )
        for sim in sims
    )
    skipped = tuple(s for sim in sims for s in sim.skipped)
    return RunSpec(world_size, ranks, gzip, host_offsets_ns=_host_truth(sims), skipped=skipped)


def slow_factors(world: int, slow_ranks: Mapping[int, float]) -> list[float]:
    """Each rank's compute factor: 1 + its slowdown (0.06 = 6 % slower)."""
    for rank in slow_ranks:
        if not 0 <= rank < world:
            raise ValueError(f"slow rank {rank} is not in [0, {world})")
    return [1.0 + slow_ranks.get(r, 0.0) for r in range(world)]


def slow_in(sims: Sequence[_RankSim], steps: Collection[int] | None) -> None:
    """Slow ranks slow only in these steps (an intermittent straggler); None: in all."""
    for sim in sims:
        sim.slow_steps = None if steps is None else frozenset(steps)


def _check_skip(skip: tuple[int, int] | None, world_size: int, program: list[_Instr]) -> None:
    if skip is None:
        return
    count = sum(1 for x in program if isinstance(x, _Launch) and x.kind == "comm")
    rank, k = skip
    if not (0 <= rank < world_size and 0 <= k < count):
        raise ValueError(
            f"skip {skip}: rank must be in [0, {world_size}) and k in [0, {count}) "
            "(collectives per rank, in launch order)"
        )


def fsdp_run_of_size(
    target_mb_per_rank: float, world_size: int = 8, seed: int = 0, gzip: bool = False
) -> RunSpec:
    """An fsdp_run whose uncompressed rank files are each about target_mb_per_rank MB (1e6 B).

    Within ±20% from about 0.1 MB up; below that the smallest schedule (one layer, one step)
    is returned.
    """
    if target_mb_per_rank <= 0:
        raise ValueError("target_mb_per_rank must be > 0")
    target = target_mb_per_rank * 1e6
    layers, steps, scale = 6, 4, 1
    # File size is close to affine in each knob (fixed header plus per-event text): fit it.
    small = _probe_size(world_size, scale=1)
    if target >= small:
        per_scale = (_probe_size(world_size, scale=3) - small) / 2
        scale = max(1, round((target - small) / per_scale) + 1)
    else:
        layers = _fit(target, lambda n: _probe_size(world_size, layers=n), 6)
        if layers == 1:
            steps = _fit(target, lambda n: _probe_size(world_size, layers=1, steps=n), 4)
    return fsdp_run(world_size, steps=steps, layers=layers, seed=seed, gzip=gzip, scale=scale)


def _fit(target: float, size_of: Callable[[int], int], top: int) -> int:
    """The n in 1..top whose size comes closest to target."""
    sizes = {n: size_of(n) for n in range(1, top + 1)}
    return min(sizes, key=lambda n: abs(sizes[n] - target))


def _probe_size(world_size: int, scale: int = 1, layers: int = 6, steps: int = 4) -> int:
    run = fsdp_run(
        world_size=min(world_size, 2), steps=steps, layers=layers, scale=scale, gzip=False
    )
    probe = RunSpec(world_size, run.ranks[:1], gzip=False)
    return sum(len(chunk.encode()) for chunk in render_rank(probe, probe.ranks[0]))
