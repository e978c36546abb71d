"""What the all-to-all families (moe.py, dlrm.py) share: token routing with one hot rank, the
split sizes it gives each rank, and fsdp.py's simulation with per-rank op fields.

Routing: every rank sends ``rows[p]`` rows to each member p (``rows[hot]`` is ``imbalance``
times the others'), so p receives ``n * rows[p]``. A "dispatch" moves rows that way; a
"combine" moves them back (rank r returns ``rows[r]`` rows to every member).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Literal

from tracecomm.synth.fsdp import (
    COMPUTE_STREAM,
    JITTER,
    _extras,
    _host_truth,
    _Instr,
    _Launch,
    _RankSim,
    _run_program,
    _Topology,
)
from tracecomm.synth.ops import ROW_ELEMS
from tracecomm.synth.schedule import Naming, ProcessGroup, RankSpec, RunSpec

Direction = Literal["dispatch", "combine"]
A2A_COST_US = 31.0  # CPU time of one collective launch


def routing(ranks: int, base: int, imbalance: float, hot: int) -> tuple[int, ...]:
    """Rows every rank sends to each member: ``base``, the hot rank ``round(imbalance*base)``."""
    if imbalance < 1.0:
        raise ValueError(f"imbalance must be >= 1, got {imbalance}")
    if not 0 <= hot < ranks:
        raise ValueError(f"hot rank {hot} is not in [0, {ranks})")
    if base < 1:
        raise ValueError("too few tokens: each rank must send at least one row to each member")
    return tuple(round(imbalance * base) if p == hot else base for p in range(ranks))


def splits(
    rows: tuple[int, ...], rank: int, direction: Direction
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(in_splits, out_splits) of rank: rows it sends to / receives from each member."""
    mine = (rows[rank],) * len(rows)
    return (rows, mine) if direction == "dispatch" else (mine, rows)


def transfer_factor(rows: tuple[int, ...]) -> float:
    """How much longer than balanced an all-to-all takes: the busiest rank's volume (sent or
    received, the same in both directions) over the mean received."""
    n = len(rows)
    mean = sum(rows)  # every rank receives n * rows[p]; their mean is sum(rows)
    return max(max(rows) * n, mean) / mean


@dataclass
class A2aProgram:
    """Appends a program's instructions; remembers what the simulation adds per rank."""

    rows: tuple[int, ...]
    metadata: bool  # NCCL all-to-alls carry collective metadata and split sizes
    program: list[_Instr] = field(default_factory=list)
    next_key: int = 0
    directions: dict[int, Direction] = field(default_factory=dict)
    fields: dict[int, dict[str, Any]] = field(default_factory=dict)  # key -> Op fields
    heavy: set[int] = field(default_factory=set)  # compute the hot rank does imbalance× of

    def add(self, launch: _Launch, **op_fields: Any) -> int:
        self.program.append(launch)
        self.next_key += 1
        if op_fields:
            self.fields[launch.key] = op_fields
        return launch.key

    def kernels(
        self,
        pattern: tuple[tuple[str, float], ...],
        thread: str,
        deps: tuple[int, ...],
        scale: float = 1.0,
        heavy: bool = False,
        stream: int = COMPUTE_STREAM,
    ) -> int:
        """Compute kernels in order, the first waiting for deps; the last one's key."""
        last = -1
        for i, (name, dur) in enumerate(pattern):
            launch = _Launch(
                self.next_key,
                "compute",
                stream,
                dur * scale,
                name,
                thread=thread,
                deps=deps if i == 0 else (),
            )
            last = self.add(launch)
            if heavy:
                self.heavy.add(last)
        return last

    def nccl_a2a(
        self,
        direction: Direction,
        dur_us: float,
        stream: int,
        thread: str,
        deps: tuple[int, ...],
        group: str = "",
        outer: str = "",
    ) -> int:
        """One NCCL all-to-all: metadata and split sizes, or annotated without them."""
        launch = _Launch(
            self.next_key,
            "comm",
            stream,
            dur_us,
            "",
            "AllToAll",
            sum(self.rows) * ROW_ELEMS,
            thread,
            deps,
            cost_us=A2A_COST_US,
            group=group,
        )
        key = self.add(launch, metadata=self.metadata, annotated=not self.metadata, outer=outer)
        self.directions[key] = direction
        return key

    def op_fields(self, key: int, rank: int) -> dict[str, Any]:
        """The Op fields rank's op of launch key gets beyond what fsdp's simulation sets."""
        out = dict(self.fields.get(key, {}))
        direction = self.directions.get(key)
        if direction is not None and self.metadata:
            ins, outs = splits(self.rows, rank, direction)
            out |= {"in_splits": ins, "out_splits": outs, "nelems": sum(ins) * ROW_ELEMS}
        return out


class _A2aSim(_RankSim):
    """fsdp's rank simulation, giving each op the fields its program asks for that rank."""

    def __init__(self, rank: int, seed: int, jitter: float, program: A2aProgram) -> None:
        super().__init__(rank, seed, 1.0, False, None, jitter)
        self.extra = program

    def finish(
        self, launch: _Launch, at: int, start: int, end: int, pg: str = "", seq: int = 0
    ) -> None:
        super().finish(launch, at, start, end, pg, seq)
        more = self.extra.op_fields(launch.key, self.rank)
        if more:
            self.ops[-1] = replace(self.ops[-1], **more)


def simulate(
    built: A2aProgram,
    ranks: int,
    topo: _Topology,
    hot: int,
    imbalance: float,
    seed: int,
    jitter: float = JITTER,
) -> list[_RankSim]:
    """Run the program on every rank; the hot rank's heavy compute takes imbalance× as long."""
    sims: list[_RankSim] = [_A2aSim(r, seed, jitter, built) for r in range(ranks)]
    factors = [imbalance if r == hot else 1.0 for r in range(ranks)]
    for instr in built.program:
        if isinstance(instr, _Launch) and instr.key in built.heavy:
            timing = [sim.ready(instr) for sim in sims]
            for sim, factor, (at, start) in zip(sims, factors, timing, strict=True):
                sim.finish(instr, at, start, start + sim.ns(instr.dur_us * factor))
        else:
            _run_program([instr], sims, topo)
    return sims


def run_spec(
    sims: list[_RankSim],
    naming: Naming,
    gzip: bool,
    groups: tuple[ProcessGroup, ...] = (),
) -> RunSpec:
    """The RunSpec of simulated ranks (with fsdp's extra ops outside the steps)."""
    ranks = tuple(
        RankSpec(sim.rank, tuple(sim.steps), _extras(sim), f"node{sim.rank // 8}", naming)
        for sim in sims
    )
    return RunSpec(len(sims), ranks, gzip, groups=groups, host_offsets_ns=_host_truth(sims))
