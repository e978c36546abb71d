"""The kept events of one chunk through the C scanner (``_scan.c``): the same frame as
``frames.columns`` builds from msgspec-decoded events, with Python objects only for distinct
strings and for the few rows whose args matter (collective metadata, shapes, odd link values).

``columns`` returns None whenever the scanner is missing or declines the chunk; the caller
then takes the general path, so results never depend on which path ran.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from pathlib import Path
from types import ModuleType
from typing import Any, NamedTuple

import msgspec
import numpy as np
import polars as pl

from tracecomm.ingest.events import COMM_OP, KIND_OF_CAT, LAUNCH_OP_KIND, META_SCHEMA, NO_ARGS
from tracecomm.ingest.frames import (
    decode_args,
    int_series,
    json_text,
    null_column,
    time_warnings,
    typed_series,
)
from tracecomm.ingest.model import DEVICE_KINDS

_scan: ModuleType | None
try:
    from tracecomm.ingest import _scan
except ImportError:  # no compiler at install time: the general reader does it all
    _scan = None

FLAG_META, FLAG_DIMS, FLAG_ODD, FLAG_BAD, FLAG_GRAPH = 1, 2, 4, 8, 16
_NO_CODE = np.uint32(0xFFFFFFFF)
_LINKS = {
    "correlation": "correlation",
    "external_id": "external_id",
    "external_id_lc": "external_id_lc",
    "arg_device": "device",
    "arg_stream": "stream",
}


def available() -> bool:
    return _scan is not None


def columns(
    text: bytes | memoryview,
    path: Path,
    cpu_only: bool | None,
    shaped_ops: Collection[str],
    bare: bool = False,
    head: bytes = b"",
) -> tuple[pl.DataFrame, list[str], int, pl.DataFrame | None] | None:
    """``text``: a JSON array of events (``bare``: without its brackets); ``head``: events
    (bare) before them, from another buffer (a streamed chunk's first event, whose start
    ended the previous read). None: take the general path. Besides the events, the CPU ops a
    launch may name (``frames._op_frame``'s columns: kept apart, two columns, as they are
    most of a trace's events)."""
    if _scan is None:
        return None
    got = _scan.scan(text, bare, head) if head else _scan.scan(text, bare)
    if got is None:
        return None
    source = Source(head, text)
    cats, names = _strings(got["cat_values"]), _strings(got["name_values"])
    if cats is None or names is None:
        return None  # invalid UTF-8: the general path replaces it and says so
    if any(c.lower() == "mtia_ccp_events" for c in cats):
        return None  # MTIA's DMA kernels are copies by name: the general path knows
    flags = np.frombuffer(got["flags"], dtype=np.uint8)
    cat_codes = _codes(got["cat_code"], len(cats))
    name_codes = _codes(got["name_code"], len(names))
    # kinds and name tests on the distinct strings only, then gathered per row
    kind = _KIND_CODES[[_kind_code(c) for c in cats] + [0]][cat_codes]  # [0]: no category
    named = np.array([[n == COMM_OP, n in shaped_ops] for n in [*names, ""]], dtype=bool)
    rows, as_op = _wanted(kind, named[name_codes, 0], named[name_codes, 1], flags, cpu_only)
    ops = _op_names(got, names, name_codes, kind, flags, as_op, bare)
    if as_op is not None:
        rows = rows[~as_op[rows]]
    if (flags[rows] & FLAG_BAD).any():
        return None  # a kept event with a string pid, an exponent…: the general path reads it
    rows, start, end, warnings, repaired = _times(got, rows, path)
    kind, cat_codes, name_codes, flags = kind[rows], cat_codes[rows], name_codes[rows], flags[rows]
    ints = {name: _ints(got, name, rows) for name in ("pid", "tid", *_LINKS)}
    at = np.frombuffer(got["args_at"], dtype=np.int64)[rows]
    size = np.frombuffer(got["args_len"], dtype=np.int64)[rows]
    has_args = np.frombuffer(got["args_at_valid"], dtype=np.uint8)[rows].astype(bool)
    links = _links(ints, flags, source, at, size, has_args)
    frame = pl.DataFrame(  # the strings from their codes, and the ids: one query
        [
            pl.Series("cat", cat_codes),
            pl.Series("name", name_codes),
            pl.Series("kind", np.where(kind < 0, len(_KINDS), kind)),
            ints["pid"],
            ints["tid"],
            *links.values(),
        ]
    ).select(
        _lookup("cat", cats),
        _lookup("name", names),
        _lookup("kind", list(_KINDS)),
        "pid",
        "tid",
        "correlation",
        pl.col("external_id").fill_null(pl.col("external_id_lc")),
        "arg_device",
        "arg_stream",
    )
    carrier = (kind == _KINDS.index("kernel")) | named[name_codes, 0]
    shaped = named[name_codes, 1] & (flags & FLAG_DIMS > 0) & has_args
    frame = _with_meta(frame, carrier, shaped, flags, source, at, size, has_args)
    frame = _with_graphs(frame, flags, source, at, size, has_args)
    # the columns, in their order, that ``frames.repair_times`` leaves: no query per chunk
    events = frame.hstack(
        [pl.Series("start_ns", start, dtype=pl.Int64), pl.Series("end_ns", end, dtype=pl.Int64)]
    )
    return events, warnings, repaired, ops


def _times(
    got: dict[str, Any], rows: np.ndarray, path: Path
) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[str], int]:
    """``frames.repair_times`` on the scanner's arrays: the rows that have a start, their
    start and end (a missing or negative duration read as 0), the warnings and the count."""
    ts = np.frombuffer(got["ts_ns"], dtype=np.int64)[rows]
    has_ts = np.frombuffer(got["ts_ns_valid"], dtype=np.uint8)[rows].astype(bool)
    dur = np.frombuffer(got["dur_ns"], dtype=np.int64)[rows]
    has_dur = np.frombuffer(got["dur_ns_valid"], dtype=np.uint8)[rows].astype(bool)
    no_ts, no_dur = int((~has_ts).sum()), int((~has_dur).sum())
    neg_dur = int((has_dur & (dur < 0)).sum())
    if no_dur or neg_dur:
        dur = np.where(has_dur, np.maximum(dur, 0), 0)
    if no_ts:
        rows, ts, dur = rows[has_ts], ts[has_ts], dur[has_ts]
    warnings = time_warnings(path, no_ts, no_dur, neg_dur)
    return rows, ts, ts + dur, warnings, no_ts + no_dur + neg_dur


class Source(NamedTuple):
    """The scanned text: ``head``, then ``body``; the scanner's args offsets count from the
    start of ``head`` (an event lies wholly in one of the two)."""

    head: bytes
    body: bytes | memoryview

    def piece(self, at: int, size: int) -> bytes:
        h = len(self.head)
        return self.head[at : at + size] if at < h else bytes(self.body[at - h : at - h + size])


_KINDS = (*dict.fromkeys(KIND_OF_CAT.values()), LAUNCH_OP_KIND)
_KIND_CODES = np.arange(-1, len(_KINDS), dtype=np.int64)  # [-1] is "not a kind we use"


def _kind_code(cat: str) -> int:
    """Index into _KIND_CODES: 0 for a category we do not use."""
    kind = KIND_OF_CAT.get(cat.lower())
    return 0 if kind is None else _KINDS.index(kind) + 1


def _codes(raw: bytes, missing: int) -> np.ndarray:
    index = np.frombuffer(raw, dtype=np.uint32).astype(np.int64)
    return np.where(index == int(_NO_CODE), missing, index)


def _gather(name: str, values: list[str], codes: np.ndarray) -> pl.Series:
    return pl.Series(name, [*values, None], dtype=pl.String).gather(codes)


def _lookup(column: str, values: list[str]) -> pl.Expr:
    """``column``'s codes as the strings they index (the last code: null)."""
    table = pl.Series(column, [*values, None], dtype=pl.String)
    return pl.lit(table).gather(pl.col(column)).alias(column)


def _wanted(
    kind: np.ndarray,
    comm_op: np.ndarray,
    shaped_name: np.ndarray,
    flags: np.ndarray,
    cpu_only: bool | None,
) -> tuple[np.ndarray, np.ndarray | None]:
    """frames._wanted_rows, on codes: the scanner flags the args that hold shapes. The mask:
    the CPU ops kept only as the op a launch may name (None: every CPU op is kept as such)."""
    used = kind >= 0
    cpu_op = kind == _KINDS.index("cpu_op")
    shaped = shaped_name & (flags & FLAG_DIMS > 0)
    device = np.isin(kind, [_KINDS.index(x) for x in DEVICE_KINDS if x in _KINDS])
    no_device = cpu_only is None and not (used & device).any()
    rows = np.flatnonzero(used)
    if cpu_only or no_device:
        return rows, None
    return rows, cpu_op & ~comm_op & ~shaped


def _op_names(
    got: dict[str, Any],
    names: list[str],
    name_codes: np.ndarray,
    kind: np.ndarray,
    flags: np.ndarray,
    as_op: np.ndarray | None,
    bare: bool,
) -> pl.DataFrame | None:
    """Name and External id of the CPU ops kept only as the op a launch may name. One of an
    odd shape, or without a plain External id, is left out rather than sending the trace to
    the general path. A whole trace keeps only the ops some launch names; a streamed chunk
    keeps them all (its launches come later: Kineto writes every CPU op first)."""
    if as_op is None:
        return None
    ext = np.frombuffer(got["external_id"], dtype=np.int64)
    valid = np.frombuffer(got["external_id_valid"], dtype=np.uint8).astype(bool)
    wanted = as_op & valid & (flags & FLAG_BAD == 0)
    if not bare:
        wanted &= np.isin(ext, ext[(kind == _KINDS.index("launch")) & valid])
    rows = np.flatnonzero(wanted)
    return pl.DataFrame(
        [
            _gather("name", names, name_codes[rows]),
            pl.Series("external_id", ext[rows], dtype=pl.Int64),
        ]
    )


def _with_graphs(
    frame: pl.DataFrame,
    flags: np.ndarray,
    text: Source,
    at: np.ndarray,
    size: np.ndarray,
    has_args: np.ndarray,
) -> pl.DataFrame:
    """``graph_id`` / ``graph_node`` of the kernels a CUDA graph replayed (the scanner flags
    the rows whose args say so); null elsewhere, as for a 0 (not from a graph)."""
    rows = np.flatnonzero((flags & FLAG_GRAPH > 0) & has_args)
    if rows.size == 0:
        return frame.hstack([_nulls(name, pl.Int64, frame) for name in ("graph_id", "graph_node")])
    decoded = [a if a is not None else NO_ARGS for a in _args(text, at, size, rows)]
    columns = []
    for name in ("graph_id", "graph_node"):
        values = int_series(name, [getattr(a, name) for a in decoded])
        values = values.replace(0, None)
        columns.append(_spread(values, rows, frame))
    return frame.hstack(columns)


def _strings(raw: list[bytes]) -> list[str] | None:
    try:
        return [json.loads(b'"' + r + b'"') if b"\\" in r else r.decode() for r in raw]
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None


def _ints(got: dict[str, Any], name: str, rows: np.ndarray) -> pl.Series:
    values = np.frombuffer(got[name], dtype=np.int64)[rows]
    valid = np.frombuffer(got[f"{name}_valid"], dtype=np.uint8)[rows].astype(bool)
    series = pl.Series(name, values, dtype=pl.Int64)
    return series if valid.all() else series.scatter(np.flatnonzero(~valid), None)


def _args(text: Source, at: np.ndarray, size: np.ndarray, which: np.ndarray) -> list[Any]:
    """The args of rows ``which``, decoded as events.Args (None where there are none)."""
    spans = zip(at[which].tolist(), size[which].tolist(), strict=True)
    return decode_args([msgspec.Raw(text.piece(a, n)) for a, n in spans])


def _links(
    ints: dict[str, pl.Series],
    flags: np.ndarray,
    text: Source,
    at: np.ndarray,
    size: np.ndarray,
    has_args: np.ndarray,
) -> dict[str, pl.Series]:
    """Correlation, ids, device and stream: the scanner's ints, and for rows where one of them
    was not a plain integer ("17", 17.0), the general reader's reading of all five."""
    out = {name: ints[name] for name in _LINKS}
    odd = np.flatnonzero((flags & FLAG_ODD > 0) & has_args)
    if odd.size == 0:
        return out
    decoded = [a if a is not None else NO_ARGS for a in _args(text, at, size, odd)]
    for name, attr in _LINKS.items():
        values = int_series(name, [getattr(a, attr) for a in decoded])
        out[name] = out[name].scatter(odd, values)
    return out


def _with_meta(
    frame: pl.DataFrame,
    carrier: np.ndarray,
    shaped: np.ndarray,
    flags: np.ndarray,
    text: Source,
    at: np.ndarray,
    size: np.ndarray,
    has_args: np.ndarray,
) -> pl.DataFrame:
    """Collective metadata of kernels and record_param_comms ops, shapes of matmul / conv /
    attention ops: decoded from the rows whose args hold them, null elsewhere."""
    meta_rows = np.flatnonzero(carrier & (flags & FLAG_META > 0) & has_args)
    dims_rows = np.flatnonzero(shaped)
    if meta_rows.size == 0 and dims_rows.size == 0:
        return frame.hstack(
            [
                *(_nulls(field, dtype, frame) for field, dtype in META_SCHEMA.items()),
                *(
                    _nulls(f, pl.String, frame)
                    for f in ("input_dims", "concrete_inputs", "input_types")
                ),
            ]
        )
    decoded = [a if a is not None else NO_ARGS for a in _args(text, at, size, meta_rows)]
    columns = [
        _spread(typed_series(field, [getattr(a, field) for a in decoded], dtype), meta_rows, frame)
        for field, dtype in META_SCHEMA.items()
    ]
    dims = _args(text, at, size, dims_rows) if dims_rows.size else []
    keep = [i for i, a in enumerate(dims) if a is not None and a.input_dims is not None]
    at_rows = dims_rows[keep]
    for field in ("input_dims", "concrete_inputs", "input_types"):
        texts = pl.Series(field, [json_text(getattr(dims[i], field)) for i in keep], pl.String)
        columns.append(_spread(texts, at_rows, frame))
    return frame.hstack(columns)


def _spread(values: pl.Series, rows: np.ndarray, frame: pl.DataFrame) -> pl.Series:
    """``values`` at ``rows`` of a column as tall as ``frame``, null elsewhere (a scatter:
    no join of the whole frame on a row number)."""
    column = _nulls(values.name, values.dtype, frame)
    return column.scatter(rows, values) if rows.size else column


def _nulls(name: str, dtype: Any, frame: pl.DataFrame) -> pl.Series:
    """A null column as tall as ``frame`` (``frames.null_column``: no query per column of
    every chunk)."""
    return null_column(name, dtype, frame.height)
