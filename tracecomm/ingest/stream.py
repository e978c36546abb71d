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

import io
import re
from collections.abc import Callable, Iterator
from operator import attrgetter
from pathlib import Path
from typing import IO, Any, NamedTuple

import msgspec
import polars as pl

from tracecomm.ingest import fast
from tracecomm.ingest.events import (
    COMM_OP,
    DECODER,
    EVENT_BOUNDARY,
    GZIP_MAGIC,
    LAUNCH_OP_KIND,
    TAGGED_DECODER,
    UTF8_BOM,
    AnyPhase,
    Trace,
    trace_meta,
)
from tracecomm.ingest.frames import (
    columns,
    concat_chunks,
    rank_from_frames,
    split_frames,
    with_begin_end,
)
from tracecomm.ingest.inflate import inflater
from tracecomm.ingest.limits import BoundedReader, refuse_event
from tracecomm.ingest.model import DEVICE_KINDS, RankEvents, ReadOptions

STREAM_FROM_BYTES = 16 << 20  # uncompressed JSON; smaller files are read whole
CHUNK_BYTES = 8 << 20
# A split runs one plan per frame, about 2 ms whatever a chunk holds: the real 35 MB rank's
# five chunks took 10 ms one by one and 2.9 ms together. Chunks are split together up to this
# much of their columns (polars' estimate; the real rank's are 8.6 MB in all, a generated
# 200 MB rank's 3 MB a chunk), which bounds what waits unsplit: at 64 MiB the largest
# process of the 8 x 200 MB run peaked 40 MiB higher than with every chunk split alone.
SPLIT_BATCH_BYTES = 8 << 20
_HEADER_LIMIT = 64 << 20
_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_PHASE = attrgetter("ph")
_CHUNK_DECODER = msgspec.json.Decoder(list[AnyPhase], float_hook=str)


class Fallback(Exception):
    """Not streamable: the whole-file reader takes over."""


def stream_rank(path: Path, read: ReadOptions) -> RankEvents:
    """Raises ``Fallback`` when the file is not a well-formed trace object."""
    parts: dict[str, list[pl.DataFrame]] = {}
    batch = _Batch(parts)
    pending: list[pl.DataFrame] = []  # unsplit chunks of a trace not yet known to have devices
    warnings: list[str] = []
    repaired = 0
    begin_end: list[Any] = []
    with _open(path, read) as handle:
        header, rest = _header(handle, path)
        # a trace that lists GPUs keeps only the CPU ops it needs from the start (Kineto writes
        # every CPU event before the first kernel: keeping them all would double the memory)
        gpu_listed = bool(header.deviceProperties)
        state = {"device": gpu_listed}
        tail = b""

        def events(body: bytes | memoryview, head: bytes, text: Callable[[], bytes]) -> int:
            """A run of events through the scanner, else the general reader (``text``: the
            run whole); the count of repaired times."""
            scanned = fast.columns(body, path, not state["device"], read.shaped_ops, True, head)
            if scanned is None:
                batch.flush()
                decoded = _decode(b"[" + text() + b"]")
                return _take(decoded, path, read, state, parts, pending, warnings, begin_end)
            frame, w, fixed, ops = scanned
            warnings.extend(w)
            if state["device"]:
                batch.add(frame, ops)
            else:
                _absorb(frame, state, parts, pending)  # the scanner kept every CPU op: no ops
            return fixed

        for chunk in _chunks(handle, rest, path, read):
            if chunk.final:
                tail = chunk.head
                break
            repaired += events(chunk.body, chunk.head, chunk.text)
    trailer = _trailer(tail)
    # the array's remainder, a few events: the scanner's too (the general reader's fixed
    # cost, 2.6 ms, was most of what the last read of a rank cost)
    last = _last_events(tail)
    if last:
        repaired += events(last, b"", lambda: last)
    batch.flush()
    if not parts:  # no event at all: the general reader's empty frames
        repaired += _take([], path, read, state, parts, pending, warnings, begin_end)
    if begin_end:
        paired = with_begin_end(begin_end)
        repaired += _take(paired, path, read, state, parts, pending, warnings, [])
    for frame in pending:  # a CPU-only trace: every CPU op stays
        _split(frame, parts)
    if gpu_listed and not any(f.height for f in parts.get("device", [])):
        raise Fallback("no device work in a trace that lists GPUs")  # CPU timeline: read whole
    frames = {name: concat_chunks(fs) for name, fs in parts.items()}
    doc = _merge(header, trailer)
    return rank_from_frames(str(path), trace_meta(doc), frames, warnings, False, repaired)


def _take(
    events: list[Any],
    path: Path,
    read: ReadOptions,
    state: dict[str, bool],
    parts: dict[str, list[pl.DataFrame]],
    pending: list[pl.DataFrame],
    warnings: list[str],
    begin_end: list[Any],
) -> int:
    """Columns of one chunk, split at once; B / E events wait for the end. Until device work
    has been seen (or the header lists GPUs), all CPU ops are kept unsplit: without device
    work the trace is analyzed on its CPU timeline."""
    phases = set(map(_PHASE, events))
    if "B" in phases or "E" in phases:
        begin_end.extend(e for e in events if e.ph in ("B", "E"))
    frame, w, repaired = columns(events, path, read.shaped_ops, not state["device"])
    warnings.extend(w)
    _absorb(frame, state, parts, pending)
    return repaired


def _absorb(
    frame: pl.DataFrame,
    state: dict[str, bool],
    parts: dict[str, list[pl.DataFrame]],
    pending: list[pl.DataFrame],
) -> None:
    """Split a chunk's columns at once, or keep them whole until the trace shows device work."""
    if not state["device"] and _has_device(frame):
        state["device"] = True
        for early in pending:
            _split(_as_gpu_trace(early), parts)
        pending.clear()
        frame = _as_gpu_trace(frame)
    if state["device"]:
        _split(frame, parts)
    else:
        pending.append(frame)


class _Batch:
    """The scanner's chunks of a trace known to have device work, split together
    (``SPLIT_BATCH_BYTES``). The CPU ops kept only as the op a launch may name (the scanner
    returns them apart, as ``ops``) follow the batch's split frames: within a batch the ops
    are no longer in file order, which only a repeated External id could tell, and then
    either op is named (``frames.with_launch_ops``)."""

    def __init__(self, parts: dict[str, list[pl.DataFrame]]) -> None:
        self.parts = parts
        self._frames: list[pl.DataFrame] = []
        self._ops: list[pl.DataFrame] = []
        self._bytes = 0

    def add(self, frame: pl.DataFrame, ops: pl.DataFrame | None) -> None:
        if self._frames and frame.schema != self._frames[0].schema:
            self.flush()
        self._frames.append(frame)
        if ops is not None and ops.height:
            self._ops.append(ops)
        self._bytes += int(frame.estimated_size())
        if self._bytes >= SPLIT_BATCH_BYTES:
            self.flush()

    def flush(self) -> None:
        if self._frames:
            frames, self._frames, self._bytes = self._frames, [], 0
            _split(pl.concat(frames, rechunk=False) if len(frames) > 1 else frames[0], self.parts)
        if self._ops:
            self.parts.setdefault("ops", []).extend(self._ops)
            self._ops = []


def _split(frame: pl.DataFrame, parts: dict[str, list[pl.DataFrame]]) -> None:
    """A chunk's frames (only those it has rows for; the first chunk has every one, empty or
    not); device rows are numbered across chunks (``dev_row``)."""
    if not parts:  # every frame, in the same query as the chunk's
        parts.update((name, [part]) for name, part in split_frames(frame).items())
        return
    offset = sum(f.height for f in parts["device"])
    kinds = set(frame["kind"].unique().to_list()) - {None}
    for name, part in split_frames(frame, kinds, offset).items():
        parts.setdefault(name, []).append(part)


def _open(path: Path, read: ReadOptions) -> IO[bytes]:
    """The file's JSON text as a stream; a gzip file's inflation counted against its bound."""
    with path.open("rb") as probe:
        gz = probe.read(2) == GZIP_MAGIC
    if not gz:
        return path.open("rb")
    return BoundedReader(inflater().open(path), path, read)  # type: ignore[return-value]


def _read(handle: IO[bytes], size: int) -> bytes:
    try:
        return handle.read(size)
    except inflater().errors as exc:  # a cut or corrupt .gz
        raise Fallback(str(exc)) from None


def _reads(handle: IO[bytes]) -> Iterator[bytes | memoryview]:
    """The rest of the file, ``CHUNK_BYTES`` a read, then an empty read. A plain file fills
    one buffer each time, so each read is a view of it, valid until the next: a fresh 8 MB
    ``bytes`` a read was faulted in page by page (the real rank's parse 50 -> 42 ms with the
    other stream changes). A gzip reader has no ``readinto`` of its own (isal's, zlib's):
    it would read into fresh memory and copy, so it keeps its own reads."""
    if not isinstance(handle, io.BufferedReader):
        while more := _read(handle, CHUNK_BYTES):
            yield more
        yield b""
        return
    buffer = memoryview(bytearray(CHUNK_BYTES))
    while True:
        size = handle.readinto(buffer)
        yield buffer[:size]
        if not size:
            return


def _header(handle: IO[bytes], path: Path) -> tuple[Trace, bytes]:
    buf = b""
    while len(buf) < _HEADER_LIMIT:
        more = _read(handle, 1 << 20)
        buf = more if buf.isspace() else buf + more  # leading whitespace is no header
        m = _EVENTS_KEY.search(buf)
        if m is not None:
            head = buf[: m.end()].removeprefix(UTF8_BOM)
            try:
                doc = DECODER.decode(head + b"]}")
            except (msgspec.DecodeError, msgspec.ValidationError):
                raise Fallback("header") from None
            return doc, buf[m.end() :]
        if not more:
            break
    raise Fallback("no traceEvents array near the start")


class Chunk(NamedTuple):
    """A run of whole events as the file has them: ``head`` + ``sep`` + ``body``. ``head``
    holds the event the previous read cut (its start, then its end from this read: a small
    copy); ``body`` is a view of this read, not copied (a copy of every chunk cost twice the
    inflation on a real trace), valid until the next chunk is taken (``_reads``)."""

    head: bytes
    sep: bytes
    body: bytes | memoryview
    final: bool = False  # the array's remainder and the trailer, in ``head``

    def text(self) -> bytes:
        return self.head + self.sep + bytes(self.body)


def _chunks(handle: IO[bytes], rest: bytes, path: Path, read: ReadOptions) -> Iterator[Chunk]:
    """Runs of whole events (without the surrounding brackets); the last one (``body``
    empty) is the array's remainder with the trailer. A run of more than ``max_event_bytes``
    without an event boundary is refused (one giant event or string: unbounded memory)."""
    tail, offset = rest, 0  # the bytes after the last boundary read so far, and where
    for more in _reads(handle):
        if not more:
            yield Chunk(tail, b"", b"", final=True)
            return
        last = _last_boundary(more)
        first = EVENT_BOUNDARY.search(more) if last is not None else None
        if last is None or first is None:  # no boundary wholly in this read: keep reading
            tail += more
            if tail.isspace():  # whitespace between events holds nothing: keep none of it
                offset, tail = offset + len(tail), b""
            elif len(tail) > read.max_event_bytes + CHUNK_BYTES:
                raise refuse_event(path, offset, read)
            continue
        head_end, body_start = first.start() + 1, first.end() - 1
        if body_start < last[0]:
            yield Chunk(
                tail + more[:head_end],
                bytes(more[head_end:body_start]),
                memoryview(more)[body_start : last[0]],
            )
        else:  # one boundary in this read: the head is the whole run
            yield Chunk(tail + more[:head_end], b"", b"")
        offset += len(tail) + last[1]
        tail = bytes(more[last[1] :])


def _last_boundary(buf: bytes | memoryview) -> tuple[int, int] | None:
    """(end of the chunk, start of the next event) at the last ``}, {`` of the buffer: looked
    for in its last 64 KiB, then its last MiB (matches cannot overlap, so the last one wholly
    inside the shorter tail is the last one of the longer)."""
    for tail in (1 << 16, 1 << 20):
        matches = list(EVENT_BOUNDARY.finditer(buf, max(0, len(buf) - tail)))
        if matches:
            last = matches[-1]
            return last.start() + 1, last.end() - 1
        if tail >= len(buf):
            break
    return None


def _decode(text: bytes) -> list[Any]:
    try:
        return _CHUNK_DECODER.decode(text)
    except (msgspec.DecodeError, msgspec.ValidationError):
        raise Fallback("a chunk did not decode") from None


class _RawEvents(msgspec.Struct, gc=False):
    traceEvents: list[msgspec.Raw] | None = None  # as ``Trace`` has it (a later key may null it)


_RAW_EVENTS = msgspec.json.Decoder(_RawEvents)


def _last_events(tail: bytes) -> bytes:
    """The events ``tail`` holds (``_trailer``'s), as their text separated by commas."""
    try:
        raw = _RAW_EVENTS.decode(b'{"traceEvents":[' + tail)
    except (msgspec.DecodeError, msgspec.ValidationError):
        raise Fallback("the file does not end as a trace ends") from None
    return b",".join(raw.traceEvents or [])


def _trailer(tail: bytes) -> Trace:
    try:
        doc: Trace = TAGGED_DECODER.decode(b'{"traceEvents":[' + tail)
    except (msgspec.DecodeError, msgspec.ValidationError):
        raise Fallback("the file does not end as a trace ends") from None
    return doc


def _has_device(frame: pl.DataFrame) -> bool:
    return bool(frame.height) and bool(frame["kind"].is_in(list(DEVICE_KINDS)).any())


def _as_gpu_trace(frame: pl.DataFrame) -> pl.DataFrame:
    """The rows as ``_wanted_rows`` keeps them in a trace with device work: CPU ops without
    collective metadata or shapes only as the op a launch may name."""
    cpu_op = pl.col("kind") == "cpu_op"
    # the readers attach shapes only to the ops whose shapes were asked for
    kept_op = (pl.col("name") == COMM_OP) | pl.col("input_dims").is_not_null()
    return frame.with_columns(
        pl.when(cpu_op & ~kept_op)
        .then(pl.lit(LAUNCH_OP_KIND))
        .otherwise(pl.col("kind"))
        .alias("kind")
    )


def _merge(header: Trace, trailer: Trace) -> Trace:
    """Header fields, with the trailer's where the header has none (Kineto writes
    baseTimeNanoseconds last)."""
    names = ("distributedInfo", "deviceProperties", "baseTimeNanoseconds", "trace_id", "host_name")
    values = {
        name: getattr(header, name) if getattr(header, name) is not None else getattr(trailer, name)
        for name in names
    }
    return Trace(traceEvents=[], **values)
