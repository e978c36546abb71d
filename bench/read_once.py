"""Each rank read once (issue 44): what ``report`` (the HTML page and its timeline), ``project``
and ``export`` cost now that what their views need is taken in the first pass, against the
same commands of a tree from before (a git worktree) and against ``gzip -dc`` of the run's
files, all measured in turn in the same minutes.

    git worktree add --detach ../wt-before 604cae7      # the tree to compare with
    python bench/read_once.py --before ../wt-before [--run RUN] [--mb-per-rank 200 --ranks 8]
        [--rounds 3] [--markdown]

Without ``--run`` it generates (once, under bench/out) an FSDP-style run of ``--ranks`` ranks of
``--mb-per-rank`` MB each. Each round runs every command in both trees (in turn) and the
baseline; the table gives medians of wall time, CPU time (user + sys of the command and its
children) and the peak RSS of its largest process. The outputs of the two trees must be the
same (the script checks, and exits 1 if not): the JSON documents apart from what issue 44
added to them (``NEW_KEYS``), the exported trace byte for byte; the HTML page embeds the new
document, so it is not compared (its timeline is the JSON's ``timeline``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COMMANDS = {
    "analyze -f json": ["analyze", "{run}", "-f", "json"],
    "report -o page.html": ["report", "{run}", "-o", "{out}/page.html"],
    "project -f json": ["project", "{run}", "-f", "json"],
    "export -o trace.json": ["export", "{run}", "-o", "{out}/trace.json"],
}


NEW_KEYS = ("schema_version", "projection_basis", "collective_steps", "read_from")


def comparable(name: str, stdout: bytes, written: list[Path]) -> bytes:
    """What the two trees must agree on, for one command's outputs."""
    if name.startswith("report"):
        return b""
    if name.startswith(("analyze", "project")):
        doc = json.loads(stdout)
        return json.dumps({k: v for k, v in doc.items() if k not in NEW_KEYS}).encode()
    return stdout + b"".join(p.read_bytes() for p in written)


def generated(ranks: int, mb: float) -> Path:
    from tracecomm.synth import fsdp_run_of_size, write_run

    run = ROOT / "bench" / "out" / f"read-once-{ranks}x{mb:g}mb-gz"
    if not run.is_dir():
        write_run(fsdp_run_of_size(mb, world_size=ranks, seed=0, gzip=True), run)
    return run


def timed(argv: list[str], cwd: Path, stdout: Path) -> tuple[float, float, int]:
    """(wall s, CPU s, peak RSS in KiB) of one command: ``wait4``'s usage of that child, which
    counts the children it waited for (its pool's workers) in the CPU time and the largest
    of them in the peak."""
    started = time.perf_counter()
    with stdout.open("wb") as out:
        child = subprocess.Popen(argv, cwd=cwd, stdout=out, stderr=subprocess.DEVNULL)
        _, status, usage = os.wait4(child.pid, 0)
        child.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - started
    if child.returncode not in (0, 4):
        sys.exit(f"{' '.join(argv)} in {cwd}: exit {child.returncode}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss


def gunzip_all(run: Path) -> float:
    files = sorted(p for p in run.iterdir() if p.is_file() and "json" in p.name)
    started = time.perf_counter()
    for f in files:
        reader = ["gzip", "-dc", str(f)] if f.suffix == ".gz" else ["cat", str(f)]
        subprocess.run(reader, stdout=subprocess.DEVNULL, check=True)
    return time.perf_counter() - started


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", type=Path, required=True, help="a worktree of the older tree")
    ap.add_argument("--run", type=Path, help="a run folder (default: a generated one)")
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--mb-per-rank", type=float, default=200)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--commands", default=",".join(COMMANDS), help="names from the table")
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()
    run = (args.run or generated(args.ranks, args.mb_per_rank)).resolve()
    trees = {"before": args.before.resolve(), "now": ROOT}
    names = [n.strip() for n in args.commands.split(",")]
    rows: dict[tuple[str, str], list[tuple[float, float, int]]] = {}
    baseline: list[float] = []
    same = True
    with tempfile.TemporaryDirectory(prefix="tracecomm-read-once-") as tmp:
        for _ in range(args.rounds):
            baseline.append(gunzip_all(run))
            for name in names:
                outputs = {}
                for label, tree in trees.items():
                    out = Path(tmp) / label
                    out.mkdir(exist_ok=True)
                    argv = [sys.executable, "-m", "tracecomm"] + [
                        a.format(run=run, out=out) for a in COMMANDS[name]
                    ]
                    stdout = out / "stdout"
                    rows.setdefault((name, label), []).append(timed(argv, tree, stdout))
                    written = [p for p in sorted(out.iterdir()) if p.name != "stdout"]
                    outputs[label] = comparable(name, stdout.read_bytes(), written)
                    for p in written:
                        p.unlink() if p.is_file() else shutil.rmtree(p)
                if outputs["before"] != outputs["now"]:
                    same = False
                    print(f"{name}: the two trees' outputs differ", file=sys.stderr)
    base = statistics.median(baseline)
    head = f"| command | tree | wall s | CPU s | peak RSS MiB | × `gzip -dc` ({base:.2f} s) |"
    print(f"run: {run} ({_size_mb(run):.0f} MB on disk), {args.rounds} rounds, medians")
    print(head if args.markdown else head.replace("|", " "))
    if args.markdown:
        print("|---|---|---:|---:|---:|---:|")
    for (name, label), got in rows.items():
        wall = statistics.median(g[0] for g in got)
        cpu = statistics.median(g[1] for g in got)
        rss = statistics.median(g[2] for g in got) / 1024
        line = f"| {name} | {label} | {wall:.2f} | {cpu:.2f} | {rss:.0f} | {wall / base:.2f} |"
        print(line if args.markdown else line.replace("|", " "))
    print("the same output in both trees" if same else "OUTPUTS DIFFER")
    sys.exit(0 if same else 1)


def _size_mb(run: Path) -> float:
    return sum(p.stat().st_size for p in run.iterdir() if p.is_file()) / 1e6


if __name__ == "__main__":
    os.environ.setdefault("COLUMNS", "140")
    main()
