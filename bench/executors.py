"""Throughput of the executors on this machine: the local process pool and a local Dask
cluster with 1 and 2 workers, plus `ingest` and `analyze` of the summaries it writes.

    python bench/executors.py [--ranks 16] [--mb-per-rank 25] [--repeat 2] [--out bench/out]

Every row is the CLI in a fresh process (`tracecomm … -f json -q`), wall time, best of
``--repeat``; the figures of every row are compared (the JSON without its ``inputs``) and the
script fails if any differs. MB are 10^6 bytes of uncompressed JSON. Ratios are against the
local executor with one process, measured in the same run.
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
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
MB = 1e6


def prepare(out: Path, ranks: int, mb: float) -> Path:
    from tracecomm.synth import fsdp_run_of_size, write_run

    run = out / f"exec-run-{ranks}x{mb:g}mb"
    marker = run / ".complete"
    if not marker.exists():
        shutil.rmtree(run, ignore_errors=True)
        print(f"generating {ranks} ranks x ~{mb:g} MB into {run} ...", file=sys.stderr)
        write_run(fsdp_run_of_size(mb, world_size=ranks, seed=0, gzip=False), run)
        marker.write_text("")
    return run


def timed(args: list[str], repeat: int) -> tuple[float, dict[str, Any] | None]:
    """Best wall time of ``tracecomm ARGS`` and its JSON output (None for commands without)."""
    best, doc = float("inf"), None
    cli = [sys.executable, "-m", "tracecomm.cli", *args]
    for _ in range(repeat):
        start = time.perf_counter()
        proc = subprocess.run(cli, capture_output=True, check=False)
        best = min(best, time.perf_counter() - start)
        if proc.returncode not in (0, 4):
            sys.exit(f"{' '.join(args)}: exit {proc.returncode}: {proc.stderr.decode()[-2000:]}")
        doc = json.loads(proc.stdout) if proc.stdout.strip() else None
    return best, doc


def _figures(doc: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in doc.items() if k != "inputs"}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ranks", type=int, default=16)
    p.add_argument("--mb-per-rank", type=float, default=25.0)
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "out")
    a = p.parse_args()
    run = prepare(a.out, a.ranks, a.mb_per_rank)
    size = sum(f.stat().st_size for f in run.glob("*.json")) / MB
    analyze = ["analyze", str(run), "-f", "json", "-q"]
    rows: list[tuple[str, float]] = []
    docs: dict[str, dict[str, Any]] = {}
    dask = ["--executor", "dask"]
    for label, extra in (
        ("local, 1 process (`-j 1`)", ["-j", "1"]),
        ("local, 2 processes (`-j 2`)", ["-j", "2"]),
        ("Dask LocalCluster, 1 worker (`--executor dask -j 1`)", [*dask, "-j", "1"]),
        ("Dask LocalCluster, 2 workers (`--executor dask -j 2`)", [*dask, "-j", "2"]),
    ):
        print(f"  {label} ...", file=sys.stderr)
        seconds, doc = timed([*analyze, *extra], a.repeat)
        rows.append((label, seconds))
        assert doc is not None
        docs[label] = doc
    with tempfile.TemporaryDirectory() as tmp:
        summaries = Path(tmp) / "summaries"
        print("  ingest + analyze of the summaries ...", file=sys.stderr)
        seconds, _ = timed(["ingest", str(run), "-o", str(summaries), "-q", "-j", "2"], 1)
        rows.append(("`ingest -j 2` (writes the summaries)", seconds))
        seconds, doc = timed(["analyze", str(summaries), "-f", "json", "-q"], a.repeat)
        assert doc is not None
        rows.append(("`analyze` of the summaries", seconds))
        docs["summaries"] = doc
        summary_mb = sum(f.stat().st_size for f in summaries.rglob("*.parquet")) / MB
    reference = _figures(docs[rows[0][0]])
    differ = [label for label, doc in docs.items() if _figures(doc) != reference]
    base = rows[0][1]
    cpu = platform.processor() or platform.machine()
    print(
        f"\n{a.ranks} ranks x {size / a.ranks:.1f} MB = {size:.0f} MB of JSON; summaries "
        f"{summary_mb:.2f} MB; {os.cpu_count()} cores, {cpu}, Python {platform.python_version()}\n"
    )
    print("| run | seconds | MB/s | × local, 1 process |")
    print("|---|---:|---:|---:|")
    for label, seconds in rows:
        print(f"| {label} | {seconds:.2f} | {size / seconds:.0f} | {base / seconds:.2f}× |")
    print(f"\nfigures identical across rows: {'yes' if not differ else 'NO: ' + ', '.join(differ)}")
    if differ:
        sys.exit(1)


if __name__ == "__main__":
    main()
