"""Data parallel x pipeline parallel (x tensor parallel): a 1F1B schedule with point-to-point
send/recv.

world = dp * pp * tp, laid out and grouped as pp_layout.py says (tp = 1: rank = stage * dp +
dp_index, stage-major). Group ``dp{s}`` holds the dp ranks of stage s and all-reduces their
gradients once the pipeline has drained; the send/recv traffic runs in one group per pipeline
(``pp{d}``) or, as Megatron names them, one per adjacent stage pair and direction. With tp > 1
every layer all-reduces its activations (forward) and their gradients (backward) twice inside
its tensor-parallel group, the next kernels waiting for it. With the embedding all-reduce the
first and the last stage of each pipeline all-reduce the shared embedding's gradients before
the data-parallel all-reduce; in 1F1B the first stage finishes its backward last, so it is
always last there (lateness by schedule).

Each step, stage s runs min(pp - s - 1, m) warm-up forwards, then alternates one forward and
one backward, then runs the remaining backwards. A forward on stage s > 0 first receives the
activation from s - 1 and, on s < pp - 1, sends its output to s + 1 after the compute; a
backward on s < pp - 1 first receives the gradient from s + 1 and, on s > 0, sends to s - 1.

Unlike fsdp.py and dptp.py the stages run different programs, so the ranks are simulated side
by side: each rank runs its own program until it needs the end of a send/recv or collective
that a peer has not reached yet. A matched send/recv pair both end at max(send start, recv
start) + a transfer time; a collective ends a transfer time after its last member arrived. CPU
launches never wait for the GPU except at the end-of-step synchronize, as on real hardware.
Each direction of each link has its own stream (activation send/recv, gradient send/recv), so
the messages of one stream pair up in micro-batch order and the schedule cannot deadlock.
With ``recv_waits_outside`` a receive kernel starts only once its send has started (the CPU
posts it after a handshake, as NDTimeline-timed Megatron jobs show): the receiving GPU idles
before the kernel instead of spinning inside it.

Two things a trace can hide, each off by default. With ``rendezvous`` the first tensor-parallel
rank of each replica's last stage, before its embedding all-reduce (its data-parallel one
without the embedding), waits on its host for replica 0's: until that rank's last backward
send ends, plus a lag (a CPU barrier over gloo, say: no kernel, no CPU event, only a gap on
the GPU). With ``coarse_clock_us`` every compute kernel launched after a send/recv it waits for
is recorded as starting up to that many µs earlier than it did (its end as it was), so its
start lies before the send/recv's recorded end, as converted timestamps put it; the
simulated times, and so every step, stay as they were.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace

from tracecomm.synth import names as kn
from tracecomm.synth.fsdp import (
    _BACKWARD_LAYER,
    _FORWARD_LAYER,
    COMPUTE_STREAM,
    FIRST_STEP,
    JITTER,
    _Cpu,
    _extras,
    _host_truth,
    _Launch,
    _offsets,
    _RankSim,
    _StepMark,
    _Sync,
    slow_factors,
    slow_in,
)
from tracecomm.synth.pp_layout import DP_DESC, PP_DESC, P2pGroups, PipelineLayout
from tracecomm.synth.schedule import (
    CollType,
    Naming,
    Op,
    OpKind,
    ProcessGroup,
    RankSpec,
    RunSpec,
    Step,
)

__all__ = ["DP_DESC", "PP_DESC", "dp_pp_groups", "dp_pp_run", "one_f_one_b"]

DP_STREAM = 28
TP_STREAM = 24
SEND_ACT_STREAM, RECV_ACT_STREAM, SEND_GRAD_STREAM, RECV_GRAD_STREAM = 32, 36, 40, 44
_P2P_US = 96.7  # one micro-batch's activations (or their gradient) over NVLink / IB
_P2P_NELEMS = 4_194_304
_DP_AR_US = 412.9  # per layer of the stage
_GRAD_NELEMS = 3_145_728  # per layer of the stage
_TP_AR_US = 57.3  # one layer's activations inside the tensor-parallel group
_TP_NELEMS = 4_194_304
_EMB_AR_US = 81.4  # the shared embedding's gradients, first and last stage
_EMB_NELEMS = 8_388_608
# after which kernels of a layer the tensor-parallel all-reduces run (attention output and
# MLP output in the forward, their gradients in the backward)
_TP_AFTER = {"main": (3, 8), "autograd": (5, 12)}


@dataclass(frozen=True, slots=True)
class _P2p:
    """A send or recv of one micro-batch's activations ("act") or gradients ("grad")."""

    key: int
    send: bool
    channel: str
    micro: int
    peer_stage: int
    deps: tuple[int, ...] = ()
    thread: str = "main"

    @property
    def link(self) -> int:
        """The lower of the two stages it connects: activations go up, gradients down."""
        towards_later = (self.channel == "act") == self.send
        return self.peer_stage - 1 if towards_later else self.peer_stage

    @property
    def stream(self) -> int:
        if self.channel == "act":
            return SEND_ACT_STREAM if self.send else RECV_ACT_STREAM
        return SEND_GRAD_STREAM if self.send else RECV_GRAD_STREAM


@dataclass(frozen=True, slots=True)
class _Rendezvous:
    """The host waits, unrecorded, until replica 0's rank of the same place has ended the
    op ``key`` (its last backward send), plus a lag; replica 0's rank itself goes on."""

    key: int


_PpInstr = _Launch | _P2p | _Cpu | _Sync | _StepMark | _Rendezvous


@dataclass
class _StageBuilder:
    """The program of one stage (the same for every dp rank of it)."""

    stage: int
    pp: int
    dp: int
    micro: int
    layers: int
    sync_before_recv: bool = False
    tp: int = 1
    embedding: bool = False
    rendezvous: bool = False
    program: list[_PpInstr] = field(default_factory=list)
    next_key: int = 0
    last_backward: int = -1
    last_send: int = -1  # the step's last backward send (stage > 0)

    def add(self, instr: _Launch | _P2p) -> int:
        self.program.append(instr)
        self.next_key += 1
        return instr.key

    def kernels(
        self, pattern: tuple[tuple[str, float], ...], thread: str, deps: tuple[int, ...]
    ) -> int:
        last = -1
        waits = deps
        for _ in range(self.layers):
            for i, (name, dur) in enumerate(pattern):
                launch = _Launch(
                    self.next_key, "compute", COMPUTE_STREAM, dur, name, thread=thread, deps=waits
                )
                last = self.add(launch)
                waits = ()
                if self.tp > 1 and i in _TP_AFTER[thread]:
                    last = waits_for = self.tp_allreduce(thread, last)
                    waits = (waits_for,)
        return last

    def tp_allreduce(self, thread: str, after: int) -> int:
        return self.add(
            _Launch(
                self.next_key,
                "comm",
                TP_STREAM,
                _TP_AR_US,
                "",
                "AllReduce",
                _TP_NELEMS,
                thread,
                (after,),
                cost_us=31.0,
                group="tp",
            )
        )

    def p2p(
        self, send: bool, channel: str, micro: int, peer: int, deps: tuple[int, ...] = ()
    ) -> int:
        if not send and self.sync_before_recv:
            # the CPU waits for the compute stream to drain, then posts the receive
            self.program.append(_Sync(21.7, COMPUTE_STREAM))
        return self.add(_P2p(self.next_key, send, channel, micro, peer, deps))

    def step(self, number: int) -> None:
        self.program += [_StepMark(number), _Cpu(183.4)]  # data loading
        self.add(_Launch(self.next_key, "memcpy", COMPUTE_STREAM, 47.6, cost_us=14.2))
        self.program.append(_Cpu(71.9))
        for kind, micro in one_f_one_b(self.stage, self.pp, self.micro):
            if kind == "F":
                self.forward(micro)
            else:
                self.backward(micro)
        self.optimizer()

    def forward(self, micro: int) -> None:
        s = self.stage
        wait = (self.p2p(False, "act", micro, s - 1),) if s > 0 else ()
        last = self.kernels(_FORWARD_LAYER, "main", wait)
        if s == self.pp - 1:
            self.add(_Launch(self.next_key, "compute", COMPUTE_STREAM, 84.6, kn.GEMM_CUTLASS))
            self.add(_Launch(self.next_key, "compute", COMPUTE_STREAM, 11.8, kn.ADD))  # loss
        else:
            self.p2p(True, "act", micro, s + 1, (last,))

    def backward(self, micro: int) -> None:
        s = self.stage
        wait = (self.p2p(False, "grad", micro, s + 1),) if s < self.pp - 1 else ()
        last = self.kernels(_BACKWARD_LAYER, "autograd", wait)
        if s > 0:
            self.last_send = self.p2p(True, "grad", micro, s - 1, (last,))
        self.last_backward = last

    def optimizer(self) -> None:
        deps = (self.last_backward,)
        if self.rendezvous and self.stage == self.pp - 1 and self.stage > 0:
            self.program.append(_Rendezvous(self.last_send))
        if self.embedding and self.pp > 1 and self.stage in (0, self.pp - 1):
            shared = _Launch(
                self.next_key,
                "comm",
                DP_STREAM,
                _EMB_AR_US,
                "",
                "AllReduce",
                _EMB_NELEMS,
                "main",
                deps,
                cost_us=31.0,
                group="emb",
            )
            deps = (self.add(shared),)
        if self.dp > 1:
            reduce = _Launch(
                self.next_key,
                "comm",
                DP_STREAM,
                _DP_AR_US * self.layers,
                "",
                "AllReduce",
                _GRAD_NELEMS * self.layers,
                "main",
                deps,
                cost_us=31.0,
                group="dp",
            )
            deps = (self.add(reduce),)
        adam = _Launch(self.next_key, "compute", COMPUTE_STREAM, 33.1, kn.ADAM, deps=deps)
        self.add(adam)
        for _ in range(self.layers - 1):
            self.add(_Launch(self.next_key, "compute", COMPUTE_STREAM, 33.1, kn.ADAM))
        self.add(_Launch(self.next_key, "memset", COMPUTE_STREAM, 8.9, cost_us=6.1))
        self.program.append(_Sync(118.6))  # end-of-step logging waits for every stream


def one_f_one_b(stage: int, pp: int, micro: int) -> list[tuple[str, int]]:
    """("F" | "B", micro-batch) in the order stage runs them within one step."""
    warm = min(pp - stage - 1, micro)
    order = [("F", i) for i in range(warm)]
    for i in range(micro - warm):
        order += [("F", warm + i), ("B", i)]
    order += [("B", i) for i in range(micro - warm, micro)]
    return order


def dp_pp_groups(
    dp: int,
    pp: int,
    tp: int = 1,
    p2p_groups: P2pGroups = "pipeline",
    embedding: bool = False,
) -> tuple[ProcessGroup, ...]:
    """The DP groups (one per stage and tensor-parallel index), the TP groups, the send/recv
    groups, the embedding groups (pp_layout.py)."""
    return PipelineLayout(dp, pp, tp, p2p_groups, embedding).groups()


def per_step(program: Sequence[_PpInstr], pair_groups: bool) -> dict[str, int]:
    """Ops one rank runs per step in each of its groups (its stage program's first step): the
    collectives of "dp", "tp", "emb" and the send/recv of its pipeline group ("p2p"), or of
    each link and direction ("p2p act 0", …) when the groups are per stage pair."""
    marks = [i for i, x in enumerate(program) if isinstance(x, _StepMark)]
    counts: dict[str, int] = {}
    for x in program[marks[0] : marks[1]]:
        kind = _seq_group(x, pair_groups)
        if kind is not None:
            counts[kind] = counts.get(kind, 0) + 1
    return counts


def _seq_group(x: _PpInstr, pair_groups: bool) -> str | None:
    if isinstance(x, _P2p):
        return f"p2p {x.channel} {x.link}" if pair_groups else "p2p"
    if isinstance(x, _Launch) and x.kind == "comm":
        return x.group
    return None


@dataclass
class _Rec:
    """One launched op of the open step; end stays None until its rendezvous resolves."""

    kind: OpKind
    stream: int
    at: int
    start: int
    end: int | None
    name: str = ""
    coll: CollType | None = None
    nelems: int = 0
    thread: str = "main"
    pg: str = ""
    seq: int = 0
    p2p: str = ""
    peer: int = -1
    recorded: bool = True


class _PpRank:
    """One rank's progress through its stage's program."""

    def __init__(
        self, sim: _RankSim, layout: PipelineLayout, program: list[_PpInstr], seed: int = 0
    ) -> None:
        self.sim = sim
        self.layout = layout
        self.stage, self.d, self.t = layout.place(sim.rank)
        self.program = program
        self.pc = 0
        self.step = 0
        self.last_on: dict[int, int] = {}  # stream -> key of the last op queued on it
        self.recs: dict[int, _Rec] = {}  # key -> op of the open step
        self.ends: dict[int, int] = {}  # key -> end, once known
        # ProcessGroupNCCL numbers a rank's ops with a counter of their own per group, in the
        # rank's launch order (so the two ends of a send/recv need not share a Seq); steps
        # 0..step-1 are taken to have run before
        self.per_step = per_step(program, layout.p2p_groups == "pair")
        self.seqs: dict[str, int] = {}
        # the draws of what the trace hides (rendezvous lags, coarse-clock shifts): a stream
        # of their own, so the run's other draws stay those of the run without them
        self.aside = random.Random((seed * 1000 + sim.rank) * 7919 + 4099)

    def next_seq(self, kind: str) -> int:
        seq = self.seqs.get(kind, self.step * self.per_step.get(kind, 0)) + 1
        self.seqs[kind] = seq
        return seq

    def group(self, kind: str) -> tuple[str, int]:
        """Name and size of this rank's collective group of a kind ("dp", "tp", "emb")."""
        lay, s, d, t = self.layout, self.stage, self.d, self.t
        if kind == "tp":
            return lay.tp_group(s, d), lay.tp
        if kind == "emb":
            return lay.emb_group(d, t), 2
        return lay.dp_group(s, t), lay.dp

    @property
    def done(self) -> bool:
        return self.pc >= len(self.program)

    def known(self, keys: Sequence[int]) -> bool:
        return all(k in self.ends for k in keys)

    def ready(self, stream: int, deps: tuple[int, ...]) -> tuple[int, int] | None:
        """(launch, earliest start), or None while a time it needs is unknown."""
        waits = list(deps)
        if stream in self.last_on:
            waits.append(self.last_on[stream])
        if not self.known(waits):
            return None
        sim = self.sim
        at = sim.cpu
        start = max([at + sim.ns(3.1)] + [self.ends[k] for k in waits])
        return at, start

    def settle(self, key: int, end: int) -> None:
        self.ends[key] = end
        self.recs[key].end = end

    def flush(self) -> None:
        o = self.sim.offset
        for rec in self.recs.values():
            assert rec.end is not None, "a step closed with an unresolved op"
            self.sim.ops.append(
                Op(
                    rec.kind,
                    rec.stream,
                    rec.start + o,
                    rec.end - rec.start,
                    rec.at + o,
                    rec.name,
                    rec.coll,
                    recorded=rec.recorded,
                    nelems=rec.nelems,
                    launch_thread=rec.thread,
                    pg=rec.pg,
                    seq=rec.seq,
                    p2p=rec.p2p,
                    peer=rec.peer,
                )
            )
        self.recs = {}


@dataclass
class _Meet:
    """A rendezvous: who has arrived (rank, key, start, own transfer time)."""

    size: int
    arrived: list[tuple[_PpRank, int, int, int]] = field(default_factory=list)


class _PpSim:
    def __init__(
        self,
        ranks: list[_PpRank],
        recv_waits_outside: bool = False,
        rendezvous_us: tuple[float, float] | None = None,
        coarse_clock_us: float = 0.0,
    ) -> None:
        self.ranks = ranks
        self.recv_waits_outside = recv_waits_outside
        self.rendezvous_us = rendezvous_us
        self.coarse_clock_us = coarse_clock_us
        self.meets: dict[tuple[object, ...], _Meet] = {}

    def run(self) -> None:
        while not all(r.done for r in self.ranks):
            moved = False
            for rank in self.ranks:
                while not rank.done and self.execute(rank, rank.program[rank.pc]):
                    rank.pc += 1
                    moved = True
            if not moved:
                raise RuntimeError("pipeline schedule deadlocked")  # a bug in the builder

    def execute(self, rank: _PpRank, instr: _PpInstr) -> bool:
        sim = rank.sim
        if isinstance(instr, _StepMark):
            rank.flush()
            sim.mark(instr.number)
            rank.step = instr.number or rank.step
            rank.seqs = {}
            return True
        if isinstance(instr, _Cpu):
            sim.cpu += sim.ns(instr.dur_us)
            return True
        if isinstance(instr, _Sync):
            streams = rank.last_on if instr.stream is None else [instr.stream]
            pending = [rank.last_on[s] for s in streams if s in rank.last_on]
            if not rank.known(pending):
                return False
            sim.cpu = max([sim.cpu] + [rank.ends[k] for k in pending]) + sim.ns(instr.gap_us)
            return True
        if isinstance(instr, _P2p):
            return self.p2p(rank, instr)
        if isinstance(instr, _Rendezvous):
            return self.rendezvous(rank, instr)
        return self.launch(rank, instr)

    def rendezvous(self, rank: _PpRank, instr: _Rendezvous) -> bool:
        """The first tensor-parallel rank of a replica but the first waits, on its host, for
        replica 0's rank of the same place to end ``instr.key``, plus a lag; others go on."""
        if self.rendezvous_us is None or rank.d == 0 or rank.t != 0:
            return True
        source = self.ranks[rank.layout.rank(rank.stage, 0, rank.t)]
        if instr.key not in source.ends:
            return False
        lo, hi = self.rendezvous_us
        lag = round(rank.aside.uniform(lo, hi) * 1000)
        rank.sim.cpu = max(rank.sim.cpu, source.ends[instr.key] + lag)
        return True

    def launch(self, rank: _PpRank, launch: _Launch) -> bool:
        timing = rank.ready(launch.stream, launch.deps)
        if timing is None:
            return False
        sim = rank.sim
        at, start = timing
        sim.cpu += sim.ns(launch.cost_us)
        before = rank.last_on.get(launch.stream)
        rank.last_on[launch.stream] = launch.key
        rec = _Rec(launch.kind, launch.stream, at, start, None, launch.name, launch.coll)
        rec.nelems, rec.thread = launch.nelems, launch.thread
        rank.recs[launch.key] = rec
        if launch.kind != "comm":
            scale = sim.compute_factor if launch.kind == "compute" else 1.0
            rank.settle(launch.key, start + sim.ns(launch.dur_us * scale))
            if launch.kind == "compute" and self.coarse_clock_us > 0:
                rec.start = self.coarse_start(rank, launch, start, before)
            return True
        # a collective of the rank's group of that kind (data parallel, tensor parallel,
        # embedding), numbered per group
        rec.pg, size = rank.group(launch.group)
        rec.seq = rank.next_seq(launch.group)
        own = sim.ns(launch.dur_us, spread=0.002)
        self.meet(("coll", rec.pg, rec.seq), size, rank, launch.key, start, own)
        return True

    def coarse_start(self, rank: _PpRank, launch: _Launch, start: int, before: int | None) -> int:
        """Where a coarse clock records a compute kernel's start: after a send/recv it waited
        for, up to ``coarse_clock_us`` earlier (one draw per such kernel), never before the
        end of the kernel ahead of it on its stream; elsewhere where it started."""
        if not any(rank.recs[k].p2p for k in launch.deps if k in rank.recs):
            return start
        shift = round(rank.aside.uniform(0.0, self.coarse_clock_us) * 1000)
        floor = rank.ends[before] if before is not None else start
        return max(start - shift, min(floor, start))

    def p2p(self, rank: _PpRank, op: _P2p) -> bool:
        timing = rank.ready(op.stream, op.deps)
        if timing is None:
            return False
        sim = rank.sim
        at, start = timing
        sim.cpu += sim.ns(31.0)
        rank.last_on[op.stream] = op.key
        lay, d, t = rank.layout, rank.d, rank.t
        src = rank.stage if op.send else op.peer_stage
        rec = _Rec("comm", op.stream, at, start, None, "", "SendRecv", _P2P_NELEMS, op.thread)
        rec.pg = lay.p2p_group(op.channel, op.link, d, t)
        rec.p2p, rec.peer = "send" if op.send else "recv", lay.rank(op.peer_stage, d, t)
        rec.seq = rank.next_seq(_seq_group(op, lay.p2p_groups == "pair") or "p2p")
        rank.recs[op.key] = rec
        # The sender's draw times the transfer; both ends finish together.
        transfer = sim.ns(_P2P_US, spread=0.01) if op.send else 0
        pair = (src, op.channel, op.micro)  # one pair per sending stage, direction, micro-batch
        self.meet(("pp", d, t, *pair), 2, rank, op.key, start, transfer)
        return True

    def meet(
        self, where: tuple[object, ...], size: int, rank: _PpRank, key: int, start: int, dur: int
    ) -> None:
        meet = self.meets.setdefault(where, _Meet(size))
        meet.arrived.append((rank, key, start, dur))
        if len(meet.arrived) < size:
            return
        del self.meets[where]
        last = max(s for _, _, s, _ in meet.arrived)
        if where[0] == "pp":
            transfer = max(d for *_, d in meet.arrived)
            for member, k, _, _ in meet.arrived:
                if self.recv_waits_outside and member.recs[k].p2p == "recv":
                    member.recs[k].start = last  # the kernel starts once its send has
                member.settle(k, last + transfer)
        else:
            for member, k, _, own in meet.arrived:
                member.settle(k, last + own)


def dp_pp_run(
    dp: int,
    pp: int,
    microbatches: int = 4,
    steps: int = 2,
    layers_per_stage: Sequence[int] | None = None,
    seed: int = 0,
    slow_rank: int | None = None,
    slowdown: float = 0.0,
    naming: Naming = "dev",
    gzip: bool = True,
    host_offsets_ns: Sequence[int] | None = None,
    jitter: float = JITTER,
    sync_before_recv: bool = False,
    tp: int = 1,
    p2p_groups: P2pGroups = "pipeline",
    embedding_allreduce: bool = False,
    recv_waits_outside: bool = False,
    peer_ranks: bool = True,
    slow_ranks: Mapping[int, float] | None = None,
    slow_steps: Collection[int] | None = None,
    hosts: Callable[[int], str] | None = None,
    rendezvous_us: tuple[float, float] | None = None,
    coarse_clock_us: float = 0.0,
) -> RunSpec:
    """A DP x PP (x TP) 1F1B run of ``steps`` complete steps; groups are in ``RunSpec.groups``.

    ``layers_per_stage[s]`` (default 2 each) scales stage s's forward and backward compute.
    ``slow_rank`` runs its compute ``slowdown`` slower; unlike ``fsdp_run`` and ``dp_tp_run``
    the default ``slow_rank=None`` means no straggler at all. ``host_offsets_ns`` and
    ``jitter`` as in ``fsdp_run``. A group with one rank runs nothing (dp=1: no gradient
    all-reduce; pp=1: no send/recv). ``sync_before_recv``: the CPU waits for the GPU to drain
    before posting each receive, so the GPU idles until the receive starts (pipeline waits).

    What real Megatron jobs show (the module's doc): ``tp`` ranks per stage with their
    all-reduces, ``p2p_groups="pair"`` (one send/recv group per adjacent stage pair and
    direction), ``embedding_allreduce`` between the first and the last stage,
    ``recv_waits_outside`` (receive kernels start once their send has), and ``peer_ranks``
    False: no Src/Dst Rank on send/recv (NDTimeline-converted traces have none; the two-member
    groups say who the peer is).

    ``slow_ranks`` (rank -> slowdown) replaces ``slow_rank`` and ``slowdown``; ``slow_steps``
    limits the slowness to those steps; ``hosts`` names each rank's host (default ``node{r //
    8}``; the clocks still skew per eight ranks, so give ``host_offsets_ns`` zeros with it).

    What a trace can hide (the module's doc), both off by default: ``rendezvous_us`` (lo, hi)
    makes the first tensor-parallel rank of each replica's last stage but replica 0's wait,
    unrecorded, before its embedding (else data-parallel) all-reduce until replica 0's rank
    there ends its last backward send, plus a lag drawn per step from lo–hi µs;
    ``coarse_clock_us`` records each compute kernel that waited for a send/recv as starting
    up to that many µs before it did (a draw per kernel), its end unchanged.
    """
    layers = list(layers_per_stage) if layers_per_stage is not None else [2] * pp
    if dp < 1 or pp < 1 or tp < 1 or microbatches < 1 or steps < 1:
        raise ValueError("dp, pp, tp, microbatches and steps must all be >= 1")
    if len(layers) != pp or min(layers) < 1:
        raise ValueError(f"layers_per_stage needs {pp} entries, each >= 1; got {layers}")
    if rendezvous_us is not None and not 0 <= rendezvous_us[0] <= rendezvous_us[1]:
        raise ValueError(f"rendezvous_us {rendezvous_us}: want 0 <= lo <= hi")
    if coarse_clock_us < 0:
        raise ValueError(f"coarse_clock_us {coarse_clock_us} is negative")
    layout = PipelineLayout(dp, pp, tp, p2p_groups, embedding_allreduce)
    world = layout.world
    if slow_rank is not None and not 0 <= slow_rank < world:
        raise ValueError(f"slow_rank {slow_rank} is not in [0, {world})")
    slow = {} if slow_rank is None else {slow_rank: slowdown}
    factors = slow_factors(world, slow if slow_ranks is None else slow_ranks)
    programs = []
    for s in range(pp):
        builder = _StageBuilder(
            s,
            pp,
            dp,
            microbatches,
            layers[s],
            sync_before_recv,
            tp,
            embedding_allreduce,
            rendezvous_us is not None,
        )
        for i in range(steps):
            builder.step(FIRST_STEP + i)
        builder.program.append(_StepMark(None))
        programs.append(builder.program)
    ranks = [
        _PpRank(
            _RankSim(r, seed, factors[r], False, off, jitter),
            layout,
            programs[layout.place(r)[0]],
            seed,
        )
        for r, off in enumerate(_offsets(world, host_offsets_ns))
    ]
    slow_in([r.sim for r in ranks], slow_steps)
    _PpSim(ranks, recv_waits_outside, rendezvous_us, coarse_clock_us).run()
    sims = [r.sim for r in ranks]
    specs = tuple(
        RankSpec(
            sim.rank,
            _without_peers(sim.steps, peer_ranks),
            _extras(sim),
            hosts(sim.rank) if hosts is not None else f"node{sim.rank // 8}",
            naming,
        )
        for sim in sims
    )
    truth = _host_truth(sims) if hosts is None else {hosts(x.rank): x.offset for x in sims}
    return RunSpec(world, specs, gzip, groups=layout.groups(), host_offsets_ns=truth)


def _without_peers(steps: Sequence[Step], keep: bool) -> tuple[Step, ...]:
    """The steps, their send/recv ops without Src/Dst Rank unless ``keep``."""
    if keep:
        return tuple(steps)
    return tuple(
        replace(s, ops=tuple(replace(o, peer_args=False) if o.p2p else o for o in s.ops))
        for s in steps
    )
