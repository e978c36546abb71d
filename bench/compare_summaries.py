"""`tracecomm compare` of 4 runs × 64 ranks from `ingest` summaries — issue 23's target: under
2 s, end to end (the command as a subprocess, interpreter start included).

    python bench/compare_summaries.py [--runs 4] [--ranks 64] [--layers 24] [--steps 5]
                                      [--repeat 3] [--target-s 2] [--out bench/out]

Generates the runs once (one FSDP model at ``--ranks`` ranks, each run on a network a little
slower than the one before: a before/after series), ingests each into summaries and then
**deletes the traces**, so that the compare cannot read one (it must not re-parse traces).
Prints the best wall time of ``--repeat`` runs of `tracecomm compare … -f json` and of the
in-process `tracecomm.compare`, checks the output against the published schema when
jsonschema is installed, and exits 1 above the target.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from tracecomm.synth.scaling import Network, scaling_run
from tracecomm.synth.writer import write_run

ROOT = Path(__file__).resolve().parents[1]


def prepare(out: Path, runs: int, ranks: int, layers: int, steps: int) -> list[Path]:
    folders = [out / f"summaries-{i}" for i in range(runs)]
    if all(f.is_dir() for f in folders):
        return folders
    for i, folder in enumerate(folders):
        traces = out / f"traces-{i}"
        shutil.rmtree(traces, ignore_errors=True)
        shutil.rmtree(folder, ignore_errors=True)
        network = Network(alpha_us=10.0 * (1 + 0.25 * i), bus_gbps=200.0)
        write_run(scaling_run(ranks, network, base_world=ranks, layers=layers, steps=steps), traces)
        subprocess.run(
            [sys.executable, "-m", "tracecomm", "ingest", str(traces), "-o", str(folder), "-q"],
            check=True,
        )
        shutil.rmtree(traces)  # compare must not need them
    return folders


def best(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return min(times)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--runs", type=int, default=4)
    p.add_argument("--ranks", type=int, default=64)
    p.add_argument("--layers", type=int, default=24)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--target-s", type=float, default=2.0)
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "out" / "compare")
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    folders = prepare(args.out, args.runs, args.ranks, args.layers, args.steps)
    size = sum(f.stat().st_size for d in folders for f in d.iterdir())
    command = [sys.executable, "-m", "tracecomm", "compare", *map(str, folders), "-f", "json"]
    output: dict[str, bytes] = {}

    def cli() -> None:
        done = subprocess.run(command, capture_output=True, check=True)
        output["json"] = done.stdout

    import tracecomm

    wall = best(cli, args.repeat)
    in_process = best(lambda: tracecomm.compare(folders), args.repeat)
    doc = json.loads(output["json"])
    try:
        import jsonschema

        schema = json.loads((ROOT / "tracecomm/schema/compare.schema.json").read_text())
        jsonschema.validate(doc, schema)
        checked = "valid against compare.schema.json"
    except ImportError:
        checked = "not checked (no jsonschema)"
    print(
        f"tracecomm compare: {args.runs} runs × {args.ranks} ranks from summaries "
        f"({size / 1e6:.1f} MB, traces deleted), {args.layers} layers, {args.steps} steps"
    )
    print(f"  machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs")
    print(f"  CLI, end to end (best of {args.repeat}): {wall:.2f} s   target < {args.target_s} s")
    print(f"  tracecomm.compare in process (best of {args.repeat}): {in_process:.2f} s")
    print(f"  output: {len(output['json']) / 1e3:.0f} kB JSON, {checked}")
    print(f"  sources: {sorted({r['source'] for r in doc['runs']})}")
    return 0 if wall < args.target_s else 1


if __name__ == "__main__":
    sys.exit(main())
