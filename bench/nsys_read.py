"""The Nsight Systems reader against the Kineto reader on the same generated events, and against
reading the same tables with pandas.

    python bench/nsys_read.py [--mb-per-rank 1000] [--out bench/out/nsys] [--repeat 3]

One FSDP-style rank is generated (once) with the ground-truth generator both as Kineto JSON
(uncompressed, about ``--mb-per-rank`` MB) and as an ``nsys export --type sqlite`` file of the
same events (``tracecomm.synth.nsys``). Each reader runs in a fresh subprocess, ``--repeat``
times; the median wall time and the peak RSS are reported:

- ``kineto``: ``tracecomm.ingest.load_rank`` of the JSON file;
- ``nsys``: ``tracecomm.ingest.nsys.load_nsys`` of the SQLite file;
- ``pandas``: ``pandas.read_sql`` of the tables the nsys reader reads (kernels, runtime, NVTX,
  copies, with their names joined), the usual way a script reads an export: the floor a
  dataframe library gives, with none of tracecomm's frames built.

Speed is reported as ratios against the baselines of the same run, never as pass / fail.

    python bench/nsys_read.py --before ../wt-before EXPORT.sqlite ... [--rounds 9]

With ``--before`` (another checkout of the project, issue 47), real exports instead: per
round, each export is read by ``load_nsys`` in a fresh process of this tree and of the other,
in turn (which goes first alternates), so that both share the machine's load of the moment.
``cold`` is the process's first read (what the command line pays), ``warm`` the best of three
reads after it. Medians over the rounds, and before ÷ now.

    python bench/nsys_read.py --fetch EXPORT.sqlite ... [--repeat 7]

How the reader's three largest queries (NVTX ranges, kernels, runtime calls) become frames,
median milliseconds: row by row (``_row_frame``: a Python tuple per row), polars'
``read_database`` on the sqlite3 connection, one JSON array per column (``_json_frame``, what
the reader does), and Arrow from the ADBC SQLite driver where ``adbc_driver_sqlite`` is
importable (not a dependency).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import quote

_READERS = {
    "kineto": (
        "from tracecomm.ingest.load import load_rank\nr = load_rank({path!r})\nn = r.device.height"
    ),
    "nsys": (
        "from tracecomm.ingest.nsys import load_nsys\nr = load_nsys({path!r})[0]\n"
        "n = r.device.height"
    ),
    "pandas": (
        "import sqlite3, pandas as pd\n"
        "db = sqlite3.connect({path!r})\n"
        "k = pd.read_sql('SELECT k.start, k.end, k.deviceId, k.streamId, k.correlationId, "
        "k.globalPid, s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s "
        "ON s.id = k.demangledName', db)\n"
        "r = pd.read_sql('SELECT r.start, r.end, r.globalTid, r.correlationId, s.value FROM "
        "CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON s.id = r.nameId', db)\n"
        "v = pd.read_sql('SELECT n.start, n.end, n.globalTid, coalesce(n.text, s.value) FROM "
        "NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId "
        "WHERE n.eventType IN (59, 60)', db)\n"
        "c = pd.read_sql('SELECT start, end, deviceId, streamId, correlationId FROM "
        "CUPTI_ACTIVITY_KIND_MEMCPY', db)\n"
        "n = len(k) + len(c)"
    ),
}
_TIMED = (
    "import resource, time\nt = time.perf_counter()\n{body}\n"
    "w = time.perf_counter() - t\n"
    "print(w, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, n)"
)


def _generate(out: Path, mb: int) -> tuple[Path, Path]:
    kineto, nsys = out / "kineto", out / "nsys"
    if not (kineto / "rank0.pt.trace.json").exists():
        _synth(kineto, mb, "--no-gzip")
    if not (nsys / "rank0.sqlite").exists():
        _synth(nsys, mb, "--format", "nsys")
    return kineto / "rank0.pt.trace.json", nsys / "rank0.sqlite"


def _synth(folder: Path, mb: int, *extra: str) -> None:
    args = [sys.executable, "-m", "tracecomm.synth", str(folder), "--ranks", "2"]
    subprocess.run([*args, "--size-mb", str(mb), "--force", *extra], check=True)


def _measure(reader: str, path: Path, repeat: int) -> dict[str, float]:
    code = _TIMED.format(body=_READERS[reader].format(path=str(path)))
    walls, rss, rows = [], [], 0.0
    for _ in range(repeat):
        done = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        )
        wall, peak, n = done.stdout.split()
        walls.append(float(wall))
        rss.append(int(peak) / 1024)
        rows = float(n)
    return {"wall_s": statistics.median(walls), "peak_mib": max(rss), "device_rows": rows}


# the first read of a fresh process, then the best of three more. numpy is imported first in
# both trees, as the command line imports it (the engine) before it reads: importing it starts
# OpenBLAS's threads, which spin for a while, and on two cores that cost the first read that
# followed 15-25 ms (mock.sqlite's read: 14 -> 40 ms)
_COLD_WARM = (
    "import time\nimport numpy\nfrom tracecomm.ingest.nsys import load_nsys\nwalls = []\n"
    "for _ in range(4):\n    t = time.perf_counter()\n    load_nsys({path!r})\n"
    "    walls.append(time.perf_counter() - t)\nprint(walls[0], min(walls[1:]))"
)


def _read_in(tree: Path, path: Path) -> tuple[float, float]:
    """(cold, warm) seconds of ``load_nsys(path)`` in a fresh process importing ``tree``."""
    done = subprocess.run(
        [sys.executable, "-c", _COLD_WARM.format(path=str(path.resolve()))],
        capture_output=True,
        text=True,
        check=True,
        cwd=tree,
        env={**os.environ, "PYTHONPATH": str(tree.resolve())},
    )
    cold, warm = done.stdout.split()
    return float(cold), float(warm)


def compare(before: Path, exports: list[Path], rounds: int) -> dict[str, dict[str, float]]:
    """Per export: median cold and warm walls of both trees, interleaved, and their ratios."""
    now = Path(__file__).resolve().parent.parent
    walls: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for i in range(rounds):
        for path in exports:
            order = [("before", before), ("now", now)]
            for tree_name, tree in order if i % 2 == 0 else order[::-1]:
                walls.setdefault((path.name, tree_name), []).append(_read_in(tree, path))
    out = {}
    for path in exports:
        got = {}
        for tree_name in ("before", "now"):
            runs = walls[(path.name, tree_name)]
            got[f"{tree_name}_cold_s"] = statistics.median(c for c, _ in runs)
            got[f"{tree_name}_warm_s"] = statistics.median(w for _, w in runs)
        got["cold_ratio"] = got["before_cold_s"] / got["now_cold_s"]
        got["warm_ratio"] = got["before_warm_s"] / got["now_warm_s"]
        out[path.name] = {k: round(v, 4) for k, v in got.items()}
    return out


# the reader's three largest queries, as _kernels, _runtime and _nvtx write them
_FETCHED = {
    "nvtx": (
        "SELECT n.start, n.end, n.globalTid, substr(coalesce(n.text, s.value), 1, 4096), "
        "n.domainId FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId "
        "WHERE n.eventType IN (59, 60) AND n.end IS NOT NULL AND n.end >= n.start",
        "start_ns end_ns global_tid",
        "name",
    ),
    "kernels": (
        "SELECT start, end, deviceId, streamId, correlationId, globalPid, demangledName "
        "FROM CUPTI_ACTIVITY_KIND_KERNEL",
        "start_ns end_ns device stream correlation global_pid name",
        "",
    ),
    "runtime": (
        "SELECT start, end, globalTid, correlationId, nameId FROM CUPTI_ACTIVITY_KIND_RUNTIME",
        "start_ns end_ns global_tid correlation name",
        "",
    ),
}


def fetch_ways(exports: list[Path], repeat: int) -> dict[str, dict[str, dict[str, float]]]:
    """Per export and query: median ms of each way to a frame."""
    import polars as pl

    from tracecomm.ingest import nsys

    out: dict[str, dict[str, dict[str, float]]] = {}
    for path in exports:
        ways = _ways(path)
        for name, (query, ints, strings) in _FETCHED.items():
            schema = nsys._schema(ints, strings)
            if name == "nvtx":
                schema = {**schema, "domain": pl.Int64()}
            out.setdefault(path.name, {})[name] = {
                way: round(_median_ms(read, query, schema, repeat), 2) for way, read in ways.items()
            }
    return out


_Read = Callable[[str, dict[str, Any]], object]


def _ways(path: Path) -> dict[str, _Read]:
    import polars as pl

    from tracecomm.ingest import nsys

    db = nsys._connect(path)
    ways: dict[str, _Read] = {
        "rows": partial(nsys._row_frame, db),
        "read_database": lambda query, _: pl.read_database(query, db),
        "json": partial(nsys._json_frame, db),
    }
    try:
        import adbc_driver_manager as manager
        import adbc_driver_sqlite
    except ImportError:
        return ways
    uri = f"file:{quote(str(path.resolve()))}?mode=ro&immutable=1"
    conn = manager.AdbcConnection(
        manager.AdbcDatabase(driver=adbc_driver_sqlite._driver_path(), uri=uri)
    )

    def arrow(query: str, _: object) -> object:
        statement = manager.AdbcStatement(conn)
        statement.set_sql_query(query)
        stream, _rows = statement.execute_query()
        frame = pl.DataFrame(stream)  # Arrow's C stream interface: no pyarrow needed
        statement.close()
        return frame

    return {**ways, "adbc": arrow}


def _median_ms(read: _Read, query: str, schema: dict[str, Any], repeat: int) -> float:
    walls = []
    for _ in range(repeat):
        start = time.perf_counter()
        read(query, schema)
        walls.append(time.perf_counter() - start)
    return statistics.median(walls) * 1000


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--mb-per-rank", type=int, default=1000)
    p.add_argument("--out", type=Path, default=Path("bench/out/nsys"))
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--before", type=Path, help="another checkout: compare on EXPORTS")
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--fetch", action="store_true", help="ways to read EXPORTS' tables")
    p.add_argument("exports", type=Path, nargs="*", help="real exports (--before, --fetch)")
    args = p.parse_args()
    if args.fetch:
        print(json.dumps(fetch_ways(args.exports, args.repeat), indent=2))
        return 0
    if args.before is not None:
        got = compare(args.before, args.exports, args.rounds)
        print(json.dumps({"rounds": args.rounds, "exports": got}, indent=2))
        return 0
    kineto, nsys = _generate(args.out, args.mb_per_rank)
    sizes = {"kineto_mb": kineto.stat().st_size / 1e6, "nsys_mb": nsys.stat().st_size / 1e6}
    got = {
        "kineto": _measure("kineto", kineto, args.repeat),
        "nsys": _measure("nsys", nsys, args.repeat),
        "pandas": _measure("pandas", nsys, args.repeat),
    }
    base = got["kineto"]["wall_s"]
    ratios = {
        "nsys_over_kineto": got["nsys"]["wall_s"] / base,
        "nsys_over_pandas": got["nsys"]["wall_s"] / got["pandas"]["wall_s"],
    }
    print(json.dumps({"sizes": sizes, "readers": got, "ratios": ratios}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
