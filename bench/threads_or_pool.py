"""Ranks on threads of one process against the forked pool, per shape of run (issue 47 item 2).

    python bench/threads_or_pool.py [--rounds 3] [--out bench/out] [RUN ...]

Each run is analyzed by the CLI in a fresh process (``tracecomm analyze RUN -f json``) three
ways, in turn within each round: as the CLI chooses (``auto``), on threads of the one process
(the pool's threshold set past any input), and in the forked pool whatever the input (its
threshold set to 0). Medians of wall, CPU (user + sys of
the process and its workers) and peak RSS of the largest process (GNU time's %M); the JSON of
every mode must be the same, else the script exits 1.

Without RUN: the sample, the real trace of ``hta-trace_diff_control`` written once per rank
(8 ranks, as ``bench/parse_throughput.py --real`` writes it), the two ByteDance jobs of
``../shared`` and two generated FSDP runs (64 ranks of ~3 MB, 8 of ~100 MB). Ratios measured in
the same minutes, never absolute figures, mean something on a shared machine.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from _bytecode import compile_tracecomm

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared" / "data" / "traces"
BIG = 1 << 60
# the CLI's entry with the executor's thresholds set for one mode
MODES = {
    "auto": "",
    "threads": f"import tracecomm.run.pool as p; p.POOL_MIN_BYTES = {BIG}; ",
    "pool": "import tracecomm.run.pool as p; p.POOL_MIN_BYTES = 0; ",
}
ENTRY = "{patch}import sys; from tracecomm.cli import main; sys.argv = {argv!r}; main()"


def default_runs(out: Path) -> list[Path]:
    sys.path.insert(0, str(ROOT / "bench"))
    from parse_throughput import prepare_real

    from tracecomm.synth import fsdp_run_of_size, write_run

    runs = [ROOT / "fixtures" / "sample-run"]
    real = out / "real-control-8ranks"
    if not real.is_dir():
        prepare_real(out, SHARED / "hta-trace_diff_control" / "control.json.gz", 8, print)
    runs.append(real)
    runs += [SHARED / "bytedance-straggler-SE", SHARED / "bytedance-straggler-AR"]
    for ranks, mb in ((64, 3), (8, 100)):
        run = out / f"fsdp-{ranks}x{mb}mb"
        if not (run / ".complete").exists():
            write_run(fsdp_run_of_size(mb, world_size=ranks, seed=0, gzip=False), run)
            (run / ".complete").write_text("")
        runs.append(run)
    return [r for r in runs if r.exists()]


def once(mode: str, run: Path, scratch: Path) -> tuple[float, float, int, bytes]:
    argv = ["tracecomm", "analyze", str(run), "-f", "json"]
    code = ENTRY.format(patch=MODES[mode], argv=argv)
    stats = scratch / "time.txt"
    done = subprocess.run(
        ["/usr/bin/time", "-o", str(stats), "-f", "%e %U %S %M", sys.executable, "-c", code],
        capture_output=True,
        check=False,
    )
    if done.returncode not in (0, 4):
        raise SystemExit(f"{mode} {run}: exit {done.returncode}: {done.stderr[-400:]!r}")
    wall, user, system, rss_kb = stats.read_text().split()[-4:]
    return float(wall), float(user) + float(system), int(rss_kb), done.stdout


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="*", type=Path)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "out")
    parser.add_argument("--json", type=Path, help="write the medians here")
    args = parser.parse_args()
    compile_tracecomm()
    args.out.mkdir(parents=True, exist_ok=True)
    runs = args.runs or default_runs(args.out)
    rows, same = [], True
    with tempfile.TemporaryDirectory() as tmp:
        for run in runs:
            got: dict[str, list[tuple[float, float, int]]] = {m: [] for m in MODES}
            outputs = set()
            for _ in range(args.rounds):
                for mode in MODES:
                    wall, cpu, rss, out = once(mode, run, Path(tmp))
                    got[mode].append((wall, cpu, rss))
                    outputs.add(out)
            same &= len(outputs) == 1
            row = {"run": run.name, "same_json": len(outputs) == 1}
            for mode, values in got.items():
                row[mode] = {
                    "wall_s": statistics.median(v[0] for v in values),
                    "cpu_s": statistics.median(v[1] for v in values),
                    "rss_mib": statistics.median(v[2] for v in values) / 1024,
                }
            rows.append(row)
            print(_line(row), flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    print("the same JSON in every mode:", "yes" if same else "NO")
    return 0 if same else 1


def _line(row: dict) -> str:
    parts = [f"{row['run']:<28}"]
    for mode in MODES:
        m = row[mode]
        parts.append(f"{mode} {m['wall_s']:.2f} s / {m['cpu_s']:.2f} cpu / {m['rss_mib']:.0f} MiB")
    return " | ".join(parts)


if __name__ == "__main__":
    sys.exit(main())
