"""The floor under ``tracecomm analyze``: what a run costs when everything after a stage is free.

    python bench/floor.py RUN [--jobs 2] [--rounds 3] [--hta]

Runs the ranks of RUN through the CLI's own pool (forked workers, ``POLARS_MAX_THREADS`` one
per worker, the per-rank modules imported in each before the clock starts) four times, each
stopping after one more stage of the per-rank unit:

- ``read``: the file read (and inflated) in the stream reader's chunks;
- ``scan``: plus the C scanner over each chunk (no frame built from its columns);
- ``ingest``: the whole parse (``load_rank``: frames, split, joins, repairs);
- ``unit``: the whole per-rank unit (``analyze_file``: parse and engine).

and the CLI end to end (``tracecomm analyze RUN -f json``), interleaved round by round with
HTA 0.6.1 end to end when ``--hta`` (``parse_throughput.py _worker hta-e2e``). For each stage
it prints the median wall time of the stage's work, the workers' CPU, and the best ratio
against HTA the run could reach if nothing after that stage cost anything: HTA's wall over
(start-up to a warm pool + that stage's wall). Start-up is the CLI's own, measured here as the
time to a pool whose workers have imported the per-rank modules. A ratio, never a timed test.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path
from typing import Any

from _bytecode import compile_tracecomm

STAGES = ("read", "scan", "ingest", "unit")
JSON = ("-f", "json")
HTA_E2E = ("_worker", "hta-e2e", "--dir")


def _chunks(path: str) -> Iterator[Any]:
    """The stream reader's chunks of one file (read and inflated, cut at event boundaries)."""
    from tracecomm.ingest import stream
    from tracecomm.ingest.options import ReadOptions

    read = ReadOptions()
    with stream._open(Path(path), read) as handle:
        _, rest = stream._header(handle, Path(path))
        yield from stream._chunks(handle, rest, Path(path), read)


def _read(path: str) -> int:
    return sum(len(chunk.head) + len(chunk.body) for chunk in _chunks(path))


def _scan(path: str) -> int:
    from tracecomm.ingest import _scan as scanner

    n = 0
    for chunk in _chunks(path):
        if not chunk.final:
            out = scanner.scan(chunk.body, True, chunk.head)
            n += 0 if out is None else len(out)
    return n


def _ingest(path: str) -> int:
    from tracecomm.ingest.load import load_rank

    return load_rank(path).device.height


def _unit(path: str) -> int:
    from tracecomm.engine.options import BreakdownOptions
    from tracecomm.ingest.options import ReadOptions
    from tracecomm.run.worker import RankWork, analyze_file

    return len(analyze_file(path, RankWork(BreakdownOptions(), ReadOptions())))


WORK: dict[str, Callable[[str], int]] = {
    "read": _read,
    "scan": _scan,
    "ingest": _ingest,
    "unit": _unit,
}


def _warm() -> float:
    from tracecomm.run.pool import warm

    warm()  # the CLI's own: the per-rank modules (without collector passes, where it has that)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def stage(name: str, files: list[str], jobs: int) -> dict[str, float]:
    """One stage over the run in a fresh forked pool: start-up, work wall, workers' CPU."""
    os.environ.setdefault("POLARS_MAX_THREADS", str(max(1, (os.cpu_count() or 1) // jobs)))
    t0 = time.perf_counter()
    with ProcessPoolExecutor(jobs, mp_context=get_context("fork")) as pool:
        warm_cpu = sum(f.result() for f in [pool.submit(_warm) for _ in range(jobs)])
        t1 = time.perf_counter()
        list(pool.map(WORK[name], files))
        t2 = time.perf_counter()
        cpu = sum(f.result() for f in [pool.submit(_cpu) for _ in range(jobs)])
    return {
        "start_s": t1 - t0,
        "start_cpu_s": warm_cpu,
        "work_s": t2 - t1,
        "cpu_s": max(0.0, cpu - warm_cpu),
    }


def _timed(cmd: list[str], cwd: Path | None = None) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=cwd)
    return time.perf_counter() - t0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path, help="a run folder of one trace per rank")
    parser.add_argument("--jobs", type=int, default=min(os.cpu_count() or 1, 8))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--hta", action="store_true", help="HTA 0.6.1 end to end each round")
    parser.add_argument("--json", type=Path, help="write the medians here")
    args = parser.parse_args()
    # every child runs in the measured tree: ``-c`` and ``-m`` put the working folder first on
    # the path, so a child started elsewhere (in another checkout) would measure that one
    tree = compile_tracecomm().parent
    args.run = args.run.resolve()  # the children run in the measured tree
    files = sorted(str(p) for p in args.run.iterdir() if ".json" in p.name)
    if "polars" in sys.modules:  # a forked pool must start before polars' threads do
        raise SystemExit("polars is loaded: the pool cannot fork safely")
    here = Path(__file__).parent
    rows: dict[str, list[dict[str, float]]] = {s: [] for s in STAGES}
    cli, hta = [], []
    for _ in range(args.rounds):
        for name in STAGES:
            rows[name].append(_in_child(name, files, args.jobs, tree))
        cli.append(
            _timed([sys.executable, "-m", "tracecomm", "analyze", str(args.run), *JSON], tree)
        )
        if args.hta:
            hta.append(
                _timed([sys.executable, str(here / "parse_throughput.py"), *HTA_E2E, str(args.run)])
            )
    gb = sum(os.path.getsize(f) for f in files) / 1e9
    med = {n: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for n, rs in rows.items()}
    start = med["unit"]["start_s"]
    hta_s = statistics.median(hta) if hta else None
    print(f"{len(files)} ranks, {gb:.2f} GB on disk, {args.jobs} workers, {args.rounds} rounds")
    print(
        f"start-up to a warm pool: {start:.2f} s, {med['unit']['start_cpu_s']:.2f} CPU-s in the "
        f"workers ({med['unit']['start_cpu_s'] / gb:.2f} per GB); "
        f"CLI end to end: {statistics.median(cli):.2f} s"
    )
    if hta_s:
        print(f"HTA 0.6.1 end to end: {hta_s:.2f} s (CLI {hta_s / statistics.median(cli):.1f}x)")
    print(f"{'stage':8} {'work s':>7} {'CPU s':>6} {'CPU s/GB':>8}  best x HTA, the rest free")
    for name in STAGES:
        m = med[name]
        best = f"{hta_s / (start + m['work_s']):.1f}x" if hta_s else "-"
        print(f"{name:8} {m['work_s']:7.2f} {m['cpu_s']:6.2f} {m['cpu_s'] / gb:8.2f}  {best}")
    if args.json:
        out = {"stages": med, "cli_s": cli, "hta_s": hta, "gb": gb, "jobs": args.jobs}
        args.json.write_text(json.dumps(out, indent=2) + "\n")
    return 0


def _in_child(name: str, files: list[str], jobs: int, tree: Path) -> dict[str, float]:
    """Each stage in its own interpreter, so that every pool forks a process without polars."""
    code = (
        "import json, sys; sys.path.insert(0, sys.argv[1]); import floor; "
        "print(json.dumps(floor.stage(sys.argv[2], sys.argv[4:], int(sys.argv[3]))))"
    )
    here = str(Path(__file__).parent)
    out = subprocess.run(
        [sys.executable, "-c", code, here, name, str(jobs), *files],
        cwd=tree,
        check=True,
        capture_output=True,
        text=True,
    )
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


if __name__ == "__main__":
    raise SystemExit(main())
