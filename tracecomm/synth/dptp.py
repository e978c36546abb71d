"""Data parallel x tensor parallel: several process groups, each with its own Seq counter.

world = dp * tp and rank = dp_index * tp + tp_index. The TP groups are runs of tp consecutive
ranks (inside one host when tp <= 8); the DP groups are the ranks with the same tp_index. Every
layer all-reduces activations inside its TP group twice per pass (Megatron-style, on the TP
stream, with the next kernels waiting for it); the backward pass reduce-scatters each layer's
gradients inside the DP group on the DP stream, hidden behind the next layer's backward; after
the optimizer the updated shards are all-gathered inside the DP group.

The simulation is fsdp.py's: a collective ends a transfer time after the last member of its
group arrived, so a slow rank holds its TP peers at every TP all-reduce and its DP peers at
the DP collectives.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

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
    _Instr,
    _Launch,
    _offsets,
    _RankSim,
    _run_program,
    _seq_base,
    _StepMark,
    _Sync,
    _Topology,
    slow_factors,
    slow_in,
)
from tracecomm.synth.schedule import CollType, Naming, ProcessGroup, RankSpec, RunSpec

TP_STREAM = 20
DP_STREAM = 28
TP_DESC = "mesh_tp"
DP_DESC = "mesh_dp"
# µs; TP all-reduces are small and latency bound. DP ones move a layer's gradients, of which a
# TP rank holds 1/tp: their times and sizes below are for tp = 1.
_TP_AR_US, _DP_RS_US, _DP_AG_US, _DP_NORM_US = 57.3, 1_040.9, 505.2, 36.4
_TP_NELEMS = 4_194_304
_GRAD_NELEMS = 3_145_728  # one layer's gradient shard per DP rank (elements)


@dataclass
class _DpTpBuilder:
    layers: int
    tp: int
    dp: int
    program: list[_Instr] = field(default_factory=list)
    next_key: int = 0

    @property
    def grad_nelems(self) -> int:
        return max(1, _GRAD_NELEMS // self.tp)

    def add(self, launch: _Launch) -> int:
        self.program.append(launch)
        self.next_key += 1
        return launch.key

    def kernels(
        self, pattern: tuple[tuple[str, float], ...], thread: str, deps: tuple[int, ...]
    ) -> int:
        last = -1
        for i, (name, dur) in enumerate(pattern):
            launch = _Launch(
                self.next_key,
                "compute",
                COMPUTE_STREAM,
                dur / self.tp,  # each TP rank holds 1/tp of the layer's math
                name,
                thread=thread,
                deps=deps if i == 0 else (),
            )
            last = self.add(launch)
        return last

    def comm(
        self,
        group: str,
        coll: CollType,
        dur_us: float,
        nelems: int,
        thread: str,
        deps: tuple[int, ...],
    ) -> int | None:
        """A collective of the TP ("tp") or DP ("dp") groups; None when those have one rank."""
        if (self.tp if group == "tp" else self.dp) < 2:
            return None
        stream = TP_STREAM if group == "tp" else DP_STREAM
        launch = _Launch(
            self.next_key,
            "comm",
            stream,
            dur_us,
            "",
            coll,
            nelems,
            thread,
            deps,
            cost_us=31.0,
            group=group,
        )
        return self.add(launch)

    def tp_allreduce(self, thread: str, after: int) -> tuple[int, ...]:
        """All-reduce the activations once `after` ran; what the next kernel must wait for."""
        ar = self.comm("tp", "AllReduce", _TP_AR_US, _TP_NELEMS, thread, (after,))
        return (after,) if ar is None else (ar,)

    def step(self, number: int) -> None:
        self.program += [_StepMark(number), _Cpu(183.4)]  # data loading
        self.add(_Launch(self.next_key, "memcpy", COMPUTE_STREAM, 47.6, cost_us=14.2))
        self.program.append(_Cpu(71.9))
        self.forward()
        last_rs = self.backward()
        self.optimizer(last_rs)

    def forward(self) -> None:
        wait: tuple[int, ...] = ()
        for _ in range(self.layers):
            attn = self.kernels(_FORWARD_LAYER[:4], "main", wait)
            wait = self.tp_allreduce("main", attn)
            mlp = self.kernels(_FORWARD_LAYER[4:9], "main", wait)
            wait = self.tp_allreduce("main", mlp)
            self.kernels(_FORWARD_LAYER[9:], "main", wait)
            wait = ()
        loss = self.kernels(((kn.GEMM_CUTLASS, 84.6),), "main", ())
        self.kernels(((kn.ADD, 11.8),), "main", (loss,))
        self.program.append(_Sync(93.1))  # loss.item() for logging

    def backward(self) -> int | None:
        wait: tuple[int, ...] = ()
        last_rs: int | None = None
        size = self.grad_nelems * self.dp
        for _ in range(self.layers):
            mlp = self.kernels(_BACKWARD_LAYER[:7], "autograd", wait)
            wait = self.tp_allreduce("autograd", mlp)
            attn = self.kernels(_BACKWARD_LAYER[7:], "autograd", wait)
            wait = self.tp_allreduce("autograd", attn)
            # The layer's weight gradients are done: reduce-scatter them behind the next layer.
            rs = self.comm("dp", "ReduceScatter", _DP_RS_US / self.tp, size, "autograd", (attn,))
            last_rs = rs if rs is not None else last_rs
        return last_rs

    def optimizer(self, last_rs: int | None) -> None:
        norm = self.kernels(((kn.NORM, 14.7),), "main", () if last_rs is None else (last_rs,))
        self.comm("dp", "AllReduce", _DP_NORM_US, 1, "main", (norm,))
        self.program.append(_Sync(61.3))  # clip_grad_norm_ reads the total norm
        adam = self.kernels(((kn.ADAM, 33.1 * self.tp),) * self.layers, "main", ())
        for _ in range(self.layers):
            self.comm("dp", "AllGather", _DP_AG_US / self.tp, self.grad_nelems, "main", (adam,))
        self.add(_Launch(self.next_key, "memset", COMPUTE_STREAM, 8.9, cost_us=6.1))
        self.program.append(_Sync(118.6))  # end-of-step logging


def dp_tp_groups(dp: int, tp: int) -> tuple[ProcessGroup, ...]:
    """The TP groups tp0..tp{dp-1}, then the DP groups dp0..dp{tp-1}."""
    tp_groups = tuple(
        ProcessGroup(f"tp{d}", TP_DESC, tuple(range(d * tp, (d + 1) * tp))) for d in range(dp)
    )
    dp_groups = tuple(
        ProcessGroup(f"dp{t}", DP_DESC, tuple(range(t, dp * tp, tp))) for t in range(tp)
    )
    return tp_groups + dp_groups


def dp_tp_run(
    dp: int,
    tp: int,
    steps: int = 3,
    layers: int = 4,
    seed: int = 0,
    slow_rank: int | None = None,
    slowdown: float = 0.0,
    naming: Naming = "dev",
    gzip: bool = True,
    host_offsets_ns: Sequence[int] | None = None,
    jitter: float = JITTER,
    slow_ranks: Mapping[int, float] | None = None,
    slow_steps: Collection[int] | None = None,
) -> RunSpec:
    """A DP x TP run of `steps` complete steps; groups are in ``RunSpec.groups``.

    ``slow_rank`` (default ``(seed + 3) % world``) runs its compute ``slowdown`` slower (0 =
    no straggler); ``host_offsets_ns`` and ``jitter`` as in ``fsdp_run``. A group with one
    rank runs no collectives (tp=1: no TP all-reduce; dp=1: no DP collectives).
    ``slow_ranks`` (rank -> slowdown) replaces ``slow_rank`` and ``slowdown``; ``slow_steps``
    limits the slowness to those steps (an intermittent straggler).
    """
    if dp < 1 or tp < 1 or steps < 1 or layers < 1:
        raise ValueError("dp, tp, steps and layers must all be >= 1")
    world = dp * tp
    builder = _DpTpBuilder(layers, tp, dp)
    for i in range(steps):
        builder.step(FIRST_STEP + i)
    builder.program.append(_StepMark(None))
    groups = dp_tp_groups(dp, tp)
    kinds: dict[str, tuple[tuple[str, tuple[int, ...]], ...]] = {
        kind: tuple((g.name, g.ranks) for g in groups if g.desc == desc)
        for kind, desc in (("tp", TP_DESC), ("dp", DP_DESC))
    }
    bases = _seq_base(builder.program)
    # Each group's counter is its own, so each named group starts from its kind's base.
    topo = _Topology(kinds, {name: bases[kind] for kind in bases for name, _ in kinds[kind]}, None)
    slow = (seed + 3) % world if slow_rank is None else slow_rank
    factors = slow_factors(world, {slow: slowdown} if slow_ranks is None else slow_ranks)
    sims = [
        _RankSim(r, seed, factors[r], False, off, jitter)
        for r, off in enumerate(_offsets(world, host_offsets_ns))
    ]
    slow_in(sims, slow_steps)
    _run_program(builder.program, sims, topo)
    ranks = tuple(
        RankSpec(sim.rank, tuple(sim.steps), _extras(sim), f"node{sim.rank // 8}", naming)
        for sim in sims
    )
    return RunSpec(world, ranks, gzip, groups=groups, host_offsets_ns=_host_truth(sims))
