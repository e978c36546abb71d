"""The kept events of one chunk through the C scanner (``_scan.c``): the same frame as
``kineto._columns`` builds from msgspec-decoded events, with Python objects only for distinct
strings and for the few rows whose args matter (collective metadata, shapes, odd link values).

``columns`` returns None whenever the scanner is missing or declines the chunk; the caller
then takes the general path, so results never depend on which path ran.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType
from typing import Any

import msgspec
import numpy as np
import polars as pl

from tracecomm.ingest import kineto as k
from tracecomm.ingest.model import DEVICE_KINDS
from tracecomm.mfu.opflops import SHAPED_OPS

_scan: ModuleType | None
try:
    from tracecomm.ingest import _scan
except ImportError:  # no compiler at install time: the general reader does it all
    _scan = None

FLAG_META, FLAG_DIMS, FLAG_ODD, FLAG_BAD = 1, 2, 4, 8
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
    text: bytes, path: Path, cpu_only: bool | None
) -> tuple[pl.DataFrame, list[str], int] | None:
    """``text``: a JSON array of events. None: take the general path."""
    if _scan is None:
        return None
    got = _scan.scan(text)
    if got is None:
        return None
    cats, names = _strings(got["cat_values"]), _strings(got["name_values"])
    if cats is None or names is None:
        return None  # invalid UTF-8: the general path replaces it and says so
    flags = np.frombuffer(got["flags"], dtype=np.uint8)
    head = pl.DataFrame(
        {
            "cat": _decoded("cat", cats, got["cat_code"]),
            "name": _decoded("name", names, got["name_code"]),
        }
    ).with_columns(_kind())
    rows = _wanted(head, flags, cpu_only)
    if (flags[rows] & FLAG_BAD).any():
        return None  # a kept event with a string pid, an exponent…: the general path reads it
    ints = {name: _ints(got, name)[rows] for name in ("pid", "tid", "ts_ns", "dur_ns", *_LINKS)}
    frame = head[rows].with_columns(
        ints["pid"].alias("pid"),
        ints["tid"].alias("tid"),
        ints["ts_ns"].alias("ts_ns"),
        ints["dur_ns"].alias("dur_ns"),
    )
    at = np.frombuffer(got["args_at"], dtype=np.int64)[rows]
    size = np.frombuffer(got["args_len"], dtype=np.int64)[rows]
    has_args = np.frombuffer(got["args_at_valid"], dtype=np.uint8)[rows].astype(bool)
    kept_flags = flags[rows]
    links = _links(ints, kept_flags, text, at, size, has_args)
    frame = frame.with_columns(
        links["correlation"],
        links["external_id"].fill_null(links["external_id_lc"]),
        links["arg_device"],
        links["arg_stream"],
    )
    frame = _with_meta(frame, kept_flags, text, at, size, has_args)
    return k._repair_times(frame, path)


def _strings(raw: list[bytes]) -> list[str] | None:
    try:
        return [json.loads(b'"' + r + b'"') if b"\\" in r else r.decode() for r in raw]
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None


def _decoded(name: str, values: list[str], codes: bytes) -> pl.Series:
    index = np.frombuffer(codes, dtype=np.uint32)
    index = np.where(index == _NO_CODE, np.uint32(len(values)), index)
    return pl.Series(name, [*values, None], dtype=pl.String).gather(index)


def _kind() -> pl.Expr:
    return (
        pl.when(
            pl.col("cat").str.to_lowercase().eq("mtia_ccp_events")
            & pl.col("name").str.starts_with("dma_")
        )
        .then(pl.lit("memcpy"))
        .otherwise(k._KIND)
        .alias("kind")
    )


def _wanted(head: pl.DataFrame, flags: np.ndarray, cpu_only: bool | None) -> np.ndarray:
    """kineto._wanted_rows, with the scanner's flag for recorded shapes."""
    kind = pl.col("kind")
    used = kind.is_not_null()
    dims = pl.Series(flags & FLAG_DIMS > 0)
    shaped = (kind == "cpu_op") & pl.col("name").is_in(list(SHAPED_OPS)) & pl.lit(dims)
    gpu_rows = used & ((kind != "cpu_op") | (pl.col("name") == k._COMM_OP) | shaped)
    if cpu_only or (
        cpu_only is None and not head.select((gpu_rows & kind.is_in(DEVICE_KINDS)).any()).item()
    ):
        mask = used
    else:
        mask = gpu_rows
    return head.select(mask.fill_null(False)).to_series().arg_true().to_numpy()


def _ints(got: dict[str, Any], name: str) -> pl.Series:
    values = np.frombuffer(got[name], dtype=np.int64)
    valid = np.frombuffer(got[f"{name}_valid"], dtype=np.uint8).astype(bool)
    series = pl.Series(name, values, dtype=pl.Int64)
    return series if valid.all() else series.scatter(np.flatnonzero(~valid), None)


def _args(text: bytes, at: np.ndarray, size: np.ndarray, which: np.ndarray) -> list[Any]:
    """The args of rows ``which``, decoded as kineto._Args (None where there are none)."""
    spans = zip(at[which].tolist(), size[which].tolist(), strict=True)
    return k._decode_args([msgspec.Raw(text[a : a + n]) for a, n in spans])


def _links(
    ints: dict[str, pl.Series],
    flags: np.ndarray,
    text: bytes,
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
    decoded = [a if a is not None else k._NO_ARGS for a in _args(text, at, size, odd)]
    for name, attr in _LINKS.items():
        values = k._int_series(name, [getattr(a, attr) for a in decoded])
        out[name] = out[name].scatter(odd, values)
    return out


def _with_meta(
    frame: pl.DataFrame,
    flags: np.ndarray,
    text: bytes,
    at: np.ndarray,
    size: np.ndarray,
    has_args: np.ndarray,
) -> pl.DataFrame:
    """Collective metadata of kernels and record_param_comms ops, shapes of matmul / conv /
    attention ops: decoded from the rows whose args hold them, null elsewhere."""
    carrier = (
        frame.select((pl.col("kind") == "kernel") | (pl.col("name") == k._COMM_OP))
        .to_series()
        .to_numpy()
    )
    meta_rows = np.flatnonzero(carrier & (flags & FLAG_META > 0) & has_args)
    decoded = _args(text, at, size, meta_rows) if meta_rows.size else []
    decoded = [a if a is not None else k._NO_ARGS for a in decoded]
    columns = [
        k._typed_series(field, [getattr(a, field) for a in decoded], dtype)
        for field, dtype in k.META_SCHEMA.items()
    ]
    meta = pl.DataFrame([pl.Series("row", meta_rows, dtype=pl.UInt32), *columns])
    frame = frame.with_row_index("row").join(meta, on="row", how="left", maintain_order="left")
    shaped = frame.select(pl.col("name").is_in(list(SHAPED_OPS))).to_series().to_numpy()
    dims_rows = np.flatnonzero(shaped & (flags & FLAG_DIMS > 0) & has_args)
    dims = _args(text, at, size, dims_rows) if dims_rows.size else []
    keep = [i for i, a in enumerate(dims) if a is not None and a.input_dims is not None]
    dims_frame = pl.DataFrame(
        {
            "row": [int(dims_rows[i]) for i in keep],
            "input_dims": [k._json(dims[i].input_dims) for i in keep],
            "concrete_inputs": [k._json(dims[i].concrete_inputs) for i in keep],
        },
        schema={"row": pl.UInt32, "input_dims": pl.String, "concrete_inputs": pl.String},
    )
    return frame.join(dims_frame, on="row", how="left", maintain_order="left").drop("row")
