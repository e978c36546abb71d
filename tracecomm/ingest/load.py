"""``load_rank(path) -> RankEvents``: one trace file as columns, through the fastest reader that
can read it — the streaming reader for large files, the C scanner for well-formed ones, else the
general reader, which salvages, repairs and explains. Every reader gives the same frames.

It is a pure function of the file and the read options: the unit that runs in a process pool
and on remote workers.
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import msgspec

from tracecomm import collector
from tracecomm.errors import TraceError
from tracecomm.ingest import fast, stream
from tracecomm.ingest.discover import json_size
from tracecomm.ingest.events import (
    ENVELOPE_DECODER,
    UTF8_BOM,
    Envelope,
    MetaEvent,
    trace_meta,
)
from tracecomm.ingest.frames import rank_events, rank_from_columns
from tracecomm.ingest.limits import check_plain_size
from tracecomm.ingest.model import RankEvents, ReadOptions
from tracecomm.ingest.salvage import read_document, read_trace_bytes


def load_rank(path: Path | str, read: ReadOptions | None = None) -> RankEvents:
    """Parse one trace file. Raises ``TraceError`` (or ``NotATrace``) for unusable input."""
    read = read or ReadOptions()
    # Millions of short-lived acyclic objects: the cyclic collector would rescan them over and
    # over (a third of the parse time) and can reclaim nothing.
    with collector.paused():
        return _load_rank(Path(path), read)


def load_merged(
    path: Path | str, rank_from: str, read: ReadOptions | None = None
) -> list[RankEvents]:
    """One Chrome trace holding several ranks (a merged trace): one RankEvents per rank.

    ``rank_from="pid"``: each process id is a rank (an int, or the digits of a string pid);
    ``"process_name"``: the first number in each process's ``process_name`` metadata (``rank 3``,
    ``Rank 3 GPU 0``) is its rank. Processes without one are left out with a warning."""
    with collector.paused():
        return _merged(path, rank_from, read or ReadOptions())


def _merged(path: Path | str, rank_from: str, read: ReadOptions) -> list[RankEvents]:
    doc, warnings, truncated = read_document(Path(path), read)
    events = doc.traceEvents or []
    rank_of = _ranks_of_processes(events, rank_from)
    groups: dict[int, list[Any]] = {}
    left_out: set[object] = set()
    for e in events:
        if isinstance(e, MetaEvent):
            continue
        rank = rank_of.get(getattr(e, "pid", None))
        if rank is None:
            left_out.add(getattr(e, "pid", None))
        else:
            groups.setdefault(rank, []).append(e)
    if left_out - {None}:
        warnings.append(
            f"{path}: {len(left_out - {None})} process(es) with no rank by {rank_from} left "
            f"out: {', '.join(sorted(map(str, left_out - {None})))[:200]}"
        )
    if not groups:
        raise TraceError(path, f"no process has a rank by {rank_from}")
    meta = trace_meta(doc)
    return [
        rank_events(
            f"{path}#rank{rank}",
            replace(meta, rank=rank),
            group,
            list(warnings),
            truncated,
            read.shaped_ops,
        )
        for rank, group in sorted(groups.items())
    ]


_NUMBER = re.compile(r"(?i)rank\D{0,3}(\d+)|(\d+)")


def _ranks_of_processes(events: list[Any], rank_from: str) -> dict[object, int]:
    if rank_from == "pid":
        out: dict[object, int] = {}
        for pid in {getattr(e, "pid", None) for e in events}:
            if isinstance(pid, int) and not isinstance(pid, bool):
                out[pid] = pid
            elif isinstance(pid, str) and (m := _NUMBER.search(pid)):
                out[pid] = int(m.group(1) or m.group(2))
        return out
    names = {
        e.pid: e.args.get("name")
        for e in events
        if isinstance(e, MetaEvent) and e.name == "process_name" and isinstance(e.args, dict)
    }
    return {
        pid: int(m.group(1) or m.group(2))
        for pid, name in names.items()
        if isinstance(name, str) and (m := _NUMBER.search(name))
    }


def _load_rank(path: Path, read: ReadOptions) -> RankEvents:
    _refuse_past_bounds(path, read)
    with contextlib.suppress(OSError):
        if json_size(path) >= stream.STREAM_FROM_BYTES:
            try:
                return stream.stream_rank(path, read)
            except stream.Fallback:
                pass  # the whole-file reader below has the salvage logic
    scanned = _scanned(path, read)
    if scanned is not None:
        return scanned
    doc, warnings, truncated = read_document(path, read)
    events = doc.traceEvents or []
    doc.traceEvents = None  # the events become columns: keep no second reference
    return rank_events(str(path), trace_meta(doc), events, warnings, truncated, read.shaped_ops)


def _refuse_past_bounds(path: Path, read: ReadOptions) -> None:
    """A file past the size bound is refused before any byte is decoded (a gzip file's
    inflation is counted as it inflates: its trailer may lie, or be cut off)."""
    try:
        check_plain_size(path, read)
    except OSError as exc:
        raise TraceError(path, f"cannot read: {exc.strerror or exc}") from None


def _scanned(path: Path, read: ReadOptions) -> RankEvents | None:
    """A well-formed trace through the C scanner (ingest/fast.py); None leaves the file to the
    general reader, which also salvages, repairs and explains."""
    if not fast.available():
        return None
    data = read_trace_bytes(path, read).removeprefix(UTF8_BOM)
    if data.lstrip()[:1] == b"[":
        envelope, events = Envelope(), data
    else:
        try:
            envelope = ENVELOPE_DECODER.decode(data)
        except (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError):
            return None
        events = bytes(envelope.traceEvents)
        if events.strip() in (b"", b"null"):
            return None
    del data
    got = fast.columns(events, path, None, read.shaped_ops)
    if got is None:
        return None
    frame, warnings, repaired, ops = got
    envelope.traceEvents = msgspec.Raw(b"")
    return rank_from_columns(str(path), trace_meta(envelope), frame, warnings, False, repaired, ops)
