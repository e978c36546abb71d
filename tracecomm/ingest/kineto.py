"""Decode one Kineto / Chrome trace file into columnar events.

``load_rank(path) -> RankEvents`` is a pure function of the file: it is the unit that runs in a
process pool today and on remote workers later. It keeps only what the engine needs.
"""

from __future__ import annotations

import contextlib
import gc
import gzip
import re
import zlib
from collections.abc import Sequence
from dataclasses import replace
from decimal import Decimal
from operator import attrgetter, itemgetter
from pathlib import Path
from typing import Any, ClassVar, Union

import msgspec
import polars as pl

from tracecomm.errors import NotATrace, TraceError
from tracecomm.ingest.discover import json_size
from tracecomm.ingest.model import DEVICE_KINDS, RankEvents, TraceMeta
from tracecomm.ingest.timestamps import us_text_to_ns
from tracecomm.mfu.opflops import SHAPED_OPS

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


class _Args(msgspec.Struct, gc=False):
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
    src_rank: Any = msgspec.field(default=None, name="Src Rank")
    dst_rank: Any = msgspec.field(default=None, name="Dst Rank")
    input_dims: Any = msgspec.field(default=None, name="Input Dims")
    concrete_inputs: Any = msgspec.field(default=None, name="Concrete Inputs")


class _EventFields(msgspec.Struct, gc=False):
    cat: Any = None
    name: Any = None
    pid: Any = None
    tid: Any = None
    ts: Any = None
    dur: Any = None
    args: msgspec.Raw = msgspec.Raw(b"null")


class _Event(_EventFields, gc=False):
    """Any event, its phase read as a field (the fallback for files with unusual phases)."""

    ph: Any = None


class _Complete(_EventFields, tag_field="ph", tag="X", gc=False):
    """A complete ('X') event: the only phase whose fields are decoded."""

    ph: ClassVar[str] = "X"


class _Begin(_EventFields, tag_field="ph", tag="B", gc=False):
    """Duration events written as a B / E pair (some tools and converters do)."""

    ph: ClassVar[str] = "B"


class _End(_EventFields, tag_field="ph", tag="E", gc=False):
    ph: ClassVar[str] = "E"


class _MetaEvent(msgspec.Struct, tag_field="ph", tag="M", gc=False):
    """Metadata ('M'): process / thread names; merged traces name their ranks here."""

    ph: ClassVar[str] = "M"
    name: Any = None
    pid: Any = None
    tid: Any = None
    args: Any = None


def _skipped_phase(phase: str) -> type:
    # Flows, instants, metadata, counters…: their fields are skipped unread, which saves a
    # third of the decode on traces where flow events are as many as kernel launches.
    return msgspec.defstruct(
        f"_Phase{ord(phase)}",
        [("ph", ClassVar[str], phase)],
        tag_field="ph",
        tag=phase,
        gc=False,
    )


# Every phase of the Chrome trace event format; a file with any other value (or none) is
# decoded again with the untagged _Event, which reads ph as a plain field.
_PHASES = "iICbneSTpFstfPONDVvRc()"
_PHASE_TYPES = (_Complete, _Begin, _End, _MetaEvent, *(_skipped_phase(p) for p in _PHASES))
_AnyPhase = Union[_PHASE_TYPES]  # type: ignore[valid-type]  # noqa: UP007


class _Trace(msgspec.Struct, gc=False):
    traceEvents: list[_Event] | None = None
    distributedInfo: Any = None
    deviceProperties: Any = None
    baseTimeNanoseconds: Any = None
    trace_id: Any = None
    host_name: Any = None


class _TaggedTrace(_Trace, gc=False):
    traceEvents: list[_AnyPhase] | None = None


# float_hook=str hands fractional numbers over as their literal text: exact ns later.
_TAGGED_DECODER = msgspec.json.Decoder(_TaggedTrace, float_hook=str)
_DECODER = msgspec.json.Decoder(_Trace, float_hook=str)


def _decode_doc(data: bytes) -> _Trace:
    try:
        return _TAGGED_DECODER.decode(data)
    except msgspec.ValidationError:
        return _DECODER.decode(data)


# Collective metadata copied from record_param_comms onto the kernel (kineto-traces.md §12).
META_SCHEMA: dict[str, pl.DataType] = {
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
    "src_rank": pl.Int64(),
    "dst_rank": pl.Int64(),
}


def load_rank(path: Path | str) -> RankEvents:
    """Parse one trace file. Raises ``TraceError`` (or ``NotATrace``) for unusable input."""
    # Millions of short-lived acyclic objects: the cyclic collector would rescan them over and
    # over (a third of the parse time) and can reclaim nothing.
    enabled = gc.isenabled()
    gc.disable()
    try:
        return _load_rank(Path(path))
    finally:
        if enabled:
            gc.enable()


def load_merged(path: Path | str, rank_from: str) -> list[RankEvents]:
    """One Chrome trace holding several ranks (a merged trace): one RankEvents per rank.

    ``rank_from="pid"``: each process id is a rank (an int, or the digits of a string pid);
    ``"process_name"``: the first number in each process's ``process_name`` metadata (``rank 3``,
    ``Rank 3 GPU 0``) is its rank. Processes without one are left out with a warning."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        doc, warnings, truncated = _read(Path(path))
        events = doc.traceEvents or []
        rank_of = _ranks_of_processes(events, rank_from)
        groups: dict[int, list[Any]] = {}
        left_out: set[object] = set()
        for e in events:
            if isinstance(e, _MetaEvent):
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
        meta = _meta(doc)
        return [
            _rank_events(
                f"{path}#rank{rank}",
                replace(meta, rank=rank),
                group,
                list(warnings),
                truncated,
            )
            for rank, group in sorted(groups.items())
        ]
    finally:
        if enabled:
            gc.enable()


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
        if isinstance(e, _MetaEvent) and e.name == "process_name" and isinstance(e.args, dict)
    }
    return {
        pid: int(m.group(1) or m.group(2))
        for pid, name in names.items()
        if isinstance(name, str) and (m := _NUMBER.search(name))
    }


def _read(path: Path) -> tuple[_Trace, list[str], bool]:
    data = read_trace_bytes(path)
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


_META_FIELDS = META_SCHEMA


def _load_rank(path: Path) -> RankEvents:
    from tracecomm.ingest import stream

    with contextlib.suppress(OSError):
        if json_size(path) >= stream.STREAM_FROM_BYTES:
            try:
                return stream.stream_rank(path)
            except stream.Fallback:
                pass  # the whole-file reader below has the salvage logic
    scanned = _scanned(path)
    if scanned is not None:
        return scanned
    doc, warnings, truncated = _read(path)
    events = doc.traceEvents or []
    doc.traceEvents = None  # the events become columns: keep no second reference
    return _rank_events(str(path), _meta(doc), events, warnings, truncated)


class _Envelope(_Trace, gc=False):
    traceEvents: msgspec.Raw | None = None  # type: ignore[assignment]


_ENVELOPE_DECODER = msgspec.json.Decoder(_Envelope)


def _scanned(path: Path) -> RankEvents | None:
    """A well-formed trace through the C scanner (ingest/fast.py); None leaves the file to the
    general reader, which also salvages, repairs and explains."""
    from tracecomm.ingest import fast

    if not fast.available():
        return None
    data = read_trace_bytes(path).removeprefix(_UTF8_BOM)
    if data.lstrip()[:1] == b"[":
        envelope, events = _Envelope(), data
    else:
        try:
            envelope = _ENVELOPE_DECODER.decode(data)
        except (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError):
            return None
        if envelope.traceEvents is None:
            return None
        events = bytes(envelope.traceEvents)
    del data
    got = fast.columns(events, path, None)
    if got is None:
        return None
    frame, warnings, repaired = got
    envelope.traceEvents = None
    return rank_from_columns(str(path), _meta(envelope), frame, warnings, False, repaired)


def _rank_events(
    path: str, meta: TraceMeta, events_in: list[Any], warnings: list[str], truncated: bool
) -> RankEvents:
    events, event_warnings, repaired = _columns(_with_begin_end(events_in), Path(path))
    del events_in
    warnings.extend(event_warnings)
    return rank_from_columns(path, meta, events, warnings, truncated, repaired)


def rank_from_columns(
    path: str,
    meta: TraceMeta,
    events: pl.DataFrame,
    warnings: list[str],
    truncated: bool,
    repaired: int,
) -> RankEvents:
    """The per-rank frames from the kept events' columns (times still on the file's scale)."""
    return rank_from_frames(path, meta, split_frames(events), warnings, truncated, repaired)


def split_frames(events: pl.DataFrame, kinds: set[str] | None = None) -> dict[str, pl.DataFrame]:
    """The kept events' columns, one frame per use (a streamed chunk is split at once).
    ``kinds``: the kinds the events hold; frames that draw on none of them are left out."""
    return {
        name: build(events)
        for name, build in _FRAME_BUILDERS.items()
        if kinds is None or kinds & _FRAME_KINDS[name]
    }


def rank_from_frames(
    path: str,
    meta: TraceMeta,
    frames: dict[str, pl.DataFrame],
    warnings: list[str],
    truncated: bool,
    repaired: int,
) -> RankEvents:
    if truncated and meta.base_time_ns is None:
        warnings.append(
            f"{path}: no baseTimeNanoseconds (Kineto writes it last): if the trace had one, "
            "this rank's times are relative and cannot be compared with other ranks'"
        )
    if meta.base_time_ns is not None:
        # Relative Kineto timestamps (2024+): add the base so every rank is on the epoch clock.
        base = pl.lit(meta.base_time_ns, dtype=pl.Int64)
        frames = {
            name: frame.with_columns(
                pl.col(c) + base for c in ("start_ns", "end_ns") if c in frame.columns
            )
            for name, frame in frames.items()
        }
    return RankEvents(
        path=path,
        meta=meta,
        device=frames["device"],
        device_meta=frames["device_meta"],
        launches=frames["launches"],
        steps=frames["steps"].sort("start_ns", maintain_order=True),
        comm_annotations=frames["comm_annotations"],
        comm_ops=frames["comm_ops"],
        shaped_ops=frames["shaped_ops"],
        gpu_ranges=frames["gpu_ranges"],
        cpu=frames["cpu"],
        warnings=tuple(warnings),
        truncated=truncated,
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
        prefix = zlib.decompressobj(wbits=31).decompress(raw)
    except zlib.error as exc:
        raise TraceError(path, f"corrupt gzip data ({exc})") from None
    if not prefix:
        raise TraceError(path, "truncated gzip file: no complete data")
    return prefix


_UTF8_BOM = b"\xef\xbb\xbf"


def _decode(data: bytes, path: Path, warnings: list[str]) -> tuple[_Trace, int | None]:
    data = data.removeprefix(_UTF8_BOM)
    if data.lstrip()[:1] == b"[":
        # The Chrome trace format's bare-array form: the same events without the envelope.
        data = b'{"traceEvents":' + data + b"}"
    try:
        return _decode_doc(data), None
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


def _replace_invalid_utf8(
    data: bytes, path: Path, warnings: list[str]
) -> tuple[_Trace, int | None]:
    """Older Kineto wrote raw bytes of kernel names: keep the events, mark the bytes."""
    warnings.append(f"{path}: invalid UTF-8 bytes in the file were replaced with U+FFFD")
    return _decode(data.decode("utf-8", "replace").encode(), path, warnings)


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
            doc = _decode_doc(data[:cut] + b"]}")
        except (msgspec.DecodeError, msgspec.ValidationError):
            continue
        if doc.traceEvents:
            return doc
    return None


def _meta(doc: _Trace) -> TraceMeta:
    info = doc.distributedInfo if isinstance(doc.distributedInfo, dict) else {}
    props = doc.deviceProperties if isinstance(doc.deviceProperties, list) else []
    base = doc.baseTimeNanoseconds
    rank = _as_int(info.get("rank"))
    return TraceMeta(
        rank=rank if rank is not None and rank >= 0 else None,
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
        device_props={
            int(p["id"]): {k: p[k] for k in _DEVICE_FIELDS if k in p}
            for p in props
            if isinstance(p, dict) and _as_int(p.get("id")) is not None
        },
    )


_DEVICE_FIELDS = ("name", "numSms", "computeMajor", "computeMinor", "totalGlobalMem", "warpSize")


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


def _with_begin_end(events: list[Any]) -> list[Any]:
    """B / E pairs become complete events: per (pid, tid), each E closes the latest open B
    (the format's nesting rule); unmatched ones are dropped."""
    phases = set(map(attrgetter("ph"), events))
    if "B" not in phases and "E" not in phases:
        return events
    open_: dict[tuple[object, object], list[Any]] = {}
    paired = []
    for e in events:
        if e.ph == "B":
            open_.setdefault((e.pid, e.tid), []).append(e)
        elif e.ph == "E":
            stack = open_.get((e.pid, e.tid))
            if stack:
                b = stack.pop()
                if e.ts is None or b.ts is None:
                    continue
                try:
                    dur = Decimal(str(e.ts)) - Decimal(str(b.ts))
                except ArithmeticError:
                    continue
                paired.append(_Complete(b.cat, b.name, b.pid, b.tid, b.ts, str(dur), b.args))
    return [e for e in events if e.ph not in ("B", "E")] + paired


def _columns(
    events: list[_Event], path: Path, cpu_only: bool | None = None
) -> tuple[pl.DataFrame, list[str], int]:
    """One row per complete ('X') event of a category we use, with exact ns times.

    Rows are chosen in polars on the category and name columns, and only the chosen events'
    other fields are gathered: no Python code runs per event beyond ``attrgetter``."""
    complete = [e for e in events if e.ph == "X"]
    head = pl.DataFrame(
        {
            "cat": _str_series("cat", _field(complete, "cat")),
            "name": _str_series("name", _field(complete, "name")),
        }
    ).with_columns(
        # MTIA's DMA requests are copy-engine work, not compute.
        pl.when(
            pl.col("cat").str.to_lowercase().eq("mtia_ccp_events")
            & pl.col("name").str.starts_with("dma_")
        )
        .then(pl.lit("memcpy"))
        .otherwise(_KIND)
        .alias("kind"),
    )
    rows = _wanted_rows(head, complete, cpu_only)
    picked = _pick(complete, rows)
    del complete
    frame = head[rows].with_columns(
        _num_series("pid", _field(picked, "pid")),
        _num_series("tid", _field(picked, "tid")),
        us_text_to_ns(_field(picked, "ts"), "ts_ns"),
        us_text_to_ns(_field(picked, "dur"), "dur_ns"),
    )
    frame = _attach_args(frame, _field(picked, "args"))
    return _repair_times(frame, path)


def _field(items: Sequence[Any], attr: str) -> list[Any]:
    """One attribute of every item, gathered at C speed."""
    return list(map(attrgetter(attr), items))


def _pick(items: list[Any], rows: list[int]) -> list[Any]:
    if len(rows) == len(items):
        return items
    if len(rows) < 2:
        return [items[i] for i in rows]
    return list(itemgetter(*rows)(items))


def _str_series(name: str, values: Sequence[object]) -> pl.Series:
    try:
        return pl.Series(name, values, dtype=pl.String)
    except (TypeError, pl.exceptions.PolarsError):
        # ints (pids, tids) or other odd values: text, so mixed files stay one column
        return pl.Series(name, [None if v is None else str(v) for v in values], dtype=pl.String)


def _num_series(name: str, values: Sequence[object]) -> pl.Series:
    """pid / tid as numbers: ints, or the digits of old spellings such as ``"stream 7"``."""
    try:
        return pl.Series(name, values, dtype=pl.Int64)
    except (TypeError, OverflowError, pl.exceptions.PolarsError):
        text = _str_series(name, values)
        return text.str.extract(r"(-?\d+)").cast(pl.Int64, strict=False)


_KIND = pl.col("cat").str.to_lowercase().replace_strict(_KIND_OF_CAT, default=None)


def _wanted_rows(head: pl.DataFrame, complete: list[Any], cpu_only: bool | None) -> list[int]:
    """Rows to keep: device work, launches, annotations; CPU ops only when they carry collective
    metadata or recorded shapes, or when the trace has no device work at all (CPU-only
    traces). ``cpu_only`` forces the choice (a streamed chunk does not see the whole trace)."""
    kind = pl.col("kind")
    used = kind.is_not_null()
    if cpu_only:
        return _true_rows(head, used)
    # matmul / conv / attention ops are worth a row only with their shapes (most traces do
    # not record them): a byte search in the few candidates' raw args
    candidates = _true_rows(head, (kind == "cpu_op") & pl.col("name").is_in(list(SHAPED_OPS)))
    shaped = [i for i in candidates if b'"Input Dims"' in bytes(complete[i].args)]
    kept_op = (pl.col("name") == _COMM_OP) | pl.int_range(pl.len()).is_in(shaped)
    gpu_rows = used & ((kind != "cpu_op") | kept_op)
    if cpu_only is None and not head.select((gpu_rows & kind.is_in(DEVICE_KINDS)).any()).item():
        return _true_rows(head, used)
    return _true_rows(head, gpu_rows)


def _true_rows(frame: pl.DataFrame, mask: pl.Expr) -> list[int]:
    return frame.select(mask.fill_null(False)).to_series().arg_true().to_list()


_COMM_OP = "record_param_comms"


_ARGS_DECODER = msgspec.json.Decoder(_Args | None)
_ARGS_LIST_DECODER = msgspec.json.Decoder(list[_Args | None])
_NO_ARGS = _Args()
_LINK_FIELDS = ("correlation", "external_id", "external_id_lc", "device", "stream")


def _attach_args(frame: pl.DataFrame, raw_args: list[msgspec.Raw]) -> pl.DataFrame:
    """Decode args only for the kept rows, in one call: skipping the rest keeps the parse fast."""
    args = [a if a is not None else _NO_ARGS for a in _decode_args(raw_args)]
    corr, ext, ext_lc, device, stream = (_field(args, f) for f in _LINK_FIELDS)
    frame = frame.with_columns(
        _int_series("correlation", corr),
        _int_series("external_id", ext).fill_null(_int_series("external_id", ext_lc)),
        _int_series("arg_device", device),
        _int_series("arg_stream", stream),
    )
    wanted = frame.select(
        (pl.col("kind") == "kernel") | (pl.col("name") == "record_param_comms")
    ).to_series()
    meta_rows = wanted.arg_true().to_list()
    meta_args = _pick(args, meta_rows)
    meta_values = [_field(meta_args, f) for f in _META_FIELDS]
    meta = pl.DataFrame(
        [
            pl.Series("row", meta_rows, dtype=pl.UInt32),
            *(
                _typed_series(field, values, dtype)
                for (field, dtype), values in zip(_META_FIELDS.items(), meta_values, strict=True)
            ),
        ]
    )
    return _attach_dims(
        frame.with_row_index("row").join(meta, on="row", how="left", maintain_order="left"), args
    ).drop("row")


def _attach_dims(frame: pl.DataFrame, args: list[_Args]) -> pl.DataFrame:
    """Input Dims / Concrete Inputs of the matmul, conv and attention ops, as JSON text (their
    nesting varies by op); null columns, and no join, for traces without them."""
    rows = frame.select(pl.col("name").is_in(list(SHAPED_OPS))).to_series().arg_true().to_list()
    rows = [i for i in rows if args[i].input_dims is not None]
    if not rows:
        return frame.with_columns(
            pl.lit(None, pl.String).alias("input_dims"),
            pl.lit(None, pl.String).alias("concrete_inputs"),
        )
    dims = pl.DataFrame(
        {
            "row": rows,
            "input_dims": [_json(args[i].input_dims) for i in rows],
            "concrete_inputs": [_json(args[i].concrete_inputs) for i in rows],
        },
        schema={"row": pl.UInt32, "input_dims": pl.String, "concrete_inputs": pl.String},
    )
    return frame.join(dims, on="row", how="left", maintain_order="left")


def _json(value: object) -> str | None:
    return None if value is None else msgspec.json.encode(value).decode()


def _decode_args(raw_args: list[msgspec.Raw]) -> list[_Args | None]:
    try:
        return _ARGS_LIST_DECODER.decode(b"[" + b",".join(raw_args) + b"]")
    except (msgspec.DecodeError, msgspec.ValidationError):
        return [_decode_one_args(raw) for raw in raw_args]


def _decode_one_args(raw: msgspec.Raw) -> _Args | None:
    try:
        return _ARGS_DECODER.decode(raw)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None


def _int_series(name: str, values: Sequence[object]) -> pl.Series:
    try:
        return pl.Series(name, values, dtype=pl.Int64)
    except (TypeError, OverflowError, pl.exceptions.PolarsError):
        # quoted numbers ("correlation": "17") still link; anything else is null
        return pl.Series(
            name,
            [_arg_int(_as_int(v) if isinstance(v, str) else v) for v in values],
            dtype=pl.Int64,
        )


def _typed_series(name: str, values: Sequence[object], dtype: pl.DataType) -> pl.Series:
    if dtype == pl.Int64():
        try:
            return pl.Series(name, values, dtype=pl.Int64)
        except (TypeError, OverflowError, pl.exceptions.PolarsError):
            # some writers quote numbers: "Seq": "17"
            return _int_series(name, [_as_int(v) if isinstance(v, str) else v for v in values])
    return _str_series(name, values)


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
    """Device work; its collective metadata lives apart (``_device_meta_frame``, by
    ``dev_row``): a handful of comm kernels carry it, and as null columns on every compute
    kernel it was most of the frame's memory."""
    return events.filter(pl.col("kind").is_in(list(DEVICE_KINDS))).select(
        "kind",
        "name",
        pl.coalesce("arg_device", pl.col("pid")).alias("device"),
        pl.coalesce("arg_stream", pl.col("tid")).alias("stream"),
        "start_ns",
        "end_ns",
        "correlation",
        "external_id",
        pl.int_range(pl.len(), dtype=pl.Int64).alias("dev_row"),
    )


def _device_meta_frame(events: pl.DataFrame) -> pl.DataFrame:
    device = events.filter(pl.col("kind").is_in(list(DEVICE_KINDS))).with_row_index("dev_row")
    return device.filter(pl.any_horizontal(pl.col(list(_META_FIELDS)).is_not_null())).select(
        pl.col("dev_row").cast(pl.Int64), *_META_FIELDS
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
        pl.coalesce("arg_device", pl.col("pid")).alias("device"),
        pl.coalesce("arg_stream", pl.col("tid")).alias("stream"),
        "start_ns",
        "end_ns",
    )


def _gpu_range_frame(events: pl.DataFrame) -> pl.DataFrame:
    return events.filter(pl.col("kind") == "gpu_annotation").select(
        "name",
        pl.coalesce("arg_device", pl.col("pid")).alias("device"),
        pl.coalesce("arg_stream", pl.col("tid")).alias("stream"),
        "start_ns",
        "end_ns",
    )


def _comm_op_frame(events: pl.DataFrame) -> pl.DataFrame:
    return events.filter(
        (pl.col("kind") == "cpu_op") & (pl.col("name") == "record_param_comms")
    ).select("external_id", "start_ns", *_META_FIELDS)


def _shaped_op_frame(events: pl.DataFrame) -> pl.DataFrame:
    """Matmul / conv / attention CPU ops with their recorded shapes (``record_shapes``)."""
    return events.filter(
        (pl.col("kind") == "cpu_op")
        & pl.col("name").is_in(list(SHAPED_OPS))
        & pl.col("input_dims").is_not_null()
    ).select("name", "tid", "start_ns", "end_ns", "input_dims", "concrete_inputs")


def _cpu_frame(events: pl.DataFrame) -> pl.DataFrame:
    """CPU ops and annotations: the timeline of traces without device activity."""
    return events.filter(pl.col("kind").is_in(["cpu_op", "annotation"])).select(
        "kind", "name", "pid", "tid", "start_ns", "end_ns"
    )


_FRAME_KINDS: dict[str, set[str]] = {
    "device": set(DEVICE_KINDS),
    "device_meta": set(DEVICE_KINDS),
    "launches": {"launch"},
    "steps": {"annotation"},
    "comm_annotations": {"gpu_annotation"},
    "comm_ops": {"cpu_op"},
    "shaped_ops": {"cpu_op"},
    "gpu_ranges": {"gpu_annotation"},
    "cpu": {"cpu_op", "annotation"},
}

_FRAME_BUILDERS = {
    "device": _device_frame,
    "device_meta": _device_meta_frame,
    "launches": _launch_frame,
    "steps": _step_frame,
    "comm_annotations": _gpu_annotation_frame,
    "comm_ops": _comm_op_frame,
    "shaped_ops": _shaped_op_frame,
    "gpu_ranges": _gpu_range_frame,
    "cpu": _cpu_frame,
}
