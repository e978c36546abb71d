"""Runs to compare (``tracecomm compare``, metrics.md §18): one FSDP model at several world
sizes, and a before/after pair in which one collective got slower, with what the comparison
must find, from the schedule alone.

``python -m tracecomm.synth.series OUT --sizes 8,16,32,64`` writes ``OUT/n8`` … ``OUT/n64``;
``--slowed ReduceScatter=2 --sizes 16`` writes ``OUT/before`` and ``OUT/after`` (the slowed
type's latency and bandwidth both ``FACTOR`` times worse).

The expected figures use ``synth.expected`` (plain interval lists), never the engine: the
**typical step** of a run is, on every rank (the ranks of these runs are alike, which
``typical`` checks), the step among the steps step time is taken over (the complete steps, the
first dropped when there are more than two) whose window is the lower median, ties to the lower
step number.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tracecomm.synth.expected import Figures, expected_figures, is_complete, step_window
from tracecomm.synth.names import comm_type
from tracecomm.synth.scaling import Network, scaling_run
from tracecomm.synth.schedule import COLL_TYPES, CollType, RunSpec

LATENCY_BOUND = Network(alpha_us=20.0, bus_gbps=200.0)


def scaling_series(
    sizes: Sequence[int],
    network: Network = LATENCY_BOUND,
    base_world: int = 64,
    weak: bool = False,
    layers: int = 6,
    steps: int = 3,
) -> dict[int, RunSpec]:
    """The same model at each world size (strong scaling unless ``weak``)."""
    return {
        n: scaling_run(n, network, base_world=base_world, weak=weak, layers=layers, steps=steps)
        for n in sizes
    }


def slowed_network(network: Network, factor: float) -> Network:
    """``factor`` times the latency and ``1 / factor`` the bandwidth: every message takes
    ``factor`` times as long."""
    if not factor > 0:
        raise ValueError("the slow-down factor must be positive")
    return Network(alpha_us=network.alpha_us * factor, bus_gbps=network.bus_gbps / factor)


def before_after(
    world_size: int,
    slowed: CollType,
    factor: float = 2.0,
    network: Network = LATENCY_BOUND,
    base_world: int = 64,
    layers: int = 6,
    steps: int = 3,
) -> tuple[RunSpec, RunSpec]:
    """Two runs of one model at one size; in the second, collectives of type ``slowed`` take
    ``factor`` times as long. Nothing else changes."""
    before = scaling_run(world_size, network, base_world=base_world, layers=layers, steps=steps)
    after = scaling_run(
        world_size,
        network,
        base_world=base_world,
        layers=layers,
        steps=steps,
        networks={slowed: slowed_network(network, factor)},
    )
    return before, after


@dataclass(frozen=True)
class TypicalStep:
    """The typical step's partition (metrics.md §3 and §18), and each collective type's kernel
    time and calls per step and rank over the steps step time is taken over."""

    step: int
    window_ns: int
    compute_ns: int
    exposed_comm_ns: int
    exposed_memory_ns: int
    idle_ns: int
    exposed_by_type_ns: dict[str, int]
    kernel_ns_per_step: dict[str, float]  # sum of the type's kernel durations, mean over steps
    calls_per_step: dict[str, float]


@dataclass(frozen=True)
class Deltas:
    """What the comparison of ``after`` against ``before`` must find (after − before)."""

    step_ns: int
    compute_ns: int
    exposed_comm_ns: int
    exposed_memory_ns: int
    idle_ns: int
    exposed_by_type_ns: dict[str, int]
    kernel_ns_per_step: dict[str, float]
    most_changed_type: str  # the collective type whose kernel time per step changed most


def rate_steps(spec: RunSpec) -> tuple[int, ...]:
    """The steps step time is taken over: the complete ones, the first dropped past two."""
    first = spec.ranks[0]
    complete = [s.number for s in first.steps if is_complete(s)]
    return tuple(complete[1:] if len(complete) > 2 else complete)


def typical(spec: RunSpec, steps: Sequence[int] | None = None) -> TypicalStep:
    """The typical step of ``spec`` among ``steps`` (default: its own ``rate_steps``)."""
    chosen = tuple(steps) if steps is not None else rate_steps(spec)
    found = [_typical_of_rank(spec, r, chosen) for r in range(len(spec.ranks))]
    if len({_key(t) for t in found}) != 1:
        raise ValueError("the ranks of this run differ: no one typical step")
    return found[0]


def deltas(before: TypicalStep, after: TypicalStep) -> Deltas:
    types = sorted(set(before.exposed_by_type_ns) | set(after.exposed_by_type_ns))
    kernel_types = sorted(set(before.kernel_ns_per_step) | set(after.kernel_ns_per_step))
    kernel = {
        t: after.kernel_ns_per_step.get(t, 0.0) - before.kernel_ns_per_step.get(t, 0.0)
        for t in kernel_types
    }
    return Deltas(
        step_ns=after.window_ns - before.window_ns,
        compute_ns=after.compute_ns - before.compute_ns,
        exposed_comm_ns=after.exposed_comm_ns - before.exposed_comm_ns,
        exposed_memory_ns=after.exposed_memory_ns - before.exposed_memory_ns,
        idle_ns=after.idle_ns - before.idle_ns,
        exposed_by_type_ns={
            t: after.exposed_by_type_ns.get(t, 0) - before.exposed_by_type_ns.get(t, 0)
            for t in types
        },
        kernel_ns_per_step=kernel,
        most_changed_type=max(kernel_types, key=lambda t: (abs(kernel[t]), t)),
    )


def _key(t: TypicalStep) -> tuple[object, ...]:
    return (
        t.step,
        t.window_ns,
        t.compute_ns,
        t.exposed_comm_ns,
        t.exposed_memory_ns,
        t.idle_ns,
        tuple(sorted(t.exposed_by_type_ns.items())),
        tuple(sorted(t.kernel_ns_per_step.items())),
    )


def _typical_of_rank(spec: RunSpec, index: int, steps: tuple[int, ...]) -> TypicalStep:
    rank = spec.ranks[index]
    expected = expected_figures(rank)
    candidates = sorted((expected.steps[n].window_ns, n) for n in steps if n in expected.steps)
    if not candidates:
        raise ValueError(f"rank {rank.rank} has none of the steps {steps}")
    _, number = candidates[(len(candidates) - 1) // 2]
    f: Figures = expected.steps[number]
    kernel: dict[str, float] = {}
    calls: dict[str, float] = {}
    used = [s for s in rank.steps if s.number in steps and is_complete(s)]
    for step in used:
        if step_window(step) is None:
            continue
        for op in step.ops:
            if op.kind == "comm" and op.recorded and op.launched:
                coll = comm_type(op, rank.naming)
                kernel[coll] = kernel.get(coll, 0.0) + op.dur_ns / len(used)
                calls[coll] = calls.get(coll, 0.0) + 1 / len(used)
    return TypicalStep(
        step=number,
        window_ns=f.window_ns,
        compute_ns=f.compute_ns,
        exposed_comm_ns=f.exposed_comm_ns,
        exposed_memory_ns=f.exposed_memory_ns,
        idle_ns=f.idle_ns,
        exposed_by_type_ns={t: exposed for t, (_, exposed) in f.by_type.items()},
        kernel_ns_per_step=kernel,
        calls_per_step=calls,
    )


def write_series(out: Path, specs: Mapping[str, RunSpec]) -> list[Path]:
    from tracecomm.synth.writer import write_run

    folders = []
    for name, spec in specs.items():
        write_run(spec, out / name)
        folders.append(out / name)
    return folders


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m tracecomm.synth.series", description=__doc__)
    p.add_argument("out_dir", type=Path, metavar="OUT_DIR")
    p.add_argument("--sizes", default="8,16,32,64", help="world sizes, e.g. 8,16,32,64")
    p.add_argument(
        "--slowed",
        metavar="TYPE[=FACTOR]",
        help="write OUT/before and OUT/after at the first size, TYPE FACTOR (default 2) times "
        "slower in the second",
    )
    p.add_argument("--alpha-us", type=float, default=LATENCY_BOUND.alpha_us)
    p.add_argument("--bus-gbps", type=float, default=LATENCY_BOUND.bus_gbps)
    p.add_argument("--weak", action="store_true", help="keep the per-rank batch")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--layers", type=int, default=6)
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        sizes = [int(x) for x in args.sizes.split(",") if x.strip()]
        network = Network(args.alpha_us, args.bus_gbps)
        specs: dict[str, RunSpec]
        if args.slowed:
            name, _, factor = args.slowed.partition("=")
            if name not in COLL_TYPES:
                raise ValueError(f"--slowed {name!r}: one of {', '.join(sorted(COLL_TYPES))}")
            before, after = before_after(
                sizes[0],
                name,
                float(factor or 2.0),
                network,
                layers=args.layers,
                steps=args.steps,
            )
            specs = {"before": before, "after": after}
        else:
            series = scaling_series(
                sizes, network, weak=args.weak, layers=args.layers, steps=args.steps
            )
            specs = {f"n{n}": spec for n, spec in series.items()}
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    out: Path = args.out_dir
    if out.exists() and any(out.iterdir()):
        print(f"error: {out} is not empty", file=sys.stderr)
        return 2
    for folder in write_series(out, specs):
        print(folder, file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
