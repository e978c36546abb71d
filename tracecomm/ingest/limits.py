"""Bounds on what one trace file may make the readers do: how far it may inflate (gzip), how
large it may be, how long one event may run. A file past a bound is refused with one line that
names it, the bound, and the option that raises it; it never runs unbounded.

Real Kineto traces inflate 8–30× and hold events of a few KB; the defaults leave a wide margin.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import IO

from tracecomm.errors import TraceError
from tracecomm.ingest.inflate import inflater
from tracecomm.ingest.model import ReadOptions

_BLOCK = 1 << 20


def size_text(n: float) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:,.1f} {unit}"
    return f"{int(n):,} bytes"


def inflated_limit(path: Path, read: ReadOptions) -> int:
    """The most a gzip file may inflate to: its size × the ratio, at most the trace bound."""
    compressed = os.path.getsize(path)
    return min(read.max_trace_bytes, int(max(compressed, 1) * read.max_inflate_ratio))


def refuse_inflation(path: Path, inflated: int, read: ReadOptions) -> TraceError:
    compressed = os.path.getsize(path)
    if inflated > read.max_trace_bytes:
        return TraceError(
            path,
            f"inflates past {size_text(read.max_trace_bytes)} (the largest trace this run reads; "
            "raise it with --max-trace-size)",
        )
    return TraceError(
        path,
        f"a {size_text(compressed)} gzip file that inflates past {read.max_inflate_ratio:g}× "
        f"its size ({size_text(inflated)}): a decompression bomb, or raise the bound with "
        "--max-inflate-ratio",
    )


def check_plain_size(path: Path, read: ReadOptions) -> None:
    size = os.path.getsize(path)
    if size > read.max_trace_bytes:
        raise TraceError(
            path,
            f"{size_text(size)}, past {size_text(read.max_trace_bytes)} (the largest trace this "
            "run reads; raise it with --max-trace-size)",
        )


def gunzip_bounded(raw: bytes, path: Path, read: ReadOptions) -> tuple[bytes, bool]:
    """The inflated bytes of a gzip file (all members), and whether it ended cleanly (False:
    cut short, the prefix is what there was). Raises ``TraceError`` past the bound or on
    corrupt data."""
    limit = inflated_limit(path, read)
    gz = inflater()
    parts: list[bytes] = []
    total = 0
    data = raw
    while data:
        inflating = gz.decompressobj()
        try:
            while data:
                out = inflating.decompress(data, _BLOCK)
                data = inflating.unconsumed_tail
                total += len(out)
                if total > limit:
                    raise refuse_inflation(path, total, read)
                parts.append(out)
                if inflating.eof:
                    break
        except gz.errors as exc:
            raise TraceError(path, f"corrupt gzip data ({exc})") from None
        if not inflating.eof:
            if total == 0:
                raise TraceError(path, "truncated gzip file: no complete data")
            return b"".join(parts), False
        data = inflating.unused_data.lstrip(b"\x00")  # another member may follow
    return b"".join(parts), True


class BoundedReader:
    """A decompressed stream that refuses to inflate past the bound (the streaming reader)."""

    def __init__(self, handle: IO[bytes], path: Path, read: ReadOptions) -> None:
        self._handle, self._path, self._read = handle, path, read
        self._limit = inflated_limit(path, read)
        self._total = 0

    def read(self, size: int) -> bytes:
        data = self._handle.read(size)
        self._total += len(data)
        if self._total > self._limit:
            raise refuse_inflation(self._path, self._total, self._read)
        return data

    def close(self) -> None:
        self._handle.close()

    def __enter__(self) -> BoundedReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def refuse_event(path: Path, offset: int, read: ReadOptions) -> TraceError:
    return TraceError(
        path,
        f"no event boundary in {size_text(read.max_event_bytes)} from byte {offset:,}: one event "
        "(or one string) longer than this run reads (raise it with --max-event-size)",
    )
