"""Decode one Kineto / Chrome trace file into columnar events.

``load_rank(path) -> RankEvents`` is a pure function of the file: it is the unit that runs in a
process pool today and on remote workers later. It keeps only what the engine needs.
"""

from __future__ import annotations

import gzip
import re
import zlib
from pathlib import Path
from typing import Any

import msgspec
import polars as pl

from tracecomm.errors import NotATrace, TraceError
from tracecomm.ingest.model import DEVICE_KINDS, RankEvents, TraceMeta
from tracecomm.ingest.timestamps import us_text_to_ns

_GZIP_MAGIC = b"\x1f\x8b"

# Old and current spellings of the categories we use, lower-cased, to one kind each.
_KIND_OF_CAT: dict[str, str] = {
    "kernel": "kernel",
    "gpu_memcpy": "memcpy",
    "memcpy": "memcpy",
    "gpu_memset": "memset",
    "memset": "memset",
    "cuda_sync": "sync",
    "mtia_ccp_events": "kernel",
    "cuda_runtime": "launch",
    "runtime": "launch",
    "cuda_driver": "launch",
    "mtia_runtime": "launch",
    "xpu_runtime": "launch",
    "user_annotation": "annotation",
    "gpu_user_annotation": "gpu_annotation",
    "cpu_op": "cpu_op",
    "operator": "cpu_op",
}

_STEP_NAME = re.compile(r"^ProfilerStep#(\d+)$")


class _Args(msgspec.Struct):
    correlation: Any = None
    external_id: Any = msgspec.field(default=None, name="External id")
    external_id_lc: Any = msgspec.field(default=None, name="external id")
    device: Any = None
    stream: Any = None
    collective_name: Any = msgspec.field(default=None, name="Collective name")
    in_msg_nelems: Any = msgspec.field(default=None, name="In msg nelems")
    out_msg_nelems: Any = msgspec.field(default=None, name="Out msg nelems")
    in_msg_size: Any = msgspec.field(default=None, name="In msg size")
    out_msg_size: Any = msgspec.field(default=None, name="Out msg size")
    group_size: Any = msgspec.field(default=None, name="Group size")
    dtype: Any = None
    pg_name: Any = msgspec.field(default=None, name="Process Group Name")
    pg_id: Any = msgspec.field(default=None, name="Process Group ID")
    pg_desc: Any = msgspec.field(default=None, name="Process Group Description")
    pg_ranks: Any = msgspec.field(default=None, name="Process Group Ranks")
    seq: Any = msgspec.field(default=None, name="Seq")


class _Event(msgspec.Struct):
    ph: Any = None
    cat: Any = None
    name: Any = None
    pid: Any = None
    tid: Any = None
    ts: Any = None
    dur: Any = None
    args: msgspec.Raw = msgspec.Raw(b"null")


class _Trace(msgspec.Struct):
    traceEvents: list[_Event] | None = None
    distributedInfo: Any = None
    deviceProperties: Any = None
    baseTimeNanoseconds: Any = None
    trace_id: Any = None
    host_name: Any = None


# float_hook=str hands fractional numbers over as their literal text: exact ns later.
_DECODER = msgspec.json.Decoder(_Trace, float_hook=str)

# Collective metadata copied from record_param_comms onto the kernel (kineto-traces.md §12).
_META_FIELDS: dict[str, pl.DataType] = {
    "collective_name": pl.String(),
    "in_msg_nelems": pl.Int64(),
    "out_msg_nelems": pl.Int64(),
    "in_msg_size": pl.Int64(),
    "out_msg_size": pl.Int64(),
    "group_size": pl.Int64(),
    "dtype": pl.String(),
    "pg_name": pl.String(),
    "pg_id": pl.String(),
    "pg_desc": pl.String(),
    "pg_ranks": pl.String(),
    "seq": pl.Int64(),
}


def load_rank(path: Path | str) -> RankEvents:
    """Parse one trace file. Raises ``TraceError`` (or ``NotATrace``) for unusable input."""
    path = Path(path)
    data = read_trace_bytes(path)
    doc, salvaged = _decode(data, path)
    del data
    if doc.traceEvents is None:
        raise NotATrace(path, "no traceEvents list: not a Kineto trace")
    warnings: list[str] = []
    if salvaged is not None:
        warnings.append(
            f"{path}: truncated file (job killed while writing?): salvaged the first {salvaged} "
            "events; steps cut short are excluded"
        )
    meta = _meta(doc, path)
    events, event_warnings, repaired = _columns(doc.traceEvents, path)
    warnings.extend(event_warnings)
    return RankEvents(
        path=str(path),
        meta=meta,
        device=_device_frame(events),
        launches=_launch_frame(events),
        steps=_step_frame(events),
        comm_annotations=_gpu_annotation_frame(events),
        comm_ops=_comm_op_frame(events),
        cpu=_cpu_frame(events),
        warnings=tuple(warnings),
        truncated=salvaged is not None,
        repaired_events=repaired,
    )


def read_trace_bytes(path: Path) -> bytes:
    """The file's JSON text, gunzipped when it starts with the gzip magic (suffix or not)."""
    try:
        with path.open("rb") as handle:
            raw = handle.read()
    except OSError as exc:
        raise TraceError(path, f"cannot read: {exc.strerror or exc}") from None
    if not raw.startswith(_GZIP_MAGIC):
        return raw
    try:
        return gzip.decompress(raw)
    except EOFError:
        return _gunzip_prefix(raw, path)
    except (OSError, zlib.error) as exc:
        raise TraceError(path, f"corrupt gzip data ({exc})") from None


def _gunzip_prefix(raw: bytes, path: Path) -> bytes:
    # A .gz cut short still holds a usable prefix; the JSON salvage below takes it from there.
    try:
        return zlib.decompressobj(wbits=31).decompress(raw)
    except zlib.error as exc:
        raise TraceError(path, f"corrupt gzip data ({exc})") from None


def _decode(data: bytes, path: Path) -> tuple[_Trace, int | None]:
    try:
        return _DECODER.decode(data), None
    except msgspec.ValidationError as exc:
        raise TraceError(path, f"unexpected trace structure: {exc}") from None
    except msgspec.DecodeError as exc:
        if not data.strip():
            raise TraceError(path, "empty file") from None
        if data.lstrip()[:1] not in (b"{", b"["):
            raise TraceError(path, "not JSON (does not start with '{')") from None
        salvaged = _salvage(data)
        if salvaged is None:
            raise TraceError(path, f"invalid JSON: {exc}") from None
        return salvaged, len(salvaged.traceEvents or [])


_EVENT_BOUNDARY = re.compile(rb"\}\s*,\s*\{")


def _salvage(data: bytes, tries: int = 20) -> _Trace | None:
    """Keep the complete events of a file cut short by closing the array after the last one."""
    start = data.find(b'"traceEvents"')
    if start < 0:
        return None
    window = 1 << 20
    tail_from = max(start, len(data) - window)
    cuts = [m.start() + 1 for m in _EVENT_BOUNDARY.finditer(data, tail_from)]
    for cut in reversed(cuts[-tries:]):
        try:
            doc = _DECODER.decode(data[:cut] + b"]}")
        except (msgspec.DecodeError, msgspec.ValidationError):
            continue
        if doc.traceEvents:
            return doc
    return None


def _meta(doc: _Trace, path: Path) -> TraceMeta:
    info = doc.distributedInfo if isinstance(doc.distributedInfo, dict) else {}
    props = doc.deviceProperties if isinstance(doc.deviceProperties, list) else []
    base = doc.baseTimeNanoseconds
    return TraceMeta(
        rank=_as_int(info.get("rank")),
        world_size=_as_int(info.get("world_size")),
        backend=_as_str(info.get("backend")),
        nccl_version=_as_str(info.get("nccl_version")),
        pg_config=tuple(p for p in info.get("pg_config") or () if isinstance(p, dict)),
        device_names={
            int(p["id"]): str(p.get("name"))
            for p in props
            if isinstance(p, dict) and _as_int(p.get("id")) is not None
        },
        base_time_ns=_as_int(base),
        host_name=_as_str(doc.host_name),
        trace_id=_as_str(doc.trace_id),
    )


def _as_int(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    return None


def _as_str(value: object) -> str | None:
    return None if value is None else str(value)


def _columns(events: list[_Event], path: Path) -> tuple[pl.DataFrame, list[str], int]:
    """One row per complete ('X') event of a category we use, with exact ns times."""
    picked = [events[i] for i in _wanted_rows(events)]
    frame = pl.DataFrame(
        {
            "cat": [e.cat for e in picked],
            "name": [e.name if isinstance(e.name, str) else str(e.name) for e in picked],
            "pid": [None if e.pid is None else str(e.pid) for e in picked],
            "tid": [None if e.tid is None else str(e.tid) for e in picked],
        },
        schema={"cat": pl.String, "name": pl.String, "pid": pl.String, "tid": pl.String},
    ).with_columns(
        # MTIA's DMA requests are copy-engine work, not compute.
        pl.when(
            pl.col("cat").str.to_lowercase().eq("mtia_ccp_events")
            & pl.col("name").str.starts_with("dma_")
        )
        .then(pl.lit("memcpy"))
        .otherwise(_KIND)
        .alias("kind"),
        us_text_to_ns([e.ts for e in picked], "ts_ns"),
        us_text_to_ns([e.dur for e in picked], "dur_ns"),
    )
    frame = _attach_args(frame, picked)
    return _repair_times(frame, path)


_KIND = pl.col("cat").str.to_lowercase().replace_strict(_KIND_OF_CAT, default=None)


def _wanted_rows(events: list[_Event]) -> list[int]:
    """Rows to keep: device work, launches, annotations; CPU ops only when no device work exists
    (CPU-only traces) or when they carry collective metadata."""
    head = pl.DataFrame(
        {
            "ph": [e.ph if isinstance(e.ph, str) else None for e in events],
            "cat": [e.cat if isinstance(e.cat, str) else None for e in events],
        },
        schema={"ph": pl.String, "cat": pl.String},
    ).with_columns(_KIND.alias("kind"))
    complete = head["ph"] == "X"
    has_device = bool((complete & head["kind"].is_in(list(DEVICE_KINDS))).any())
    if not has_device:
        return (complete & head["kind"].is_not_null()).arg_true().to_list()
    rows = (complete & head["kind"].is_not_null() & (head["kind"] != "cpu_op")).arg_true()
    cpu_ops = (complete & (head["kind"] == "cpu_op")).arg_true().to_list()
    comm = [i for i in cpu_ops if events[i].name == "record_param_comms"]
    return sorted([*rows.to_list(), *comm])


_ARGS_DECODER = msgspec.json.Decoder(_Args | None, float_hook=str)
_LINK_FIELDS = ("correlation", "external_id", "device", "stream")


def _attach_args(frame: pl.DataFrame, picked: list[_Event]) -> pl.DataFrame:
    """Decode args only for the kept rows: skipping the rest is what keeps the parse fast."""
    args = [_decode_args(e.args) for e in picked]
    columns: dict[str, pl.Series] = {
        f"arg_{field}" if field in ("device", "stream") else field: _int_series(
            field, [getattr(a, field) if a else None for a in args]
        )
        for field in _LINK_FIELDS
    }
    legacy_ext = _int_series("x", [a.external_id_lc if a else None for a in args])
    columns["external_id"] = columns["external_id"].fill_null(legacy_ext)
    wanted = frame.select(
        (pl.col("kind") == "kernel") | (pl.col("name") == "record_param_comms")
    ).to_series()
    meta_rows = wanted.arg_true().to_list()
    meta_args = [args[i] for i in meta_rows]
    meta = pl.DataFrame(
        {
            "row": pl.Series(meta_rows, dtype=pl.UInt32),
            **{
                field: _typed_series(
                    field, [getattr(a, field) if a else None for a in meta_args], dtype
                )
                for field, dtype in _META_FIELDS.items()
            },
        }
    )
    return (
        frame.with_columns(**columns)
        .with_row_index("row")
        .join(meta, on="row", how="left", maintain_order="left")
        .drop("row")
    )


def _decode_args(raw: msgspec.Raw) -> _Args | None:
    try:
        return _ARGS_DECODER.decode(raw)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None


def _int_series(name: str, values: list[object]) -> pl.Series:
    try:
        return pl.Series(name, values, dtype=pl.Int64)
    except (TypeError, OverflowError, pl.exceptions.PolarsError):
        return pl.Series(name, [_arg_int(v) for v in values], dtype=pl.Int64)


def _typed_series(name: str, values: list[object], dtype: pl.DataType) -> pl.Series:
    if dtype == pl.Int64():
        return _int_series(name, [_as_int(v) if isinstance(v, str) else v for v in values])
    return pl.Series(name, [None if v is None else str(v) for v in values], dtype=pl.String)


def _arg_int(value: object) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool):
        return value if -(2**63) <= value < 2**63 else None
    return None


def _repair_times(frame: pl.DataFrame, path: Path) -> tuple[pl.DataFrame, list[str], int]:
    """Drop events without a start; durations missing or negative become 0, with a warning."""
    counts = frame.select(
        pl.col("ts_ns").is_null().sum().alias("no_ts"),
        pl.col("dur_ns").is_null().sum().alias("no_dur"),
        (pl.col("dur_ns") < 0).sum().alias("neg_dur"),
    ).row(0, named=True)
    warnings = []
    if counts["no_ts"]:
        warnings.append(f"{path}: {counts['no_ts']} events without a timestamp were dropped")
    if counts["no_dur"]:
        warnings.append(f"{path}: {counts['no_dur']} events without a duration were read as 0 µs")
    if counts["neg_dur"]:
        warnings.append(
            f"{path}: {counts['neg_dur']} events with a negative duration were read as 0 µs"
        )
    frame = frame.filter(pl.col("ts_ns").is_not_null()).with_columns(
        pl.col("dur_ns").fill_null(0).clip(lower_bound=0)
    )
    frame = frame.with_columns(
        pl.col("ts_ns").alias("start_ns"), (pl.col("ts_ns") + pl.col("dur_ns")).alias("end_ns")
    ).drop("ts_ns", "dur_ns")
    return frame, warnings, counts["no_ts"] + counts["no_dur"] + counts["neg_dur"]


def _device_frame(events: pl.DataFrame) -> pl.DataFrame:
    digits = r"(-?\d+)"
    return events.filter(pl.col("kind").is_in(list(DEVICE_KINDS))).select(
        "kind",
        "name",
        pl.coalesce(
            "arg_device", pl.col("pid").str.extract(digits).cast(pl.Int64, strict=False)
        ).alias("device"),
        pl.coalesce(
            "arg_stream", pl.col("tid").str.extract(digits).cast(pl.Int64, strict=False)
        ).alias("stream"),
        "start_ns",
        "end_ns",
        "correlation",
        "external_id",
        *_META_FIELDS,
    )


def _launch_frame(events: pl.DataFrame) -> pl.DataFrame:
    return events.filter(pl.col("kind") == "launch").select(
        "name", "tid", "start_ns", "end_ns", "correlation", "external_id"
    )


def _step_frame(events: pl.DataFrame) -> pl.DataFrame:
    return (
        events.filter(pl.col("kind") == "annotation")
        .select(
            pl.col("name").str.extract(_STEP_NAME.pattern).cast(pl.Int64).alias("step"),
            "tid",
            "start_ns",
            "end_ns",
        )
        .filter(pl.col("step").is_not_null())
        .sort("start_ns")
    )


def _gpu_annotation_frame(events: pl.DataFrame) -> pl.DataFrame:
    return events.filter(
        (pl.col("kind") == "gpu_annotation") & pl.col("name").str.starts_with("nccl:")
    ).select(
        "name",
        pl.coalesce(
            "arg_device", pl.col("pid").str.extract(r"(\d+)").cast(pl.Int64, strict=False)
        ).alias("device"),
        pl.coalesce(
            "arg_stream", pl.col("tid").str.extract(r"(\d+)").cast(pl.Int64, strict=False)
        ).alias("stream"),
        "start_ns",
        "end_ns",
    )


def _comm_op_frame(events: pl.DataFrame) -> pl.DataFrame:
    return events.filter(
        (pl.col("kind") == "cpu_op") & (pl.col("name") == "record_param_comms")
    ).select("external_id", "start_ns", *_META_FIELDS)


def _cpu_frame(events: pl.DataFrame) -> pl.DataFrame:
    """CPU ops and annotations: the timeline of traces without device activity."""
    return events.filter(pl.col("kind").is_in(["cpu_op", "annotation"])).select(
        "kind", "name", "pid", "tid", "start_ns", "end_ns"
    )
