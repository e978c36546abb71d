"""python -m tracecomm.synth OUT_DIR: write a synthetic FSDP run as Kineto trace files."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tracecomm.synth.fsdp import fsdp_run, fsdp_run_of_size
from tracecomm.synth.schedule import RunSpec
from tracecomm.synth.writer import write_run


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m tracecomm.synth", description=__doc__)
    p.add_argument("out_dir", type=Path, metavar="OUT_DIR")
    p.add_argument("--ranks", type=int, default=8, help="world size (one file per rank)")
    p.add_argument(
        "--steps", type=int, default=4, help="complete steps (one incomplete step follows)"
    )
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--naming", choices=("dev", "legacy"), default="dev")
    p.add_argument("--time-format", choices=("relative", "epoch_us"), default="relative")
    p.add_argument("--no-gzip", action="store_true")
    p.add_argument(
        "--size-mb",
        type=float,
        help="aim for this many MB per uncompressed rank file (overrides --steps and --layers)",
    )
    p.add_argument("--force", action="store_true", help="write into a non-empty OUT_DIR")
    return p


def _spec(args: argparse.Namespace) -> RunSpec:
    gzip = not args.no_gzip
    if args.size_mb is not None:
        return fsdp_run_of_size(args.size_mb, world_size=args.ranks, seed=args.seed, gzip=gzip)
    return fsdp_run(
        world_size=args.ranks,
        steps=args.steps,
        layers=args.layers,
        seed=args.seed,
        naming=args.naming,
        time_format=args.time_format,
        gzip=gzip,
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
    try:
        spec = _spec(args)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for path in write_run(spec, out):
        print(f"{path}  {path.stat().st_size} bytes", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
