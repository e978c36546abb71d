"""NCCL log of torn records: parse time and peak memory against log size (issue 48's bound:
linear time, bounded memory, on the parser's slowest path).

Writes logs of 64, 256 and 1024 MB (by default) in which every other line holds a record cut
by another process's whole record, its tail on the next line (the 16-rank COLL-only log of
the issue, every record torn: ``tear_rate`` 1), and parses each in a fresh process, so that the
peak RSS is that size's own. Prints seconds, s/GB and peak RSS per size, and their ratios to
the smallest: s/GB should stay flat (linear time). The parser keeps every COLL record as a
row of columns (about 90 bytes each), torn or not: the same log untorn is parsed beside it, so
that the RSS the torn records' handling adds is the difference.

    python bench/nccl_torn.py [--sizes 64 256 1024] [--out bench/out]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CHUNK_RECORDS = 3200 * 8  # records per generated chunk (8 of the logs, each seeded)


def write_log(path: Path, megabytes: int, tear_rate: float) -> None:
    """A log of the size asked: chunks of distinct seeds, repeated to fill it."""
    from tracecomm.synth.nccl_log import LogSpec, nccl_log

    chunks = [
        nccl_log(
            LogSpec(
                hosts=("n136-081-017",),
                ranks_per_host=16,
                versions=("2.21.5",),
                colls=CHUNK_RECORDS // 16 // 8,
                coll_only=True,
                noise=False,
                launcher_prefix=False,
                tear_rate=tear_rate,
                seed=seed,
            )
        )
        for seed in range(8)
    ]
    target = megabytes * 1_000_000
    written = 0
    with path.open("wb") as handle:
        while written < target:
            for chunk in chunks:
                handle.write(chunk)
                written += len(chunk)


def measure(path: Path) -> None:
    """Run in a fresh process: parse, then print seconds, peak RSS and the parser's counts."""
    from tracecomm.nccl.diagnose import summarize
    from tracecomm.nccl.parse import read_logs

    started = time.perf_counter()
    log = read_logs([path])
    summary = summarize(log)
    seconds = time.perf_counter() - started
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        json.dumps(
            {
                "seconds": seconds,
                "rss_mib": rss,
                "lines": log.lines,
                "colls": summary.colls,
                "torn": summary.torn_records,
                "recovered": summary.torn_recovered,
                "hosts": list(summary.hosts),
                "processes": summary.processes,
            }
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[64, 256, 1024], help="MB")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "out")
    parser.add_argument("--measure", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure is not None:
        measure(args.measure)
        return
    args.out.mkdir(parents=True, exist_ok=True)
    print(
        f"machine: {platform.machine()}, python {platform.python_version()}, {os.cpu_count()} CPUs"
    )
    print(
        f"{'MB':>6} {'lines':>11} {'torn':>10} {'seconds':>8} {'s/GB':>6} {'RSS MiB':>8} "
        f"{'× s/GB':>7} {'× RSS':>6} | untorn: {'s/GB':>6} {'RSS MiB':>8}"
    )
    first: tuple[float, float] | None = None
    for mb in args.sizes:
        torn, per_gb, rss = run(args.out, mb, 1.0)
        _, clean_per_gb, clean_rss = run(args.out, mb, 0.0)
        first = first or (per_gb, rss)
        print(
            f"{mb:6} {torn['lines']:11,} {torn['torn']:10,} {torn['seconds']:8.1f} "
            f"{per_gb:6.1f} {rss:8.0f} {per_gb / first[0]:7.2f} {rss / first[1]:6.2f} | "
            f"        {clean_per_gb:6.1f} {clean_rss:8.0f}",
            flush=True,
        )


def run(out: Path, mb: int, tear_rate: float) -> tuple[dict[str, Any], float, float]:
    """Parse the log of this size and rate in a fresh process: its figures, s/GB, RSS."""
    path = out / f"nccl-{'torn' if tear_rate else 'untorn'}-{mb}mb.log"
    if not path.exists():
        write_log(path, mb, tear_rate)
    done = subprocess.run(
        [sys.executable, __file__, "--measure", str(path)],
        capture_output=True,
        text=True,
        check=True,
    )
    r = json.loads(done.stdout)
    assert r["hosts"] == ["n136-081-017"] and r["processes"] == 16, r
    assert r["torn"] == r["recovered"], r
    return r, r["seconds"] / (path.stat().st_size / 1e9), r["rss_mib"]


if __name__ == "__main__":
    main()
