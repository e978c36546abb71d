"""The same FSDP model at any world size, its collectives timed by one alpha-beta network.

For the scaling projection (metrics.md §11): a run generated at N and a run generated at N'
from the same ``Network`` are what a projection from the first must predict for the second.

Every collective takes ``alpha · hops(n) + bytes · f(n) / B`` (ring hops: n − 1 for AllGather and
ReduceScatter, 2(n − 1) for AllReduce; f and bytes as in metrics.md §7). Layers alternate
between two sizes so that a fit on one run can tell latency from bandwidth. Strong scaling (the
default) keeps the global batch: compute per rank scales by ``base_world / n``; weak scaling
keeps the per-rank batch and compute. The model is the same at every size, so the sharded
collectives' per-rank messages shrink by ``1 / n`` while their total bytes stay. CPU launches
are cheap (0.5 µs), so the GPU timeline is set by the device work and the network alone; there
is no straggler and no jitter.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from tracecomm.synth import names as kn
from tracecomm.synth.fsdp import (
    _BACKWARD_LAYER,
    _FORWARD_LAYER,
    COMM_STREAM,
    COMPUTE_STREAM,
    FIRST_STEP,
    _Cpu,
    _host_truth,
    _Instr,
    _Launch,
    _RankSim,
    _run_program,
    _seq_base,
    _StepMark,
    _Sync,
    _Topology,
)
from tracecomm.synth.schedule import CollType, RankSpec, RunSpec

LAUNCH_US = 0.5
# Parameters per layer (bf16): two widths, so message sizes differ within one run.
LAYER_PARAMS = (16_777_216, 50_331_648)
_ELEM_BYTES = {"AllGather": 2, "ReduceScatter": 2, "AllReduce": 4}


@dataclass(frozen=True)
class Network:
    """One alpha-beta model for every collective: per-hop latency and bus bandwidth."""

    alpha_us: float  # per ring hop
    bus_gbps: float  # GB/s (10^9 bytes) of bus bandwidth, metrics.md §7's busbw

    def time_us(self, coll: CollType, nbytes: int, n: int) -> float:
        if n < 2:
            return self.alpha_us
        hops = 2 * (n - 1) if coll == "AllReduce" else n - 1
        factor = 2 * (n - 1) / n if coll == "AllReduce" else (n - 1) / n
        return self.alpha_us * hops + nbytes * factor / self.bus_gbps / 1000.0


def scaling_run(
    world_size: int,
    network: Network,
    base_world: int = 64,
    weak: bool = False,
    layers: int = 6,
    steps: int = 3,
    seed: int = 0,
    gzip: bool = True,
    networks: Mapping[CollType, Network] | None = None,
) -> RunSpec:
    """``steps`` complete steps of the model on ``world_size`` ranks (hosts of 8).
    ``networks``: another network for some collective types (a before/after pair in which one
    collective got slower, ``synth.series``); the others use ``network``."""
    if world_size < 1 or layers < 1 or steps < 1:
        raise ValueError("world_size, layers and steps must be >= 1")
    compute = 1.0 if weak else base_world / world_size
    program = _Program(world_size, network, compute, layers, dict(networks or {})).build(steps)
    sims = [_RankSim(r, seed, 1.0, False, None, jitter=0.0) for r in range(world_size)]
    topo = _Topology({"": (("", tuple(range(world_size))),)}, _seq_base(program))
    _run_program(program, sims, topo)
    ranks = tuple(RankSpec(sim.rank, tuple(sim.steps), (), f"node{sim.rank // 8}") for sim in sims)
    return RunSpec(world_size, ranks, gzip, host_offsets_ns=_host_truth(sims))


@dataclass
class _Program:
    world: int
    network: Network
    compute: float  # compute duration factor against the base world size
    layers: int
    networks: dict[CollType, Network] = field(default_factory=dict)  # per type, over network

    def __post_init__(self) -> None:
        self.program: list[_Instr] = []
        self.key = 0

    def build(self, steps: int) -> list[_Instr]:
        for i in range(steps):
            self.step(FIRST_STEP + i)
        self.program.append(_StepMark(None))
        return self.program

    def add(self, launch: _Launch) -> int:
        self.program.append(launch)
        self.key += 1
        return launch.key

    def kernels(self, pattern: tuple[tuple[str, float], ...], size: float, dep: int) -> int:
        last = -1
        for i, (name, dur) in enumerate(pattern):
            last = self.add(
                _Launch(
                    self.key,
                    "compute",
                    COMPUTE_STREAM,
                    dur * size * self.compute,
                    name,
                    deps=(dep,) if i == 0 else (),
                    cost_us=LAUNCH_US,
                )
            )
        return last

    def comm(self, coll: CollType, params: int, deps: tuple[int, ...] = ()) -> int:
        n = self.world
        per_rank = params // n if coll == "AllGather" else params  # c10d's input count
        nbytes = params * _ELEM_BYTES[coll]  # nccl-tests' bytes: the whole layer
        return self.add(
            _Launch(
                self.key,
                "comm",
                COMM_STREAM,
                self.networks.get(coll, self.network).time_us(coll, nbytes, n),
                "",
                coll,
                per_rank,
                deps=deps,
                cost_us=LAUNCH_US,
            )
        )

    def params(self, layer: int) -> int:
        return LAYER_PARAMS[layer % 2] // self.world * self.world  # divisible by n

    def size(self, layer: int) -> float:
        return LAYER_PARAMS[layer % 2] / LAYER_PARAMS[0]

    def step(self, number: int) -> None:
        self.program += [_StepMark(number), _Cpu(150.0)]
        gathers = [self.comm("AllGather", self.params(0))]
        for i in range(self.layers):
            if i + 1 < self.layers:
                gathers.append(self.comm("AllGather", self.params(i + 1)))
            self.kernels(_FORWARD_LAYER, self.size(i), gathers[i])
        self.program.append(_Sync(40.0))  # loss.item()
        top = self.layers - 1
        back = {top: self.comm("AllGather", self.params(top))}
        last_rs = -1
        for i in range(top, -1, -1):
            if i > 0:
                back[i - 1] = self.comm("AllGather", self.params(i - 1))
            last = self.kernels(_BACKWARD_LAYER, self.size(i), back[i])
            last_rs = self.comm("ReduceScatter", self.params(i), (last,))
        norm = self.add(
            _Launch(
                self.key,
                "compute",
                COMPUTE_STREAM,
                14.7,
                kn.NORM,
                deps=(last_rs,),
                cost_us=LAUNCH_US,
            )
        )
        self.comm("AllReduce", 1, (norm,))
        self.program.append(_Sync(30.0))  # clip_grad_norm_
        for _ in range(self.layers):
            self.add(
                _Launch(
                    self.key,
                    "compute",
                    COMPUTE_STREAM,
                    33.1 * self.compute,
                    kn.ADAM,
                    cost_us=LAUNCH_US,
                )
            )
        self.program.append(_Sync(60.0))  # end-of-step logging
