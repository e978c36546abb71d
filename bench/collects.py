"""How many polars queries one analysis runs, and where: the glue issue 33 counts.

    python bench/collects.py RUN [--top 30] [--json OUT]

Runs ``tracecomm.analyze(RUN, jobs=1)`` in this process with a profile hook that sees every
``PyLazyFrame.collect`` (each lazy ``collect`` and each eager DataFrame operation that polars
runs as a query) and charges it to the nearest tracecomm function on the stack. Prints the
total, the count per rank, and the functions that run the most. A count, not a time: how many
small queries the engine makes is what the profile of issue 33 shows costing 1.2 CPU-s of 4.7.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
from pathlib import Path
from types import FrameType
from typing import Any


def count(run: str) -> tuple[int, collections.Counter[str]]:
    import tracecomm

    where: collections.Counter[str] = collections.Counter()

    def hook(frame: FrameType, event: str, arg: Any) -> None:
        if event != "c_call" or getattr(arg, "__name__", "") != "collect":
            return
        if "PyLazyFrame" not in repr(arg):
            return
        f: FrameType | None = frame
        while f is not None and "/tracecomm/" not in f.f_code.co_filename:
            f = f.f_back
        if f is None:
            where["(outside tracecomm)"] += 1
        else:
            path = f.f_code.co_filename.split("/tracecomm/")[-1]
            where[f"{path}:{f.f_code.co_name}"] += 1

    sys.setprofile(hook)
    try:
        report = tracecomm.analyze(run, jobs=1)
    finally:
        sys.setprofile(None)
    return len(report.ranks), where


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", help="a run folder or trace file")
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--json", type=Path, help="write the counts here as JSON")
    args = parser.parse_args()
    ranks, where = count(args.run)
    total = sum(where.values())
    print(f"{total:,} collects, {ranks} ranks, {total / max(ranks, 1):.0f} per rank")
    for name, n in where.most_common(args.top):
        print(f"{n:8,}  {name}")
    if args.json:
        doc = {"ranks": ranks, "collects": total, "by_function": dict(where.most_common())}
        args.json.write_text(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
