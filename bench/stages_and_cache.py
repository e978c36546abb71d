"""Where the time of one `analyze` goes (parse, engine, cross-rank and report, render), and
what `--cache` saves on a repeat run — issue 8's profile-guided pass and repeat-run target.

    python bench/stages_and_cache.py [--ranks 8] [--mb-per-rank 20] [--out bench/out]

Generates (once) an FSDP-style run with the ground-truth generator, then, in this process:
times each stage over every rank, and runs `tracecomm analyze --format json` three times as
subprocesses: without a cache, filling a cache, and from the cache. The figures of the three
runs must be identical, and identical to a fourth with `--jobs 1` (the script checks, says so,
and exits 1 if not).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tracecomm.analysis.build import build_report
from tracecomm.analysis.model import RankResult, RunData
from tracecomm.analysis.options import AnalysisOptions
from tracecomm.engine import BreakdownOptions, breakdown
from tracecomm.ingest import find_traces, load_rank
from tracecomm.render import View
from tracecomm.render.formats import render_json
from tracecomm.run.request import Request
from tracecomm.run.worker import RankWork, analyze_file
from tracecomm.synth import fsdp_run_of_size, write_run

ROOT = Path(__file__).resolve().parents[1]


def stages(run: Path) -> dict[str, float]:
    paths = [str(p) for p in find_traces([run])]
    out = {"parse (load_rank)": 0.0, "engine (breakdown)": 0.0}
    work = RankWork(BreakdownOptions(), Request(()).read)
    for path in paths:
        started = time.perf_counter()
        events = load_rank(path, work.read)
        parsed = time.perf_counter()
        breakdown(events)
        out["parse (load_rank)"] += parsed - started
        out["engine (breakdown)"] += time.perf_counter() - parsed
    results = [r for p in paths for r in analyze_file(p, work) if isinstance(r, RankResult)]
    started = time.perf_counter()
    report = build_report(RunData(tuple(results), (), (str(run),), {}), AnalysisOptions())
    out["cross-rank, stragglers, report"] = time.perf_counter() - started
    started = time.perf_counter()
    render_json(report, View())
    out["render (JSON)"] = time.perf_counter() - started
    return out


def timed_analyze(run: Path, *extra: str) -> tuple[float, dict[str, object]]:
    started = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-m", "tracecomm.cli", "analyze", str(run), "-f", "json", "-q", *extra],
        capture_output=True,
        check=False,
    )
    seconds = time.perf_counter() - started
    if result.returncode not in (0, 4):
        raise SystemExit(result.stderr.decode())
    doc = json.loads(result.stdout)
    doc.pop("options", None)
    return seconds, doc


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--mb-per-rank", type=float, default=20.0)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "out")
    args = parser.parse_args()
    run = args.out / f"stages-{args.mb_per_rank:g}mb-{args.ranks}ranks"
    if not run.exists():
        write_run(fsdp_run_of_size(args.mb_per_rank, world_size=args.ranks), run)
    mb = sum(p.stat().st_size for p in run.iterdir()) / 1e6
    print(
        f"machine: {platform.machine()}, python {platform.python_version()}, {os.cpu_count()} CPUs"
    )
    print(f"run: {run} ({args.ranks} ranks, {mb:.0f} MB of JSON)")
    times = stages(run)
    total = sum(times.values())
    print(f"{'stage (one process)':34} {'seconds':>8} {'share':>7}")
    for name, seconds in times.items():
        print(f"{name:34} {seconds:8.2f} {100 * seconds / total:6.1f}%")
    cache = Path(tempfile.mkdtemp(prefix="tracecomm-cache-"))
    try:
        cold, doc = timed_analyze(run)
        fill, doc_fill = timed_analyze(run, "--cache", str(cache))
        warm, doc_warm = timed_analyze(run, "--cache", str(cache))
        one, doc_one = timed_analyze(run, "--jobs", "1")
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    print(f"{'analyze (subprocess, own pool)':34} {'seconds':>8} {'÷ cold':>7}")
    for name, seconds in (
        ("no cache", cold),
        ("--cache, filling", fill),
        ("--cache, warm", warm),
        ("no cache, --jobs 1", one),
    ):
        print(f"{name:34} {seconds:8.2f} {seconds / cold:7.2f}")
    same = doc == doc_fill == doc_warm
    print("figures identical with and without the cache:", "yes" if same else "NO")
    same_jobs = doc == doc_one
    print("figures identical with --jobs 1 and the default pool:", "yes" if same_jobs else "NO")
    if not same or not same_jobs:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
