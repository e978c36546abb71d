"""The general reader: a whole file's bytes (gunzipped, whatever its suffix) decoded as one
document, and what can be saved of a broken one: a file cut short keeps its complete events,
invalid UTF-8 is replaced and said, the bare-array form gets its envelope.

It is the slow path and the one that explains; the C scanner and the streaming reader hand
every file they cannot read cleanly to it.
"""

from __future__ import annotations

from pathlib import Path

import msgspec

from tracecomm.errors import NotATrace, TraceError
from tracecomm.ingest.events import EVENT_BOUNDARY, GZIP_MAGIC, UTF8_BOM, Trace, decode_doc
from tracecomm.ingest.limits import check_plain_size, gunzip_bounded
from tracecomm.ingest.model import ReadOptions


def read_document(path: Path, read: ReadOptions | None = None) -> tuple[Trace, list[str], bool]:
    """The decoded document, its warnings, and whether it was cut short (salvaged)."""
    data = read_trace_bytes(path, read)
    warnings: list[str] = []
    doc, salvaged = _decode(data, path, warnings)
    size = len(data)
    del data
    if doc.traceEvents is None:
        raise NotATrace(path, "no traceEvents list: not a Kineto trace")
    if salvaged is not None:
        warnings.append(
            f"{path}: truncated file (job killed while writing?): the JSON breaks off at byte "
            f"{size:,}; salvaged the {salvaged} complete events before it; steps cut short "
            "are excluded"
        )
    return doc, warnings, salvaged is not None


def read_trace_bytes(path: Path, read: ReadOptions | None = None) -> bytes:
    """The file's JSON text, gunzipped when it starts with the gzip magic (suffix or not), within
    the bounds of ``read`` (``ingest.limits``)."""
    read = read or ReadOptions()
    try:
        check_plain_size(path, read)
        with path.open("rb") as handle:
            raw = handle.read()
    except OSError as exc:
        raise TraceError(path, f"cannot read: {exc.strerror or exc}") from None
    if not raw.startswith(GZIP_MAGIC):
        return raw
    data, _ = gunzip_bounded(raw, path, read)  # a cut .gz still holds a usable prefix
    return data


def _decode(data: bytes, path: Path, warnings: list[str]) -> tuple[Trace, int | None]:
    data = data.removeprefix(UTF8_BOM)
    if data.lstrip()[:1] == b"[":
        # The Chrome trace format's bare-array form: the same events without the envelope.
        data = b'{"traceEvents":' + data + b"}"
    try:
        return decode_doc(data), None
    except msgspec.ValidationError as exc:
        raise TraceError(path, f"unexpected trace structure: {exc}") from None
    except UnicodeDecodeError:
        return _replace_invalid_utf8(data, path, warnings)
    except msgspec.DecodeError as exc:
        if "utf-8" in str(exc).lower():  # msgspec ≥ 0.23 reports it as a DecodeError
            return _replace_invalid_utf8(data, path, warnings)
        if not data.strip():
            raise TraceError(path, "empty file") from None
        if data.lstrip()[:1] != b"{":
            raise TraceError(path, "not JSON (does not start with '{' or '[')") from None
        salvaged = _salvage(data)
        if salvaged is None:
            raise TraceError(path, f"invalid JSON: {exc}") from None
        return salvaged, len(salvaged.traceEvents or [])


def _replace_invalid_utf8(data: bytes, path: Path, warnings: list[str]) -> tuple[Trace, int | None]:
    """Older Kineto wrote raw bytes of kernel names: keep the events, mark the bytes."""
    warnings.append(f"{path}: invalid UTF-8 bytes in the file were replaced with U+FFFD")
    return _decode(data.decode("utf-8", "replace").encode(), path, warnings)


def _salvage(data: bytes, tries: int = 20) -> Trace | None:
    """Keep the complete events of a file cut short by closing the array after the last one."""
    start = data.find(b'"traceEvents"')
    if start < 0:
        return None
    window = 1 << 20
    tail_from = max(start, len(data) - window)
    cuts = [m.start() + 1 for m in EVENT_BOUNDARY.finditer(data, tail_from)]
    for cut in reversed(cuts[-tries:]):
        try:
            doc = decode_doc(data[:cut] + b"]}")
        except (msgspec.DecodeError, msgspec.ValidationError):
            continue
        if doc.traceEvents:
            return doc
    return None
