"""NCCL log parse throughput (issue 6's target: 100 MB/s of log text or more per process).

Generates (once) a multi-host NCCL_DEBUG=INFO log with the COLL subsystem on (the heavy case:
one line per collective per rank) and parses it in this process, printing MB/s and the ratio
to two baselines measured in the same run: ``grep -c 'NCCL INFO'`` over the file and a plain
Python read + decode + line split of it.

    python bench/nccl_parse.py [--hosts 8] [--colls 4000] [--tear-rate 0.01] [--repeat 3]
        [--out bench/out]

``--tear-rate`` tears that share of the records as processes sharing one stdout do (the
generator's ``LogSpec.tear_rate``; bench/nccl_torn.py measures the all-torn case by size).
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from tracecomm.nccl.diagnose import summarize
from tracecomm.nccl.parse import read_logs
from tracecomm.synth.nccl_log import LogSpec, nccl_log

ROOT = Path(__file__).resolve().parents[1]


def best(run: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return min(times)


def python_read(path: Path) -> int:
    with path.open("rb") as handle:
        return len(handle.read().decode("utf-8", "replace").split("\n"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=8)
    parser.add_argument("--colls", type=int, default=4000, help="COLL lines per rank")
    parser.add_argument(
        "--tear-rate", type=float, default=0.0, help="share of records torn (0 to 1)"
    )
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "out")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    spec = LogSpec(
        hosts=tuple(f"gpu-{h:03d}" for h in range(args.hosts)),
        ranks_per_host=8,
        versions=("2.24.3",) * args.hosts,
        socket_hosts=frozenset({"gpu-001"}) if args.hosts > 1 else frozenset(),
        warn_rank=3,
        timeout_seq=1234,
        absent_rank=5,
        colls=args.colls,
        seed=7,
        tear_rate=args.tear_rate,
    )
    torn = f"-torn{args.tear_rate:g}" if args.tear_rate else ""
    path = args.out / f"nccl-{args.hosts}h-{args.colls}c{torn}.log"
    if not path.exists():
        path.write_bytes(nccl_log(spec))
    mb = os.path.getsize(path) / 1e6
    grep_s = best(
        lambda: subprocess.run(["grep", "-c", "NCCL INFO", str(path)], capture_output=True),
        args.repeat,
    )
    read_s = best(lambda: python_read(path), args.repeat)
    parse_s = best(lambda: read_logs([path]), args.repeat)
    log = read_logs([path])
    started = time.perf_counter()
    summary = summarize(log)
    diag_s = time.perf_counter() - started
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        f"machine: {platform.machine()}, python {platform.python_version()}, {os.cpu_count()} CPUs"
    )
    print(f"log: {path} ({mb:.1f} MB, {log.lines:,} lines, {summary.colls:,} COLL lines)")
    if summary.torn_records:
        print(f"torn records: {summary.torn_records:,} ({summary.torn_recovered:,} joined back)")
    print(f"{'measurement':34} {'seconds':>8} {'MB/s':>8} {'× grep':>8} {'× read':>8}")
    for name, seconds in (
        ("grep -c 'NCCL INFO'", grep_s),
        ("python read + decode + split", read_s),
        ("tracecomm parse (read_logs)", parse_s),
    ):
        print(
            f"{name:34} {seconds:8.2f} {mb / seconds:8.1f} {grep_s / seconds:8.2f} "
            f"{read_s / seconds:8.2f}"
        )
    print(f"diagnostics: {diag_s:.2f} s; peak RSS {rss:,.0f} MiB; best of {args.repeat}")
    print("findings: " + ", ".join(d.rule for d in summary.diagnostics))


if __name__ == "__main__":
    main()
