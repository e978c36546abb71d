"""The straggler family against its counterfactuals (issue 30; metrics.md §6).

For each member of tracecomm.synth.family at each size: write the job and the job without its
cause, analyze both, and compare what tracecomm says fixing the cause gives with what the
counterfactual run measures. Prints one row per (member, size) and, with ``--json``, writes
the rows.

    python bench/straggler_family.py --sizes 8,64,512 --json family.json

Columns: flagged (the ranks the report flags) against the cause; what-if (the report's
recoverable share) against truth (100 · (step − counterfactual step) / step); finding (the
straggler finding's cost); superset (whether any candidate containing another gains less than
it); heat (the darkest rank of the root-delay heat map, and whether it is a cause).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tracecomm.synth.family import CHECKS, SIZES, judge, member, names
from tracecomm.synth.writer import write_run


def analyze(path: Path) -> dict[str, Any]:
    from typer.testing import CliRunner

    from tracecomm.cli.app import app

    result = CliRunner().invoke(app, ["analyze", str(path), "-f", "json"])
    if result.exit_code != 0:
        raise RuntimeError(f"analyze {path}: exit {result.exit_code}: {result.stderr}")
    doc: dict[str, Any] = json.loads(result.stdout)
    return doc


def run(name: str, ranks: int, slowdown: float, work: Path) -> dict[str, Any]:
    m = member(name, ranks, slowdown=slowdown)
    job_dir, twin_dir = work / f"{name}-{ranks}", work / f"{name}-{ranks}-cf"
    write_run(m.job, job_dir)
    write_run(m.counterfactual, twin_dir)
    started = time.perf_counter()
    job = analyze(job_dir)
    row = judge(m, job, analyze(twin_dir))
    row["analyze_s"] = round(time.perf_counter() - started, 2)
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)))
    parser.add_argument("--members", default=",".join(names()))
    parser.add_argument("--slowdown", type=float, default=1.2)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for size in [int(x) for x in args.sizes.split(",")]:
            for name in args.members.split(","):
                row = run(name, size, args.slowdown, Path(tmp))
                rows.append(row)
                oks = "".join("✓" if row[k] else "✗" for k in CHECKS)
                cause = ", ".join(map(str, row["cause"][:8])) + (
                    "…" if len(row["cause"]) > 8 else ""
                )
                print(
                    f"{name:17} {size:4} {oks}  cause {cause}; flagged {len(row['flagged'])}; "
                    f"what-if {row['whatif_pct']:.1f} % ({row['basis']}) vs truth "
                    f"{row['truth_pct']:.1f} %; finding {row['finding']!r} "
                    f"{row['finding_pct'] or 0:.1f} %; darkest {row['darkest']}; "
                    f"{row['analyze_s']} s",
                    flush=True,
                )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0 if all(all(r[k] for k in CHECKS) for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
