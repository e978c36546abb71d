"""JSON bytes to per-event columns: tracecomm's C scanner against the well-kept readers.

    python bench/scan_options.py --real TRACE.json.gz --generated RANK.json [--rounds 5]

Each trace is read (and inflated) once into memory before any clock starts. Every option then
goes from those bytes to the columns the C scanner gives for the complete ("X") events (cat,
name, ts and dur in ns, pid, tid, and the args' correlation, External id, external id, device
and stream) as polars Series, in one process, the options in turn round by round (the machine
is shared: interleaving keeps a slow minute from landing on one option). Reported per option:
the median wall and CPU time (``time.process_time``: every thread of the process), CPU-s per GB
of JSON, the ratio of its CPU to the scanner with its columns, and the peak memory above the
input (VmHWM after a reset of the peak, one run in a child process of its own: ``--memory``).

Each option's columns are checked against the scanner's (rows, sums of ts, dur, pid and the
link ids, distinct names) so that every row does the same work; a mismatch is printed.

The simdjson bindings (pysimdjson, cysimdjson) are for this measurement only, not dependencies:

    pip install --target /tmp/scanopt-pkgs pysimdjson cysimdjson
    PYTHONPATH=.:/tmp/scanopt-pkgs python bench/scan_options.py ...

An option whose module is missing is reported as such and skipped.
"""

from __future__ import annotations

import argparse
import gc
import gzip
import io
import json
import os
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("POLARS_MAX_THREADS", "1")  # as in the CLI's workers: one each

import msgspec
import numpy as np
import polars as pl

Columns = dict[str, pl.Series]
LINKS = {  # column -> args key
    "correlation": "correlation",
    "external_id": "External id",
    "external_id_lc": "external id",
    "device": "device",
    "stream": "stream",
}
EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')


class Inputs:
    """One trace's bytes: the whole document and a view of its events array (the scanner's
    input; the stream reader finds it the same way, without a copy)."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        found = EVENTS_KEY.search(data)
        if found is None:
            raise SystemExit("no traceEvents array")
        start = found.end() - 1
        end = _array_end(data, start)
        self.events = memoryview(data)[start:end]
        self._ndjson: bytes | None = None

    @property
    def ndjson(self) -> bytes:
        """The events as NDJSON (made once, outside the clock: this rewrite is not free)."""
        if self._ndjson is None:
            self._ndjson = _ndjson(self.data)
        return self._ndjson


class _Envelope(msgspec.Struct):
    traceEvents: msgspec.Raw = msgspec.Raw(b"")  # the file's key


def _array_end(data: bytes, start: int) -> int:
    """The end of the array opened at ``start`` (its length from msgspec, outside the clock)."""
    raw = msgspec.json.decode(data, type=_Envelope).traceEvents
    if data[start : start + 1] != b"[" or data[start + len(raw) - 1 : start + len(raw)] != b"]":
        raise SystemExit("traceEvents array not where expected")
    return start + len(raw)


def _ndjson(data: bytes) -> bytes:
    import orjson

    return b"\n".join(orjson.dumps(e) for e in orjson.loads(data)["traceEvents"])


def _ns(values: list[Any], name: str) -> pl.Series:
    """µs (int or float) to int ns: exact for ints, rounded for floats."""
    s = pl.Series(name, values, strict=False)
    if s.dtype == pl.Float64:
        return pl.select(_float_ns(pl.lit(s))).to_series().rename(name)
    return (s.cast(pl.Int64) * 1000).rename(name)


def _float_ns(us: pl.Expr) -> pl.Expr:
    """Float µs to int ns, the whole µs apart (epoch µs times 1000 is past a double's 2^53)."""
    whole = us.floor()
    return whole.cast(pl.Int64) * 1000 + ((us - whole) * 1000).round().cast(pl.Int64)


def _int(values: list[Any], name: str) -> pl.Series:
    return pl.Series(name, values, dtype=pl.Int64, strict=False)


# ---- (a) the C scanner ------------------------------------------------------------------


def scan_only(inp: Inputs) -> Any:
    from tracecomm.ingest import _scan

    return _scan.scan(inp.events)


def scan_columns(inp: Inputs) -> Columns:
    """The scanner, then its bytes as Series: strings from codes, ints with their nulls."""
    from tracecomm.ingest import _scan

    got = _scan.scan(inp.events)
    assert got is not None
    out: Columns = {}
    for col in ("cat", "name"):
        table = [v.decode() for v in got[f"{col}_values"]]
        codes = np.frombuffer(got[f"{col}_code"], dtype=np.uint32).astype(np.int64)
        codes = np.where(codes == 0xFFFFFFFF, len(table), codes)
        out[col] = pl.Series(col, [*table, None], dtype=pl.String).gather(codes)
    for col, key in (("ts_ns", "ts_ns"), ("dur_ns", "dur_ns"), ("pid", "pid"), ("tid", "tid")):
        out[col] = _masked(got, key, col)
    for col in LINKS:
        out[col] = _masked(got, "arg_" + col if col in ("device", "stream") else col, col)
    return out


def _masked(got: dict[str, Any], key: str, name: str) -> pl.Series:
    values = pl.Series(name, np.frombuffer(got[key], dtype=np.int64))
    valid = np.frombuffer(got[f"{key}_valid"], dtype=np.uint8).view(bool)
    return values if valid.all() else values.scatter(np.flatnonzero(~valid), None)


def fast_columns(inp: Inputs) -> Any:
    """What tracecomm does today with a chunk: the scanner and ``fast.columns`` (kinds,
    kept rows, metadata and shapes decoded, graph ids: more than the columns above)."""
    from tracecomm.ingest import fast

    got = fast.columns(inp.events, Path("bench.json"), None, frozenset())
    assert got is not None
    return got


# ---- (b) msgspec typed decoding -----------------------------------------------------------


class Args(msgspec.Struct, gc=False):
    correlation: int | None = None
    external_id: int | None = msgspec.field(default=None, name="External id")
    external_id_lc: int | None = msgspec.field(default=None, name="external id")
    device: int | None = None
    stream: int | None = None


class Event(msgspec.Struct, gc=False):
    ph: str | None = None
    cat: str | None = None
    name: str | None = None
    pid: int | str | None = None
    tid: int | str | None = None
    ts: int | float | None = None
    dur: int | float | None = None
    args: Args | None = None


class Trace(msgspec.Struct, gc=False):
    traceEvents: list[Event] = []  # the file's key


_DECODER = msgspec.json.Decoder(Trace)
_NO_ARGS = Args()


def msgspec_decode(inp: Inputs) -> Any:
    return _DECODER.decode(inp.data)


def msgspec_columns(inp: Inputs) -> Columns:
    events = [e for e in _DECODER.decode(inp.data).traceEvents if e.ph == "X"]
    args = [e.args or _NO_ARGS for e in events]
    return {
        "cat": pl.Series("cat", [e.cat for e in events], dtype=pl.String),
        "name": pl.Series("name", [e.name for e in events], dtype=pl.String),
        "ts_ns": _ns([e.ts for e in events], "ts_ns"),
        "dur_ns": _ns([e.dur for e in events], "dur_ns"),
        "pid": _int([e.pid for e in events], "pid"),
        "tid": _int([e.tid for e in events], "tid"),
        **{c: _int([getattr(a, c) for a in args], c) for c in LINKS},
    }


# ---- (c) orjson + columns: the naive baseline ---------------------------------------------


def orjson_loads(inp: Inputs) -> Any:
    import orjson

    return orjson.loads(inp.data)


def _dict_columns(events: list[dict[str, Any]]) -> Columns:
    args = [e.get("args") or {} for e in events]
    return {
        "cat": pl.Series("cat", [e.get("cat") for e in events], dtype=pl.String),
        "name": pl.Series("name", [e.get("name") for e in events], dtype=pl.String),
        "ts_ns": _ns([e.get("ts") for e in events], "ts_ns"),
        "dur_ns": _ns([e.get("dur") for e in events], "dur_ns"),
        "pid": _int([e.get("pid") for e in events], "pid"),
        "tid": _int([e.get("tid") for e in events], "tid"),
        **{c: _int([a.get(k) for a in args], c) for c, k in LINKS.items()},
    }


def orjson_columns(inp: Inputs) -> Columns:
    import orjson

    events = orjson.loads(inp.data)["traceEvents"]
    return _dict_columns([e for e in events if e.get("ph") == "X"])


# ---- (d) simdjson bindings ----------------------------------------------------------------


def pysimdjson_parse(inp: Inputs) -> Any:
    import simdjson

    doc: Any = simdjson.Parser().parse(inp.data)  # the document holds its parser
    return len(doc["traceEvents"])


def pysimdjson_columns(inp: Inputs) -> Columns:
    """simdjson's DOM, then each X event's fields through its lazy proxies."""
    import simdjson

    parser = simdjson.Parser()
    doc: Any = parser.parse(inp.data)
    return _rows_columns(_dom_rows(doc["traceEvents"]))


def cysimdjson_parse(inp: Inputs) -> Any:
    import cysimdjson

    parser = cysimdjson.JSONParser()  # the document lives in the parser: keep it alive
    return parser, parser.parse(inp.data)


def cysimdjson_columns(inp: Inputs) -> Columns:
    import cysimdjson

    parser = cysimdjson.JSONParser()  # the document lives in the parser: keep it alive
    doc = parser.parse(inp.data)
    return _rows_columns(_dom_rows(doc["traceEvents"]))


def _dom_rows(events: Any) -> list[list[Any]]:
    """The X events' fields, one list per column, from a simdjson DOM's lazy proxies."""
    rows: list[list[Any]] = [[] for _ in range(6 + len(LINKS))]
    keys = ("cat", "name", "ts", "dur", "pid", "tid")
    for e in events:
        if e.get("ph") != "X":
            continue
        for i, k in enumerate(keys):
            rows[i].append(e.get(k))
        a = e.get("args")
        for i, k in enumerate(LINKS.values(), 6):
            rows[i].append(a.get(k) if a is not None else None)
    return rows


def _rows_columns(rows: list[list[Any]]) -> Columns:
    return {
        "cat": pl.Series("cat", rows[0], dtype=pl.String),
        "name": pl.Series("name", rows[1], dtype=pl.String),
        "ts_ns": _ns(rows[2], "ts_ns"),
        "dur_ns": _ns(rows[3], "dur_ns"),
        "pid": _int(rows[4], "pid"),
        "tid": _int(rows[5], "tid"),
        **{c: _int(rows[i], c) for i, c in enumerate(LINKS, 6)},
    }


# ---- (e) polars' own JSON readers ---------------------------------------------------------

_ARGS_SCHEMA = pl.Struct({k: pl.Int64 for k in LINKS.values()})


def _event_schema(ts: type[pl.DataType]) -> dict[str, Any]:
    return {
        "ph": pl.String,
        "cat": pl.String,
        "name": pl.String,
        "pid": pl.String,  # some events' pid is a name ("Spans"): cast after the filter
        "tid": pl.String,
        "ts": ts,
        "dur": ts,
        "args": _ARGS_SCHEMA,
    }


def _frame_columns(frame: pl.DataFrame) -> Columns:
    frame = frame.filter(pl.col("ph") == "X").unnest("args")
    ns = {c: _float_ns(pl.col(c)) for c in ("ts", "dur")}
    frame = frame.select(
        "cat",
        "name",
        ns["ts"].alias("ts_ns"),
        ns["dur"].alias("dur_ns"),
        pl.col("pid").cast(pl.Int64, strict=False),
        pl.col("tid").cast(pl.Int64, strict=False),
        *(pl.col(k).alias(c) for c, k in LINKS.items()),
    )
    return {c: frame[c] for c in frame.columns}


def polars_read_json(inp: Inputs) -> Columns:
    """The whole document with the events' schema given (inferring it fails or takes all the
    args' keys); then the events exploded and unnested."""
    schema = {"traceEvents": pl.List(pl.Struct(_event_schema(pl.Float64)))}
    doc = pl.read_json(io.BytesIO(inp.data), schema=schema)
    return _frame_columns(doc.select(pl.col("traceEvents").explode()).unnest("traceEvents"))


def polars_read_ndjson(inp: Inputs) -> Columns:
    """The best case for polars: the events already one per line (a rewrite, not timed)."""
    frame = pl.read_ndjson(io.BytesIO(inp.ndjson), schema=_event_schema(pl.Float64))
    return _frame_columns(frame)


# ---- (f) the floor ------------------------------------------------------------------------


def floor_count(inp: Inputs) -> Any:
    return inp.data.count(b"{")


def floor_memchr(inp: Inputs) -> Any:
    return inp.data.find(b"\x00")


OPTIONS: dict[str, tuple[str, Callable[[Inputs], Any]]] = {
    # name: (label, work)
    "scan": ("(a) `_scan.scan` alone", scan_only),
    "scan+cols": ("(a) `_scan.scan` + its columns as Series", scan_columns),
    "fast": ("(a) `_scan.scan` + `fast.columns` (today's chunk frame)", fast_columns),
    "msgspec": ("(b) msgspec typed decode alone", msgspec_decode),
    "msgspec+cols": ("(b) msgspec typed decode + columns", msgspec_columns),
    "orjson": ("(c) `orjson.loads` alone", orjson_loads),
    "orjson+cols": ("(c) `orjson.loads` + columns", orjson_columns),
    "pysimdjson": ("(d) pysimdjson parse (DOM) alone", pysimdjson_parse),
    "pysimdjson+cols": ("(d) pysimdjson + columns (lazy proxies)", pysimdjson_columns),
    "cysimdjson": ("(d) cysimdjson parse (DOM) alone", cysimdjson_parse),
    "cysimdjson+cols": ("(d) cysimdjson + columns", cysimdjson_columns),
    "read_json": ("(e) `pl.read_json` (schema) + explode/unnest", polars_read_json),
    "read_ndjson": ("(e) `pl.read_ndjson` on NDJSON (rewrite not timed)", polars_read_ndjson),
    "count": ("(f) `bytes.count(b'{')`", floor_count),
    "memchr": ("(f) `bytes.find(b'\\0')` (memchr)", floor_memchr),
}
REFERENCE = "scan+cols"
MODULES = {"pysimdjson": "simdjson", "cysimdjson": "cysimdjson", "orjson": "orjson"}


def _available(name: str) -> str | None:
    """None, or why the option cannot run here."""
    module = MODULES.get(name.split("+")[0])
    if module is None:
        return None
    try:
        __import__(module)
    except ImportError as exc:
        return f"not installed: {exc}"
    return None


def _load(path: Path) -> bytes:
    raw = path.read_bytes()
    return gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw


def _check(cols: Columns, ref: Columns) -> str:
    """'' when ``cols`` agree with the reference on rows, sums and distinct names."""
    bad = []
    for c in ref:
        a, b = cols[c], ref[c]
        if a.len() != b.len():
            bad.append(f"{c}: {a.len()} rows, not {b.len()}")
        elif c in ("cat", "name"):
            if a.n_unique() != b.n_unique() or a.null_count() != b.null_count():
                bad.append(f"{c}: {a.n_unique()} distinct, not {b.n_unique()}")
        else:
            sa, sb = sum(a.drop_nulls().to_list()), sum(b.drop_nulls().to_list())
            if a.null_count() != b.null_count() or sa != sb:
                diff = (a - b).abs().max()
                bad.append(f"{c}: sum {sa} vs {sb} (max |diff| {diff})")
    return "; ".join(bad)


def _peak_above_input(name: str, path: Path) -> float:
    """MiB of peak resident memory above the input's, one run in a child process."""
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); import scan_options as s; "
        "print(s._child_peak(sys.argv[2], sys.argv[3]))"
    )
    here = str(Path(__file__).parent)
    out = subprocess.run(
        [sys.executable, "-c", code, here, name, str(path)],
        check=True,
        capture_output=True,
        text=True,
    )
    return float(out.stdout.strip().splitlines()[-1])


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def _child_peak(name: str, path: str) -> float:
    inp = Inputs(_load(Path(path)))
    if name == "read_ndjson":
        inp.ndjson  # noqa: B018 (made before the measurement, as in the timed runs)
    work = OPTIONS[name][1]
    # the imports outside the measurement, but no run of the option before it: the memory a
    # first run frees stays mapped (malloc's heap, polars' allocator) and would hide the peak
    import tracecomm.ingest.fast  # noqa: F401

    _available(name)
    gc.collect()
    before = _status_kib("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")  # the peak RSS from here
    result = work(inp)
    peak = _status_kib("VmHWM")
    del result
    return (peak - before) / 1024


def measure(path: Path, names: list[str], rounds: int, memory: bool) -> dict[str, Any]:
    data = _load(path)
    inp = Inputs(data)
    gb = len(data) / 1e9
    runnable = {}
    skipped = {}
    for name in names:
        why = _available(name)
        if why:
            skipped[name] = why
        else:
            runnable[name] = OPTIONS[name][1]
    ref = scan_columns(inp)
    checks: dict[str, str] = {}
    for name, work in runnable.items():  # a first run: imports, caches, the checks
        if name == "read_ndjson":
            t0 = time.process_time()
            inp.ndjson  # noqa: B018
            checks["ndjson rewrite CPU s"] = f"{time.process_time() - t0:.2f}"
        try:
            out = work(inp)
        except Exception as exc:  # reported, the option left out
            skipped[name] = f"{type(exc).__name__}: {str(exc)[:200]}"
            continue
        if isinstance(out, dict) and set(out) == set(ref):
            checks[name] = _check(out, ref) or "same"
        del out
    for name in skipped:
        runnable.pop(name, None)
    wall: dict[str, list[float]] = {n: [] for n in runnable}
    cpu: dict[str, list[float]] = {n: [] for n in runnable}
    for _ in range(rounds):
        for name, work in runnable.items():
            gc.collect()
            t0, c0 = time.perf_counter(), time.process_time()
            out = work(inp)
            c1, t1 = time.process_time(), time.perf_counter()
            del out
            wall[name].append(t1 - t0)
            cpu[name].append(c1 - c0)
    peaks = {n: _peak_above_input(n, path) for n in runnable} if memory else {}
    rows = {}
    ref_cpu = statistics.median(cpu[REFERENCE])
    for name in runnable:
        c = statistics.median(cpu[name])
        rows[name] = {
            "wall_s": statistics.median(wall[name]),
            "cpu_s": c,
            "cpu_s_per_gb": c / gb,
            "x_scan_cols": c / ref_cpu,
            "gb_per_s": gb / statistics.median(wall[name]),
            "peak_mib": peaks.get(name),
            "check": checks.get(name, ""),
        }
    return {
        "path": str(path),
        "gb": gb,
        "x_events": ref["ts_ns"].len(),
        "rows": rows,
        "skipped": skipped,
        "ndjson_rewrite_cpu_s": checks.get("ndjson rewrite CPU s"),
    }


def _print(result: dict[str, Any]) -> None:
    print(
        f"\n{result['path']}: {result['gb'] * 1000:.1f} MB of JSON, "
        f"{result['x_events']:,} complete events"
    )
    print(
        f"{'option':58} {'wall s':>7} {'CPU s':>6} {'CPU s/GB':>8} {'x (a)':>6} "
        f"{'GB/s':>5} {'peak MiB':>8}  check"
    )
    for name, r in result["rows"].items():
        peak = "" if r["peak_mib"] is None else f"{r['peak_mib']:8.0f}"
        print(
            f"{OPTIONS[name][0]:58} {r['wall_s']:7.3f} {r['cpu_s']:6.3f} {r['cpu_s_per_gb']:8.2f} "
            f"{r['x_scan_cols']:6.2f} {r['gb_per_s']:5.2f} {peak:>8}  {r['check']}"
        )
    if result["ndjson_rewrite_cpu_s"]:
        print(
            f"the NDJSON rewrite (orjson, not timed above): {result['ndjson_rewrite_cpu_s']} CPU-s"
        )
    for name, why in result["skipped"].items():
        print(f"skipped {name}: {why}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--real", type=Path, help="a real trace (.json or .json.gz)")
    parser.add_argument("--generated", type=Path, help="a generated rank (.json)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--only", help="comma-separated option names (default: all)")
    parser.add_argument("--no-memory", dest="memory", action="store_false")
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args()
    names = args.only.split(",") if args.only else list(OPTIONS)
    results = []
    for path in (args.real, args.generated):
        if path is not None:
            results.append(measure(path, names, args.rounds, args.memory))
            _print(results[-1])
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
