"""``tracecomm export``: the chosen ranks and steps as one Chrome / Perfetto trace (Trace Event
Format, metrics.md §17). Lays out what the Report's export holds; computes nothing.

One process per rank (``pid`` = the rank, named ``rank N``), its CPU threads and GPU streams as
threads, and three tracks of tracecomm's own per rank: exposed communication (by collective
type), idle (by cause) and the waits inside collectives. Markers are instant events. Times are
µs with three decimals relative to ``baseTimeNanoseconds`` (exact ns), each rank shifted by its
host's clock offset so the ranks line up; the device and launch events keep Kineto's fields, so
tracecomm reads the file back (``--rank-from pid``) with the same figures.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson

from tracecomm.analysis.export_model import ExportedRank, TraceExport
from tracecomm.analysis.report import Report
from tracecomm.engine.export import COLLECTIVE_NAME, META_ARG_NAMES, RankExport
from tracecomm.render import View
from tracecomm.text import json_safe

GPU_TID = 1 << 40  # + device << 20 + stream: GPU lanes never meet a CPU thread id
TRACK_TID = 1 << 44  # + k: tracecomm's own tracks of a rank
TRACKS = ("exposed communication (by collective type)", "idle (by cause)", "waits in collectives")
CAT = "tracecomm"  # the category of every event tracecomm adds (no reader counts it as work)
_DEVICE_CAT = {"kernel": "kernel", "memcpy": "gpu_memcpy", "memset": "gpu_memset"}


def render_trace(report: Report, view: View) -> bytes:
    export = view.side.export if view.side is not None else None
    assert export is not None, "the report was built without --export"
    origin = _origin(export)
    events = list(_events(report, export, origin))
    doc = {
        "schemaVersion": 1,
        "displayTimeUnit": "ms",
        "baseTimeNanoseconds": origin,
        "traceEvents": events,
        "tracecomm": {
            "version": report.tool.version,
            "inputs": list(report.inputs),
            "steps": list(export.steps),
            "ranks": [
                {"rank": r.rank, "role": r.role, "clock_offset_ns": r.offset_ns, "reason": r.reason}
                for r in export.ranks
            ],
        },
    }
    return json_safe(orjson.dumps(doc) + b"\n")


def event_count(data: bytes) -> int:
    """How many events a rendered trace holds (for the size line the command prints)."""
    return len(orjson.loads(data)["traceEvents"])


def _origin(export: TraceExport) -> int:
    """The earliest exported time on the aligned clock, floored to a µs: ts 0."""
    starts = [
        w.cpu_start_ns - r.offset_ns
        for r in export.ranks
        if r.events is not None
        for w in r.events.windows
    ]
    for r in export.ranks:
        if r.events is not None and r.events.device.height:
            starts.append(int(r.events.device["start_ns"].min()) - r.offset_ns)  # type: ignore[arg-type]
        if r.events is not None and r.events.launches.height:
            starts.append(int(r.events.launches["start_ns"].min()) - r.offset_ns)  # type: ignore[arg-type]
    return (min(starts) // 1000) * 1000 if starts else 0


def _us(ns: int) -> float:
    """Relative ns as µs: ≤ 15 significant digits, so the float's shortest form is the exact
    three-decimal value (a reader parsing the text gets the ns back)."""
    return ns / 1000


def _events(report: Report, export: TraceExport, origin: int) -> Iterator[dict[str, Any]]:
    for order, r in enumerate(export.ranks):
        yield from _metadata(r, order)
        if r.events is None:
            continue
        shift = origin + r.offset_ns  # own clock -> relative aligned
        yield from _device(r.rank, r.events, shift)
        yield from _cpu(r.rank, r.events, shift)
        yield from _tracks(r, r.events, shift)
    yield from _markers(export, origin)


def _x(
    cat: str, name: str, pid: int, tid: int, start: int, end: int, args: dict[str, Any]
) -> dict[str, Any]:
    return {
        "ph": "X",
        "cat": cat,
        "name": name,
        "pid": pid,
        "tid": tid,
        "ts": _us(start),
        "dur": _us(end - start),
        "args": args,
    }


def _meta(name: str, pid: int, tid: int, args: dict[str, Any]) -> dict[str, Any]:
    return {"ph": "M", "name": name, "pid": pid, "tid": tid, "args": args}


def _flow_id(rank: int, correlation: int) -> int:
    """Flow ids are global in a trace: the rank's correlation ids kept apart by the rank."""
    return (rank << 40) + (correlation & ((1 << 40) - 1))


def _gpu_tid(device: int | None, stream: int | None) -> int:
    return GPU_TID + ((device or 0) << 20) + (stream or 0)


def _metadata(r: ExportedRank, order: int) -> Iterator[dict[str, Any]]:
    where = " · ".join(x for x in (r.host, *r.devices[:1]) if x)
    label = f"rank {r.rank} ({r.role}{', ' + where if where else ''})"
    yield _meta("process_name", r.rank, 0, {"name": label})
    yield _meta("process_sort_index", r.rank, 0, {"sort_index": order})
    yield _meta("process_labels", r.rank, 0, {"labels": r.role})
    if r.events is None:
        return
    threads = sorted({t for t in r.events.launches["tid"].drop_nulls().to_list()})
    threads += [
        w.cpu_tid for w in r.events.windows if w.cpu_tid is not None and w.cpu_tid not in threads
    ]
    for i, tid in enumerate(sorted(set(threads))):
        yield _meta("thread_name", r.rank, tid, {"name": f"thread {tid} (CPU)"})
        yield _meta("thread_sort_index", r.rank, tid, {"sort_index": i})
    lanes = r.events.device.select("device", "stream").unique().sort("device", "stream")
    for i, (device, stream) in enumerate(lanes.iter_rows()):
        tid = _gpu_tid(device, stream)
        yield _meta("thread_name", r.rank, tid, {"name": f"GPU {device} stream {stream}"})
        yield _meta("thread_sort_index", r.rank, tid, {"sort_index": 10_000 + i})
    for k, name in enumerate(TRACKS):
        yield _meta("thread_name", r.rank, TRACK_TID + k, {"name": f"tracecomm: {name}"})
        yield _meta("thread_sort_index", r.rank, TRACK_TID + k, {"sort_index": 20_000 + k})


def _device(rank: int, events: RankExport, shift: int) -> Iterator[dict[str, Any]]:
    cols = events.device.columns
    meta = [c for c in META_ARG_NAMES if c in cols]
    for row in events.device.sort("start_ns").iter_rows(named=True):
        args: dict[str, Any] = {"device": row["device"], "stream": row["stream"]}
        if row["correlation"] is not None:
            args["correlation"] = row["correlation"]
        for column in meta:  # every Kineto field the trace gave it, under its own name
            if row[column] is not None:
                args[META_ARG_NAMES[column]] = row[column]
        if row["cls"] == "comm" and row["coll_type"] is not None and not row.get("collective_name"):
            # none in the trace: the name a re-read types as the engine did
            args["Collective name"] = COLLECTIVE_NAME.get(row["coll_type"], "barrier")
        if "graph_id" in cols and row["graph_id"] is not None:
            args["graph id"] = row["graph_id"]
            args["graph node id"] = row["graph_node"]
        tid = _gpu_tid(row["device"], row["stream"])
        start, end = row["start_ns"] - shift, row["end_ns"] - shift
        yield _x(_DEVICE_CAT.get(row["kind"], "kernel"), row["name"], rank, tid, start, end, args)
        if row["correlation"] is not None:
            flow = _flow_id(rank, row["correlation"])
            yield {
                "ph": "f",
                "bp": "e",
                "cat": "ac2g",
                "name": "ac2g",
                "id": flow,
                "pid": rank,
                "tid": tid,
                "ts": _us(start),
            }


def _cpu(rank: int, events: RankExport, shift: int) -> Iterator[dict[str, Any]]:
    for w in events.windows:
        if w.cpu_tid is not None:
            yield _x(
                "user_annotation",
                f"ProfilerStep#{w.step}",
                rank,
                w.cpu_tid,
                w.cpu_start_ns - shift,
                w.cpu_end_ns - shift,
                {},
            )
    for name, tid, start, end in events.loaders.select(
        "name", "tid", "start_ns", "end_ns"
    ).iter_rows():
        yield _x("user_annotation", name, rank, tid, start - shift, end - shift, {})
    linked = set(events.device["correlation"].drop_nulls().to_list())
    for row in events.launches.iter_rows(named=True):
        start, end = row["start_ns"] - shift, row["end_ns"] - shift
        ext = row["external_id"]
        if row["op"] is not None and ext is not None:
            # the op the launch names, over the launch itself (its own span is not kept)
            yield _x("cpu_op", row["op"], rank, row["tid"], start, end, {"External id": ext})
        args: dict[str, Any] = {"correlation": row["correlation"]}
        if ext is not None:
            args["External id"] = ext
        yield _x("cuda_runtime", row["name"], rank, row["tid"], start, end, args)
        if row["correlation"] in linked:
            flow = _flow_id(rank, row["correlation"])
            yield {
                "ph": "s",
                "cat": "ac2g",
                "name": "ac2g",
                "id": flow,
                "pid": rank,
                "tid": row["tid"],
                "ts": _us(start),
            }


def _tracks(r: ExportedRank, events: RankExport, shift: int) -> Iterator[dict[str, Any]]:
    exposed, idle, waits = (TRACK_TID + k for k in range(len(TRACKS)))
    for step, start, end, types in events.exposed.iter_rows():
        yield _x(
            CAT, f"exposed {types}", r.rank, exposed, start - shift, end - shift, {"step": step}
        )
    for step, start, end, cause in events.idle.iter_rows():
        yield _x(CAT, f"idle: {cause}", r.rank, idle, start - shift, end - shift, {"step": step})
    for start, wait, kind in r.waits.iter_rows():
        yield _x(
            CAT,
            f"wait in {kind}",
            r.rank,
            waits,
            start - shift,
            start + wait - shift,
            {"wait_ns": wait},
        )


def _markers(export: TraceExport, origin: int) -> Iterator[dict[str, Any]]:
    first: dict[int, int] = {}
    offsets = {r.rank: r.offset_ns for r in export.ranks}
    for r in export.ranks:
        if r.events is not None and r.events.windows:
            first[r.rank] = r.events.windows[0].start_ns - r.offset_ns - origin
    pid = export.ranks[0].rank if export.ranks else 0
    for m in export.markers:
        if m.rank is not None and m.rank in first:
            at = first[m.rank] if m.at_ns is None else m.at_ns - offsets[m.rank] - origin
            scope, where = "p", m.rank
        else:
            at, scope, where = 0, "g", pid
        yield {
            "ph": "i",
            "s": scope,
            "cat": CAT,
            "name": m.name,
            "pid": where,
            "tid": 0,
            "ts": _us(at),
            "args": {"text": m.text, "severity": m.severity},
        }


__all__ = ["CAT", "TRACKS", "event_count", "render_trace"]
