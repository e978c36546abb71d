"""Large traces read in chunks: the event array is decoded a few tens of MB at a time and
turned into columns at once, so neither the whole JSON text nor every event as a Python object
is ever held (issue 8: a 2 GB trace under 2 GB of peak memory).

The header (everything before ``"traceEvents": [``) and the trailer (what Kineto writes after
the array, ``baseTimeNanoseconds`` among it) are decoded as small documents of their own. A
chunk ends at an event boundary (``}, {``); should one fall inside a string, or the file not
end as a trace ends (truncated, not an object), the caller falls back to the whole-file reader,
which has the salvage logic.
"""

from __future__ import annotations

import gzip
import re
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import msgspec
import polars as pl

from tracecomm.ingest import kineto as k
from tracecomm.ingest.model import DEVICE_KINDS, RankEvents

STREAM_FROM_BYTES = 256 << 20  # uncompressed JSON; smaller files are read whole (faster)
CHUNK_BYTES = 8 << 20
_HEADER_LIMIT = 64 << 20
_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_CHUNK_DECODER = msgspec.json.Decoder(list[k._AnyPhase], float_hook=str)


class Fallback(Exception):
    """Not streamable: the whole-file reader takes over."""


def stream_rank(path: Path) -> RankEvents:
    """Raises ``Fallback`` when the file is not a well-formed trace object."""
    with _open(path) as handle:
        header, rest = _header(handle, path)
        frames: list[pl.DataFrame] = []
        warnings: list[str] = []
        repaired = 0
        begin_end: list[Any] = []
        device_seen = False
        tail = b""
        for chunk, last in _chunks(handle, rest):
            if last:
                tail = chunk
                break
            events = _decode(b"[" + chunk + b"]")
            frame, w, r = _frame(events, path, device_seen, begin_end)
            device_seen = device_seen or _has_device(frame)
            frames.append(frame)
            warnings.extend(w)
            repaired += r
    trailer = _trailer(tail)
    events = list(trailer.traceEvents or [])
    frame, w, r = _frame(events, path, device_seen, begin_end)
    frames.append(frame)
    warnings.extend(w)
    repaired += r
    if begin_end:
        paired = k._with_begin_end(begin_end)
        frame, w, r = _frame(paired, path, device_seen, [])
        frames.append(frame)
        warnings.extend(w)
        repaired += r
    columns = pl.concat(frames, how="vertical_relaxed")
    device_seen = device_seen or _has_device(columns)
    if device_seen:
        columns = columns.filter(_gpu_trace_row())
    doc = _merge(header, trailer)
    return k.rank_from_columns(str(path), k._meta(doc), columns, warnings, False, repaired)


def _open(path: Path) -> IO[bytes]:
    with path.open("rb") as probe:
        gz = probe.read(2) == k._GZIP_MAGIC
    handle: IO[bytes] = gzip.open(path, "rb") if gz else path.open("rb")  # type: ignore[assignment]  # noqa: SIM115
    return handle


def _read(handle: IO[bytes], size: int) -> bytes:
    try:
        return handle.read(size)
    except (EOFError, OSError, zlib.error) as exc:  # a cut or corrupt .gz
        raise Fallback(str(exc)) from None


def _header(handle: IO[bytes], path: Path) -> tuple[k._Trace, bytes]:
    buf = b""
    while len(buf) < _HEADER_LIMIT:
        more = _read(handle, 1 << 20)
        buf += more
        m = _EVENTS_KEY.search(buf)
        if m is not None:
            head = buf[: m.end()].removeprefix(k._UTF8_BOM)
            try:
                doc = k._DECODER.decode(head + b"]}")
            except (msgspec.DecodeError, msgspec.ValidationError):
                raise Fallback("header") from None
            return doc, buf[m.end() :]
        if not more:
            break
    raise Fallback("no traceEvents array near the start")


def _chunks(handle: IO[bytes], rest: bytes) -> Iterator[tuple[bytes, bool]]:
    """Runs of whole events (without the surrounding brackets); the last item is the array's
    remainder with the trailer, flagged ``True``."""
    buf = rest
    while True:
        more = _read(handle, CHUNK_BYTES)
        buf += more
        if not more:
            yield buf, True
            return
        cut = _last_boundary(buf)
        if cut is None:
            continue
        yield buf[: cut[0]], False
        buf = buf[cut[1] :]


def _last_boundary(buf: bytes) -> tuple[int, int] | None:
    """(end of the chunk, start of the next event) at the last ``}, {`` of the buffer."""
    window = buf[-(1 << 20) :]
    matches = list(k._EVENT_BOUNDARY.finditer(window))
    if not matches:
        return None
    last = matches[-1]
    offset = len(buf) - len(window)
    return offset + last.start() + 1, offset + last.end() - 1


def _decode(text: bytes) -> list[Any]:
    try:
        return _CHUNK_DECODER.decode(text)
    except (msgspec.DecodeError, msgspec.ValidationError):
        raise Fallback("a chunk did not decode") from None


def _trailer(tail: bytes) -> k._Trace:
    try:
        doc: k._Trace = k._TAGGED_DECODER.decode(b'{"traceEvents":[' + tail)
    except (msgspec.DecodeError, msgspec.ValidationError):
        raise Fallback("the file does not end as a trace ends") from None
    return doc


def _frame(
    events: list[Any], path: Path, device_seen: bool, begin_end: list[Any]
) -> tuple[pl.DataFrame, list[str], int]:
    """Columns of a chunk. Until device work has been seen, CPU ops are kept too (a trace
    without any device work is analyzed on its CPU timeline); B / E events wait for the end."""
    begin_end.extend(e for e in events if e.ph in ("B", "E"))
    rows = k._wanted_rows(events, cpu_only=not device_seen)
    return k._columns(events, path, rows)


def _has_device(frame: pl.DataFrame) -> bool:
    return bool(frame.height) and bool(frame["kind"].is_in(list(DEVICE_KINDS)).any())


def _gpu_trace_row() -> pl.Expr:
    """The rows ``_wanted_rows`` keeps in a trace with device work."""
    cpu_op = pl.col("kind") == "cpu_op"
    kept_op = (pl.col("name") == k._COMM_OP) | (
        pl.col("name").is_in(list(k.SHAPED_OPS)) & pl.col("input_dims").is_not_null()
    )
    return ~cpu_op | kept_op


def _merge(header: k._Trace, trailer: k._Trace) -> k._Trace:
    """Header fields, with the trailer's where the header has none (Kineto writes
    baseTimeNanoseconds last)."""
    names = ("distributedInfo", "deviceProperties", "baseTimeNanoseconds", "trace_id", "host_name")
    values = {
        name: getattr(header, name) if getattr(header, name) is not None else getattr(trailer, name)
        for name in names
    }
    return k._Trace(traceEvents=[], **values)
