"""Time and memory in step with the ranks (issue 47, item 5): generated FSDP runs at several
world sizes, ``tracecomm analyze RUN -f json`` end to end in a fresh process, wall and CPU time
and the peak RSS of the largest process (the client or a worker), rounds interleaved.

    python bench/rank_scale.py --sizes 256,512,1024,2048 --work /tmp/scale --rounds 2
    python bench/rank_scale.py --sizes 256,1024 --before ../wt-before   # another tree beside

A run's JSON per rank grows with its world size (each collective spells out its group's
ranks): the table gives the GB of JSON so that time per GB can be read beside time per rank.
With ``--before``, both trees analyze the same runs in turn and their JSON must be the same.
"""

from __future__ import annotations

import argparse
import gzip
import os
import statistics
import subprocess
import sys
from pathlib import Path

from _bytecode import compile_tracecomm

ROOT = Path(__file__).resolve().parent.parent


def generate(out: Path, ranks: int) -> Path:
    run = out / f"fsdp-{ranks}"
    if not (run / f"rank{ranks - 1}.pt.trace.json.gz").is_file():
        subprocess.run(
            [sys.executable, "-m", "tracecomm.synth", str(run), "--ranks", str(ranks), "--force"],
            check=True,
            capture_output=True,  # the generator lists every file it writes
        )
    return run


def json_gb(run: Path) -> float:
    files = sorted(run.glob("rank*.pt.trace.json.gz"))
    sample = files[: min(8, len(files))]
    per = statistics.mean(len(gzip.decompress(f.read_bytes())) for f in sample)
    return per * len(files) / 1e9


_MEASURE = """
import os, resource, subprocess, sys, time
with open(os.environ["RANK_SCALE_OUT"], "wb") as out:
    t = time.perf_counter()
    code = subprocess.run(sys.argv[1:], stdout=out).returncode
wall = time.perf_counter() - t
u = resource.getrusage(resource.RUSAGE_CHILDREN)  # the largest of the descendants
print(code, wall, u.ru_utime + u.ru_stime, u.ru_maxrss / 1024)
"""


def analyze(tree: Path, run: Path, out: Path) -> tuple[float, float, float]:
    """(wall s, CPU s, peak RSS MiB of the largest process) of one fresh command, its JSON
    written to ``out``."""
    env = {**os.environ, "PYTHONPATH": str(tree), "RANK_SCALE_OUT": str(out)}
    cmd = [sys.executable, "-m", "tracecomm", "analyze", str(run), "-f", "json", "-q"]
    done = subprocess.run(  # in the tree: ``-m`` puts the working folder first on the path
        [sys.executable, "-c", _MEASURE, *cmd],
        env=env,
        cwd=tree,
        capture_output=True,
        text=True,
        check=True,
    )
    code, wall, cpu, rss = done.stdout.split()
    if code != "0":
        raise SystemExit(f"analyze {run} in {tree}: exit {code}")
    return float(wall), float(cpu), float(rss)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="256,512,1024")
    p.add_argument("--work", type=Path, default=Path("/tmp/tracecomm-rank-scale"))
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--before", type=Path, help="another tree to run beside this one")
    args = p.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    args.work = args.work.resolve()  # the commands run in each tree
    args.work.mkdir(parents=True, exist_ok=True)
    trees = {"now": ROOT} | ({"before": args.before.resolve()} if args.before else {})
    for tree in trees.values():  # timed as installed: compiled (``_bytecode``)
        compile_tracecomm(tree / "tracecomm")
    runs = {n: generate(args.work, n) for n in sizes}
    seen: dict[tuple[str, int], list[tuple[float, float, float]]] = {}
    for _ in range(args.rounds):
        for n, run in runs.items():
            for name, tree in trees.items():
                out = args.work / f"{name}-{n}.json"
                seen.setdefault((name, n), []).append(analyze(tree, run, out))
            if args.before:
                same = (args.work / f"now-{n}.json").read_bytes() == (
                    args.work / f"before-{n}.json"
                ).read_bytes()
                print(f"{n} ranks: the JSON is {'the same' if same else 'DIFFERENT'}")
    print(f"\nmachine: {os.cpu_count()} CPUs; medians of {args.rounds} round(s)\n")
    print("| tree | ranks | JSON GB | wall s | CPU s | peak RSS MiB | wall ÷ smallest |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name in trees:
        base = statistics.median(w for w, _, _ in seen[(name, sizes[0])])
        for n, run in runs.items():
            rows = seen[(name, n)]
            wall = statistics.median(r[0] for r in rows)
            cpu = statistics.median(r[1] for r in rows)
            rss = max(r[2] for r in rows)
            print(
                f"| {name} | {n:,} | {json_gb(run):.2f} | {wall:.1f} | {cpu:.1f} | {rss:,.0f} "
                f"| {wall / base:.2f} |"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
