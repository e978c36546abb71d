"""python -m tracecomm.synth OUT_DIR: write a synthetic run as Kineto trace files (or Nsight
Systems SQLite exports), with the problems a CI gate should catch as flags (a slower network, a
straggler, an overloaded pipeline stage, host-bound launches, data-loader stalls, clock offsets).

    python -m tracecomm.synth base/ --healthy
    python -m tracecomm.synth slow/ --healthy --slower-collective AllGather=8
    tracecomm check slow/ --baseline base/          # exit 1: exposed AllGather regressed

    # a straggler with its truth: the same job without the slow GPU beside it
    python -m tracecomm.synth job/ --family slow-worker --ranks 64 --counterfactual fixed/

    # expert parallelism: DeepEP all-to-alls hidden DualPipe-style, one rank getting 3x tokens
    python -m tracecomm.synth moe/ --layout moe --ep-comm deepep --overlap --imbalance 3

    # the same events as Nsight Systems SQLite exports, one per node
    python -m tracecomm.synth nsys/ --ranks 16 --format nsys --nsys-per-node
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from tracecomm.synth.dlrm import dlrm_run
from tracecomm.synth.dptp import dp_tp_run
from tracecomm.synth.family import DEFAULT_SLOWDOWN, member, names
from tracecomm.synth.fsdp import fsdp_run, fsdp_run_of_size
from tracecomm.synth.moe import moe_run
from tracecomm.synth.nsys import write_nsys_run
from tracecomm.synth.pp import dp_pp_run
from tracecomm.synth.schedule import COLL_TYPES, Naming, RunSpec
from tracecomm.synth.writer import write_run

HEALTHY_NETWORK = 0.2  # collectives 5x faster: each hides behind the layer computing beside it
_FSDP_ONLY = ("slower_network", "slower_collective", "host_bound", "loader_stall", "extra_kernel")
_A2A_LAYOUTS = ("moe", "dlrm")
_A2A_ONLY = ("overlap", "ep_comm", "imbalance", "metadata")  # moe, dlrm (overlap, ep_comm: moe)
_DEFAULT_LAYERS = 6


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m tracecomm.synth",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("out_dir", type=Path, metavar="OUT_DIR")
    layout = p.add_argument_group("layout")
    layout.add_argument(
        "--layout",
        choices=("fsdp", "dp-tp", "dp-pp", "moe", "dlrm"),
        default="fsdp",
        help="FSDP (default), data x tensor parallel, data x pipeline parallel (1F1B), "
        "mixture of experts with expert parallelism, or DLRM (embedding all-to-alls + DDP)",
    )
    layout.add_argument(
        "--ranks", type=int, default=8, help="world size for fsdp, moe and dlrm (default 8)"
    )
    layout.add_argument("--dp", type=int, default=2, help="data-parallel size (dp-tp, dp-pp)")
    layout.add_argument("--tp", type=int, default=4, help="tensor-parallel size (dp-tp)")
    layout.add_argument("--pp", type=int, default=4, help="pipeline stages (dp-pp)")
    layout.add_argument("--microbatches", type=int, default=8, help="per step (dp-pp)")
    p.add_argument("--steps", type=int, default=4, help="complete steps (default 4)")
    p.add_argument("--layers", type=int, help=f"default {_DEFAULT_LAYERS} (moe: 4; not for dlrm)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--naming",
        choices=("dev", "legacy"),
        help="NCCL kernel names: dev (default) or legacy (default for moe and dlrm)",
    )
    p.add_argument("--time-format", choices=("relative", "epoch_us"), default="relative")
    p.add_argument("--no-gzip", action="store_true")
    p.add_argument(
        "--size-mb",
        type=float,
        help="aim for this many MB per uncompressed rank file (fsdp; overrides --steps, --layers)",
    )
    p.add_argument("--force", action="store_true", help="write into a non-empty OUT_DIR")
    p.add_argument(
        "--format",
        choices=("kineto", "nsys"),
        default="kineto",
        help="kineto: rank<N>.pt.trace.json[.gz] (default); nsys: Nsight Systems SQLite "
        "exports (nsys export --type sqlite), rank<N>.sqlite",
    )
    p.add_argument(
        "--nsys-per-node",
        action="store_true",
        help="with --format nsys: one <host>.sqlite per host holding all its ranks' processes "
        "(one nsys profile of a torchrun node)",
    )
    p.add_argument(
        "--nsys-payloads",
        choices=("json", "blobs", "none"),
        default="json",
        help="with --format nsys: NCCL's NVTX payload values as exported with --include-json "
        "true (json, default), --include-blobs true (blobs), or neither (none)",
    )
    problems = p.add_argument_group("problems to generate")
    problems.add_argument(
        "--straggler",
        metavar="RANK[:SLOWDOWN]",
        help="this rank computes SLOWDOWN slower (0.06 = 6 %%); fsdp and dp-tp have one by "
        "default (rank (seed + 3) %% world, 6 %% for fsdp)",
    )
    problems.add_argument("--no-straggler", action="store_true", help="every rank on par")
    a2a = p.add_argument_group("all-to-all layouts (moe, dlrm)")
    a2a.add_argument(
        "--overlap",
        action="store_true",
        help="moe: two micro-batches interleaved, each one's all-to-alls beside the other's "
        "compute (DualPipe-style)",
    )
    a2a.add_argument(
        "--ep-comm",
        choices=("nccl", "deepep"),
        help="moe: NCCL all-to-alls (default) or DeepEP dispatch/combine kernels",
    )
    a2a.add_argument(
        "--imbalance",
        type=float,
        metavar="X",
        help="one rank (seed + 1) %% ranks gets X times the tokens (moe) or embedding work "
        "(dlrm) of the others (default 1)",
    )
    a2a.add_argument(
        "--metadata",
        action="store_true",
        help="NCCL all-to-alls carry collective metadata and split sizes (default: annotated "
        "without them, as older Kineto wrote them)",
    )
    problems.add_argument(
        "--healthy",
        action="store_true",
        help="a run with no problem to find, the base for a CI gate: every rank on par and, for "
        "fsdp, a network fast enough to hide the collectives (--slower-network 0.2) and a data "
        "loader that keeps ahead of the GPU (no synchronize at step end); the other flags add "
        "one problem to it",
    )
    problems.add_argument(
        "--slower-network",
        type=float,
        metavar="FACTOR",
        help="every collective takes FACTOR times as long (fsdp; below 1: a faster network)",
    )
    problems.add_argument(
        "--slower-collective",
        action="append",
        default=[],
        metavar="TYPE=FACTOR",
        help="one collective type takes FACTOR times as long, e.g. AllGather=1.5 (fsdp)",
    )
    problems.add_argument(
        "--extra-kernel",
        metavar="NAME=US[@WHERE]",
        help="one more compute kernel of US µs in every step, at WHERE: start, middle "
        "(default: between forward and backward) or end (fsdp): a change for compare",
    )
    problems.add_argument(
        "--imbalanced-stage",
        metavar="STAGE:FACTOR",
        help="that pipeline stage holds FACTOR times the layers of the others (dp-pp)",
    )
    problems.add_argument(
        "--host-bound",
        type=float,
        metavar="US",
        help="the CPU takes US µs per optimizer kernel launch: the GPU waits for it (fsdp)",
    )
    problems.add_argument(
        "--loader-stall",
        type=float,
        metavar="US",
        help="the data loader takes US µs at each step start, the GPU waiting for it (fsdp)",
    )
    family = p.add_argument_group(
        "the straggler family (tracecomm.synth.family): one known cause, and the job without it"
    )
    family.add_argument(
        "--family",
        choices=names(),
        help="write that member at --ranks ranks (8, 64, 512; the layout is the member's)",
    )
    family.add_argument(
        "--slowdown",
        type=float,
        default=DEFAULT_SLOWDOWN,
        help=f"how much slower the cause computes (default {DEFAULT_SLOWDOWN}: 2.2×)",
    )
    family.add_argument(
        "--counterfactual",
        type=Path,
        metavar="DIR",
        help="also write the same job without the cause into DIR: the what-if's truth",
    )
    problems.add_argument(
        "--clock-offsets",
        metavar="MS,MS,...",
        help="how far each host's clock runs ahead (ms; host h holds ranks 8h..8h+7)",
    )
    return p


def _straggler(args: argparse.Namespace) -> dict[str, Any]:
    if args.straggler is None and (args.no_straggler or args.healthy):
        return {"slowdown": 0.0}
    if args.straggler is None:
        return {}
    rank, _, slowdown = args.straggler.partition(":")
    return {"slow_rank": int(rank), "slowdown": float(slowdown) if slowdown else 0.06}


def _comm_slowdown(args: argparse.Namespace) -> dict[str, float] | None:
    out: dict[str, float] = {}
    network = args.slower_network
    if network is None and args.healthy:
        network = HEALTHY_NETWORK
    if network is not None:
        out = dict.fromkeys(sorted(COLL_TYPES), network - 1.0)
    for item in args.slower_collective:
        name, sep, factor = item.partition("=")
        if not sep or name not in COLL_TYPES:
            raise ValueError(
                f"--slower-collective {item!r}: TYPE=FACTOR, TYPE one of "
                f"{', '.join(sorted(COLL_TYPES))}"
            )
        out[name] = float(factor) - 1.0
    if any(f <= -1.0 for f in out.values()):
        raise ValueError("a collective cannot take zero time or less: FACTOR must be > 0")
    return out or None


def _extra_kernel(text: str) -> tuple[str, float, str]:
    name, sep, rest = text.rpartition("=")
    us, _, where = rest.partition("@")
    try:
        value = float(us)
    except ValueError:
        value = 0.0
    if not sep or not name or not value > 0:
        raise ValueError(f"--extra-kernel {text!r}: NAME=US[@start|middle|end], US > 0")
    return name, value, where or "middle"


def _offsets(args: argparse.Namespace) -> list[int] | None:
    if not args.clock_offsets:
        return None
    return [round(float(ms) * 1e6) for ms in args.clock_offsets.split(",") if ms.strip()]


def _used(args: argparse.Namespace, options: tuple[str, ...]) -> list[str]:
    """The options among these that the command line set (None, False, []: not set)."""
    return [f"--{n.replace('_', '-')}" for n in options if _is_set(getattr(args, n))]


def _is_set(value: object) -> bool:
    # `is`: an explicit 0 (--imbalance 0) is set, though it equals False
    return value is not None and value is not False and value != []


def _a2a_spec(args: argparse.Namespace) -> RunSpec:
    """moe or dlrm, after refusing what those layouts cannot make."""
    refused = _used(args, ("straggler", "no_straggler", "healthy", "imbalanced_stage"))
    refused += _used(args, ("size_mb", "clock_offsets"))
    if args.time_format != "relative":
        refused.append("--time-format epoch_us")
    if args.layout == "dlrm":
        refused += _used(args, ("layers", "overlap", "ep_comm"))
    if refused:
        raise ValueError(f"{', '.join(refused)}: not for the {args.layout} layout")
    common: dict[str, Any] = {
        "ranks": args.ranks,
        "steps": args.steps,
        "seed": args.seed,
        "metadata": args.metadata,
        "imbalance": 1.0 if args.imbalance is None else args.imbalance,
        "naming": args.naming or "legacy",
        "gzip": not args.no_gzip,
    }
    if args.layout == "dlrm":
        return dlrm_run(**common)
    layers = 4 if args.layers is None else args.layers
    return moe_run(layers=layers, overlap=args.overlap, comm=args.ep_comm or "nccl", **common)


def _spec(args: argparse.Namespace) -> RunSpec:
    gzip = not args.no_gzip
    if args.layout != "fsdp":
        used = _used(args, _FSDP_ONLY)
        if used:
            raise ValueError(f"{', '.join(used)}: fsdp layout only")
    if args.layout in _A2A_LAYOUTS:
        return _a2a_spec(args)
    used = _used(args, _A2A_ONLY)
    if used:
        raise ValueError(f"{', '.join(used)}: moe and dlrm layouts only")
    naming: Naming = args.naming or "dev"
    layers = _DEFAULT_LAYERS if args.layers is None else args.layers
    if args.layout == "dp-tp":
        return dp_tp_run(
            dp=args.dp,
            tp=args.tp,
            steps=args.steps,
            layers=layers,
            seed=args.seed,
            naming=naming,
            gzip=gzip,
            host_offsets_ns=_offsets(args),
            **_straggler(args),
        )
    if args.layout == "dp-pp":
        layers = [2] * args.pp
        if args.imbalanced_stage:
            stage, _, factor = args.imbalanced_stage.partition(":")
            layers[int(stage)] = max(1, round(2 * float(factor or 2)))
        kwargs = _straggler(args)
        return dp_pp_run(
            dp=args.dp,
            pp=args.pp,
            microbatches=args.microbatches,
            steps=args.steps,
            layers_per_stage=layers,
            seed=args.seed,
            naming=naming,
            gzip=gzip,
            host_offsets_ns=_offsets(args),
            **kwargs,
        )
    if args.imbalanced_stage:
        raise ValueError("--imbalanced-stage: dp-pp layout only")
    if args.size_mb is not None:
        return fsdp_run_of_size(args.size_mb, world_size=args.ranks, seed=args.seed, gzip=gzip)
    extra: dict[str, Any] = {}
    if args.host_bound is not None:
        extra["optimizer_launch_us"] = args.host_bound
    if args.loader_stall is not None or args.healthy:
        extra |= {"step_end_sync": False, "idle_detail": True}
    if args.loader_stall is not None:
        extra["dataloader_us"] = args.loader_stall
    if args.extra_kernel is not None:
        extra["extra_kernel"] = _extra_kernel(args.extra_kernel)
    return fsdp_run(
        world_size=args.ranks,
        steps=args.steps,
        layers=layers,
        seed=args.seed,
        naming=naming,
        time_format=args.time_format,
        gzip=gzip,
        comm_slowdown=_comm_slowdown(args),
        host_offsets_ns=_offsets(args),
        **_straggler(args),
        **extra,
    )


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    out: Path = args.out_dir
    if out.exists() and not out.is_dir():
        print(f"error: {out} exists and is not a directory", file=sys.stderr)
        return 2
    if out.exists() and any(out.iterdir()) and not args.force:
        print(f"error: {out} is not empty (use --force to write into it anyway)", file=sys.stderr)
        return 2
    twin_dir: Path | None = args.counterfactual
    if twin_dir is not None and args.family is None:
        print("error: --counterfactual needs --family", file=sys.stderr)
        return 2
    if twin_dir is not None and twin_dir.exists() and any(twin_dir.iterdir()) and not args.force:
        print(
            f"error: {twin_dir} is not empty (use --force to write into it anyway)", file=sys.stderr
        )
        return 2
    try:
        if args.family is not None:
            m = member(args.family, args.ranks, args.seed, args.slowdown)
            spec, twin = m.job, m.counterfactual
            print(f"{m.name}: {m.note}; the cause: ranks {list(m.cause)}", file=sys.stderr)
        else:
            spec, twin = _spec(args), None
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.nsys_per_node and args.format != "nsys":
        print("error: --nsys-per-node needs --format nsys", file=sys.stderr)
        return 2

    def write(run: RunSpec, where: Path) -> list[Path]:
        if args.format == "nsys":
            return write_nsys_run(
                run,
                where,
                per_node=args.nsys_per_node,
                seed=args.seed,
                payloads=args.nsys_payloads,
            )
        return write_run(run, where)

    written = write(spec, out)
    if twin is not None and twin_dir is not None:
        written += write(twin, twin_dir)
    for path in written:
        print(f"{path}  {path.stat().st_size} bytes", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
