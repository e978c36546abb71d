"""Events to columns: the kept events of a trace (or of one streamed chunk) as one frame with
exact integer-ns times, then split into the frames the engine reads (``RankEvents``).

Rows are chosen on the category and name columns in polars; no Python code runs per event
beyond ``attrgetter``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Collection, Sequence
from decimal import Decimal
from operator import attrgetter, itemgetter
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import numpy.typing as npt
import polars as pl

from tracecomm.ingest.events import (
    ARGS_DECODER,
    ARGS_LIST_DECODER,
    COMM_OP,
    KIND_OF_CAT,
    LAUNCH_OP_KIND,
    META_SCHEMA,
    NO_ARGS,
    STEP_NAME,
    Args,
    Complete,
    Event,
    as_int,
)
from tracecomm.ingest.model import DEVICE_KINDS, RankEvents, TraceMeta
from tracecomm.ingest.timestamps import us_text_to_ns


def rank_events(
    path: str,
    meta: TraceMeta,
    events_in: list[Any],
    warnings: list[str],
    truncated: bool,
    shaped_ops: Collection[str],
) -> RankEvents:
    """Decoded events (a whole file) to the rank's frames."""
    events, event_warnings, repaired = columns(with_begin_end(events_in), Path(path), shaped_ops)
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
    ops: pl.DataFrame | None = None,
) -> RankEvents:
    """The per-rank frames from the kept events' columns (times still on the file's scale);
    ``ops``: CPU ops the C scanner kept apart (``fast.columns``)."""
    frames = split_frames(events)
    if ops is not None:
        frames["ops"] = pl.concat([frames["ops"], ops])
    return rank_from_frames(path, meta, frames, warnings, truncated, repaired)


def split_frames(
    events: pl.DataFrame, kinds: set[str] | None = None, dev_row_from: int = 0
) -> dict[str, pl.DataFrame]:
    """The kept events' columns, one frame per use (a streamed chunk is split at once).
    ``kinds``: the kinds the events hold; frames that draw on none of them are left out.
    ``dev_row_from``: the number of the chunk's first device row (rows count across chunks).

    One query for all of them (each frame a plan over the rows of its kinds): polars filters
    only the columns a frame keeps, where a filter of the whole chunk per frame copied every
    column first (a chunk's split 4.7 -> 1.7 ms on a small trace, 4.8 -> 3.2 ms on a real one)."""
    events_lazy = events.lazy()
    plans = {
        name: build(events_lazy.filter(pl.col("kind").is_in(sorted(_FRAME_KINDS[name]))))
        for name, build in _FRAME_BUILDERS.items()
        if kinds is None or kinds & _FRAME_KINDS[name]
    }
    if dev_row_from:
        plans = {
            name: plan.with_columns(pl.col("dev_row") + dev_row_from) if name in _DEV_ROWS else plan
            for name, plan in plans.items()
        }
    return dict(zip(plans, pl.collect_all(plans.values(), engine="in-memory"), strict=True))


_DEV_ROWS = ("device", "device_meta")


def concat_chunks(frames: list[pl.DataFrame]) -> pl.DataFrame:
    """One frame of a streamed trace's chunks, kept as chunks (a rechunked copy would double
    the largest frame at the peak). The chunks' schemas are the same but where one was read
    by the general path (a column all null there): those are joined to their supertypes."""
    try:
        return pl.concat(frames, how="vertical", rechunk=False)  # no query
    except pl.exceptions.SchemaError:
        return pl.concat(frames, how="vertical_relaxed", rechunk=False)


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
    frames = dict(frames)
    frames["launches"] = with_launch_ops(frames["launches"], frames.pop("ops", None))
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


def with_begin_end(events: list[Any]) -> list[Any]:
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
                paired.append(Complete(b.cat, b.name, b.pid, b.tid, b.ts, str(dur), b.args))
    return [e for e in events if e.ph not in ("B", "E")] + paired


def columns(
    events: list[Event], path: Path, shaped_ops: Collection[str], cpu_only: bool | None = None
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
    rows, as_op = _wanted_rows(head, complete, cpu_only, shaped_ops)
    picked = _pick(complete, rows)
    del complete
    frame = head[rows]
    if as_op is not None:
        frame = frame.with_columns(
            pl.when(as_op).then(pl.lit(LAUNCH_OP_KIND)).otherwise(pl.col("kind")).alias("kind")
        )
    frame = frame.with_columns(
        _num_series("pid", _field(picked, "pid")),
        _num_series("tid", _field(picked, "tid")),
        us_text_to_ns(_field(picked, "ts"), "ts_ns"),
        us_text_to_ns(_field(picked, "dur"), "dur_ns"),
    )
    frame = _attach_args(frame, _field(picked, "args"), shaped_ops)
    return repair_times(frame, path)


def _field(items: Sequence[Any], attr: str) -> list[Any]:
    """One attribute of every item, gathered at C speed."""
    return list(map(attrgetter(attr), items))


def _pick(items: list[Any], rows: list[int]) -> list[Any]:
    if len(rows) == len(items):
        return items
    if len(rows) < 2:
        return [items[i] for i in rows]
    return list(itemgetter(*rows)(items))


def null_column(name: str, dtype: Any, height: int) -> pl.Series:
    """A null column ``height`` rows tall, made without a query or a Python list of the rows
    (``pl.repeat`` and ``pl.lit`` in ``with_columns`` run a query each)."""
    return pl.Series(name, [None], dtype=dtype).new_from_index(0, height)


def _str_series(name: str, values: Sequence[object]) -> pl.Series:
    # ints (pids, tids), lists ("Process Group Ranks") or other odd values: text, so mixed
    # files stay one column. polars refuses any of them in a String column, and its refusal
    # cost more than the text (6.6 ms against 1.1 over 860 rank lists), so it is not asked.
    if all(v is None or isinstance(v, str) for v in values):
        with contextlib.suppress(TypeError, pl.exceptions.PolarsError):
            return pl.Series(name, values, dtype=pl.String)
    return pl.Series(name, [None if v is None else str(v) for v in values], dtype=pl.String)


def _num_series(name: str, values: Sequence[object]) -> pl.Series:
    """pid / tid as numbers: ints, or the digits of old spellings such as ``"stream 7"``."""
    try:
        return pl.Series(name, values, dtype=pl.Int64)
    except (TypeError, OverflowError, pl.exceptions.PolarsError):
        text = _str_series(name, values)
        return text.str.extract(r"(-?\d+)").cast(pl.Int64, strict=False)


_KIND = pl.col("cat").str.to_lowercase().replace_strict(KIND_OF_CAT, default=None)


def _wanted_rows(
    head: pl.DataFrame, complete: list[Any], cpu_only: bool | None, shaped_ops: Collection[str]
) -> tuple[list[int], pl.Series | None]:
    """Rows to keep: device work, launches, annotations, and CPU ops: every one when the trace
    has no device work at all (CPU-only traces); else those with collective metadata or
    recorded shapes as such, and the others only as the op a launch may name (``as_op``: their
    rows, to be relabelled ``LAUNCH_OP_KIND``). ``cpu_only`` forces the choice (a streamed
    chunk does not see the whole trace)."""
    kind = pl.col("kind")
    used = kind.is_not_null()
    if cpu_only:
        return _true_rows(head, used), None
    # matmul / conv / attention ops are worth a row only with their shapes (most traces do
    # not record them): a byte search in the few candidates' raw args
    candidates = _true_rows(head, (kind == "cpu_op") & pl.col("name").is_in(list(shaped_ops)))
    shaped = [i for i in candidates if b'"Input Dims"' in bytes(complete[i].args)]
    kept_op = (pl.col("name") == COMM_OP) | pl.int_range(pl.len()).is_in(shaped)
    if cpu_only is None and not head.select((used & kind.is_in(DEVICE_KINDS)).any()).item():
        return _true_rows(head, used), None
    rows = _true_rows(head, used)
    as_op = head.select(((kind == "cpu_op") & ~kept_op).fill_null(False)).to_series()
    return rows, as_op.gather(rows) if rows else as_op.clear()


def _true_rows(frame: pl.DataFrame, mask: pl.Expr) -> list[int]:
    return frame.select(mask.fill_null(False)).to_series().arg_true().to_list()


_LINK_FIELDS = (
    "correlation",
    "external_id",
    "external_id_lc",
    "device",
    "stream",
    "graph_id",
    "graph_node",
)


def _attach_args(
    frame: pl.DataFrame, raw_args: list[msgspec.Raw], shaped_ops: Collection[str]
) -> pl.DataFrame:
    """Decode args only for the kept rows, in one call: skipping the rest keeps the parse fast."""
    args = [a if a is not None else NO_ARGS for a in decode_args(raw_args)]
    corr, ext, ext_lc, device, stream, graph, node = (_field(args, f) for f in _LINK_FIELDS)
    frame = frame.with_columns(
        int_series("correlation", corr),
        int_series("external_id", ext).fill_null(int_series("external_id", ext_lc)),
        int_series("arg_device", device),
        int_series("arg_stream", stream),
        int_series("graph_id", graph).replace(0, None),  # 0: not from a graph
        int_series("graph_node", node).replace(0, None),
    )
    wanted = frame.select((pl.col("kind") == "kernel") | (pl.col("name") == COMM_OP)).to_series()
    meta_rows = wanted.arg_true().to_list()
    meta_args = _pick(args, meta_rows)
    meta_values = [_field(meta_args, f) for f in META_SCHEMA]
    meta = pl.DataFrame(
        [
            pl.Series("row", meta_rows, dtype=pl.UInt32),
            *(
                typed_series(field, values, dtype)
                for (field, dtype), values in zip(META_SCHEMA.items(), meta_values, strict=True)
            ),
        ]
    )
    return _attach_dims(
        frame.with_row_index("row").join(meta, on="row", how="left", maintain_order="left"),
        args,
        shaped_ops,
    ).drop("row")


def _attach_dims(
    frame: pl.DataFrame, args: list[Args], shaped_ops: Collection[str]
) -> pl.DataFrame:
    """Input Dims / Concrete Inputs of the matmul, conv and attention ops, as JSON text (their
    nesting varies by op); null columns, and no join, for traces without them."""
    rows = frame.select(pl.col("name").is_in(list(shaped_ops))).to_series().arg_true().to_list()
    rows = [i for i in rows if args[i].input_dims is not None]
    if not rows:
        return frame.with_columns(
            pl.lit(None, pl.String).alias("input_dims"),
            pl.lit(None, pl.String).alias("concrete_inputs"),
            pl.lit(None, pl.String).alias("input_types"),
        )
    dims = pl.DataFrame(
        {
            "row": rows,
            "input_dims": [json_text(args[i].input_dims) for i in rows],
            "concrete_inputs": [json_text(args[i].concrete_inputs) for i in rows],
            "input_types": [json_text(args[i].input_types) for i in rows],
        },
        schema=DIMS_SCHEMA,
    )
    return frame.join(dims, on="row", how="left", maintain_order="left")


DIMS_SCHEMA = {
    "row": pl.UInt32,
    "input_dims": pl.String,
    "concrete_inputs": pl.String,
    "input_types": pl.String,
}


def with_launch_ops(launches: pl.DataFrame, ops: pl.DataFrame | None) -> pl.DataFrame:
    """Each launch's ``op``: the CPU op (or annotation) whose External id the launch carries,
    the innermost one open when it was launched (kineto-traces.md §7). Older Kineto wrote
    the launch's own correlation id there, which names no op: those launches have none."""
    if ops is None or ops.height == 0 or launches.height == 0:
        return launches
    # Only the ops some launch names, first: a streamed trace keeps every CPU op (40,794 on
    # the real rank, of which older Kineto's launches name none: 2.9 -> 1.2 ms). External
    # ids are unique in a trace; a file that repeats one names either op.
    names = (
        ops.lazy()
        .filter(pl.col("external_id").is_in(launches["external_id"].drop_nulls().implode()))
        .unique("external_id", keep="any")
        .select("external_id", pl.col("name").alias("_op"))
    )
    linked = (
        launches.lazy().drop("op").join(names, on="external_id", how="left", maintain_order="left")
    )
    own = pl.col("external_id") == pl.col("correlation")
    return (
        linked.with_columns(
            pl.when(own.fill_null(False)).then(None).otherwise(pl.col("_op")).alias("op")
        )
        .drop("_op")
        .collect(engine="in-memory")
    )


def json_text(value: object) -> str | None:
    return None if value is None else msgspec.json.encode(value).decode()


def decode_args(raw_args: list[msgspec.Raw]) -> list[Args | None]:
    try:
        return ARGS_LIST_DECODER.decode(b"[" + b",".join(raw_args) + b"]")
    except (msgspec.DecodeError, msgspec.ValidationError):
        return [_decode_one_args(raw) for raw in raw_args]


def _decode_one_args(raw: msgspec.Raw) -> Args | None:
    try:
        return ARGS_DECODER.decode(raw)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None


def int_series(name: str, values: Sequence[object]) -> pl.Series:
    try:
        return pl.Series(name, values, dtype=pl.Int64)
    except (TypeError, OverflowError, pl.exceptions.PolarsError):
        # quoted numbers ("correlation": "17") still link; anything else is null
        return pl.Series(
            name,
            [int64_or_none(as_int(v) if isinstance(v, str) else v) for v in values],
            dtype=pl.Int64,
        )


def typed_series(name: str, values: Sequence[object], dtype: pl.DataType) -> pl.Series:
    if dtype == pl.Int64():
        try:
            return pl.Series(name, values, dtype=pl.Int64)
        except (TypeError, OverflowError, pl.exceptions.PolarsError):
            # some writers quote numbers: "Seq": "17"
            return int_series(name, [as_int(v) if isinstance(v, str) else v for v in values])
    return _str_series(name, values)


def int64_or_none(value: object) -> int | None:
    """An integer an Int64 column holds, else None (booleans, text, past 64 bits)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value if -(2**63) <= value < 2**63 else None
    return None


def repair_times(frame: pl.DataFrame, path: Path) -> tuple[pl.DataFrame, list[str], int]:
    """Drop events without a start; durations missing or negative become 0, with a warning."""
    counts = frame.select(
        pl.col("ts_ns").is_null().sum().alias("no_ts"),
        pl.col("dur_ns").is_null().sum().alias("no_dur"),
        (pl.col("dur_ns") < 0).sum().alias("neg_dur"),
    ).row(0, named=True)
    if counts["no_ts"]:
        frame = frame.filter(pl.col("ts_ns").is_not_null())
    dur = pl.col("dur_ns")
    if counts["no_dur"] or counts["neg_dur"]:
        dur = dur.fill_null(0).clip(lower_bound=0)
    frame = frame.select(  # one pass; a sound trace (most) needs no filter and no repair
        pl.exclude("ts_ns", "dur_ns"),
        pl.col("ts_ns").alias("start_ns"),
        (pl.col("ts_ns") + dur).alias("end_ns"),
    )
    no_ts, no_dur, neg_dur = counts["no_ts"], counts["no_dur"], counts["neg_dur"]
    return frame, time_warnings(path, no_ts, no_dur, neg_dur), no_ts + no_dur + neg_dur


def time_warnings(path: Path, no_ts: int, no_dur: int, neg_dur: int) -> list[str]:
    """What ``repair_times`` (or the scanner's path, ``fast``) did to a chunk's times."""
    warnings = []
    if no_ts:
        warnings.append(f"{path}: {no_ts} events without a timestamp were dropped")
    if no_dur:
        warnings.append(f"{path}: {no_dur} events without a duration were read as 0 µs")
    if neg_dur:
        warnings.append(f"{path}: {neg_dur} events with a negative duration were read as 0 µs")
    return warnings


def _device_frame(events: pl.LazyFrame) -> pl.LazyFrame:
    """Device work; its collective metadata lives apart (``_device_meta_frame``, by
    ``dev_row``): a handful of comm kernels carry it, and as null columns on every compute
    kernel it was most of the frame's memory."""
    return events.select(
        "kind",
        "name",
        pl.coalesce("arg_device", pl.col("pid")).alias("device"),
        pl.coalesce("arg_stream", pl.col("tid")).alias("stream"),
        "start_ns",
        "end_ns",
        "correlation",
        "external_id",
        "graph_id",
        "graph_node",
        pl.int_range(pl.len(), dtype=pl.Int64).alias("dev_row"),
    )


def _device_meta_frame(events: pl.LazyFrame) -> pl.LazyFrame:
    device = events.with_row_index("dev_row")
    return device.filter(pl.any_horizontal(pl.col(list(META_SCHEMA)).is_not_null())).select(
        pl.col("dev_row").cast(pl.Int64), *META_SCHEMA
    )


def _launch_frame(events: pl.LazyFrame) -> pl.LazyFrame:
    return events.select(
        "name",
        "tid",
        "start_ns",
        "end_ns",
        "correlation",
        "external_id",
        pl.lit(None, pl.String).alias("op"),  # with_launch_ops fills it
    )


def _op_frame(events: pl.LazyFrame) -> pl.LazyFrame:
    """CPU ops and annotations by External id: what a launch's ``op`` is looked up in."""
    return events.filter(pl.col("external_id").is_not_null()).select("name", "external_id")


def _step_frame(events: pl.LazyFrame) -> pl.LazyFrame:
    return (
        events.select(
            pl.col("name").str.extract(STEP_NAME.pattern).cast(pl.Int64).alias("step"),
            "tid",
            "start_ns",
            "end_ns",
        )
        .filter(pl.col("step").is_not_null())
        .sort("start_ns")
    )


def _gpu_annotation_frame(events: pl.LazyFrame) -> pl.LazyFrame:
    """The ``nccl:*`` GPU ranges: what a comm kernel's type may come from."""
    return _gpu_range_frame(events.filter(pl.col("name").str.starts_with("nccl:")))


def _gpu_range_frame(events: pl.LazyFrame) -> pl.LazyFrame:
    return events.select(
        "name",
        pl.coalesce("arg_device", pl.col("pid")).alias("device"),
        pl.coalesce("arg_stream", pl.col("tid")).alias("stream"),
        "start_ns",
        "end_ns",
    )


def _comm_op_frame(events: pl.LazyFrame) -> pl.LazyFrame:
    return events.filter(pl.col("name") == COMM_OP).select("external_id", "start_ns", *META_SCHEMA)


def _shaped_op_frame(events: pl.LazyFrame) -> pl.LazyFrame:
    """Matmul / conv / attention CPU ops with their recorded shapes (``record_shapes``): the
    readers attach shapes to those ops only."""
    return events.filter(pl.col("input_dims").is_not_null()).select(
        "name", "tid", "start_ns", "end_ns", "input_dims", "concrete_inputs", "input_types"
    )


def _cpu_frame(events: pl.LazyFrame) -> pl.LazyFrame:
    """CPU ops and annotations: the timeline of traces without device activity."""
    return events.select("kind", "name", "pid", "tid", "start_ns", "end_ns")


# The kinds each frame is built from: its builder gets those rows alone.
_FRAME_KINDS: dict[str, frozenset[str]] = {
    "device": frozenset(DEVICE_KINDS),
    "device_meta": frozenset(DEVICE_KINDS),
    "launches": frozenset({"launch"}),
    "ops": frozenset({LAUNCH_OP_KIND, "cpu_op", "annotation"}),
    "steps": frozenset({"annotation"}),
    "comm_annotations": frozenset({"gpu_annotation"}),
    "comm_ops": frozenset({"cpu_op"}),
    "shaped_ops": frozenset({"cpu_op", "annotation"}),  # gloo's ranges are annotations
    "gpu_ranges": frozenset({"gpu_annotation"}),
    "cpu": frozenset({"cpu_op", "annotation"}),
}

_FRAME_BUILDERS = {
    "device": _device_frame,
    "device_meta": _device_meta_frame,
    "launches": _launch_frame,
    "ops": _op_frame,
    "steps": _step_frame,
    "comm_annotations": _gpu_annotation_frame,
    "comm_ops": _comm_op_frame,
    "shaped_ops": _shaped_op_frame,
    "gpu_ranges": _gpu_range_frame,
    "cpu": _cpu_frame,
}


def innermost_enclosing(points: pl.DataFrame, ranges: pl.DataFrame) -> pl.DataFrame:
    """For each point (``key``, ``tid``, ``at``), the ``value`` of the latest-starting range
    (``tid``, ``start``, ``end``, ``value``) open on the same thread at that time: the
    innermost, ranges on a thread being nested (of two starting together, the shorter).
    Points inside none are left out.

    Most points sit in the range that started last before them (a launch in its leaf op): one
    as-of join finds those; only the rest (a point after a child range closed, back in its
    parent) take the inequality join. Two queries on the in-memory engine (as the engine's,
    partition.py): the dozen eager steps they replace were most of the time on a small rank."""
    schema = {"key": points.schema["key"], "value": ranges.schema["value"]}
    if points.height == 0 or ranges.height == 0:
        return pl.DataFrame(schema=schema)
    ordered = ranges.lazy().sort("start", pl.col("end"), descending=[False, True])
    matched, right = pl.collect_all(
        [
            points.lazy()
            .sort("at")
            .join_asof(
                ordered,
                left_on="at",
                right_on="start",
                by="tid",
                strategy="backward",
                check_sortedness=False,
            )
            .select(
                "key",
                "tid",
                "at",
                "value",
                (pl.col("end") >= pl.col("at")).fill_null(False).alias("_latest"),
            ),
            ordered.drop_nulls(["tid", "start", "end"]),
        ],
        engine="in-memory",
    )
    in_latest = matched["_latest"].to_numpy()
    latest = matched[np.flatnonzero(in_latest), ["key", "value"]]
    # null threads and times never matched the inequality join's equality
    unsure = ~in_latest & matched["tid"].is_not_null().to_numpy()
    rest = matched[
        np.flatnonzero(unsure & matched["at"].is_not_null().to_numpy()), ["key", "tid", "at"]
    ]
    outer = _enclosing_by_inequalities(rest, right)
    if outer is None:
        return latest.cast(schema)  # type: ignore[arg-type]
    return pl.concat([latest.lazy(), outer]).cast(schema).collect(engine="in-memory")  # type: ignore[arg-type]


def _enclosing_by_inequalities(points: pl.DataFrame, ranges: pl.DataFrame) -> pl.LazyFrame | None:
    """``innermost_enclosing`` of the points the as-of join left (``key``, ``tid``, ``at``),
    null-free, in ``ranges`` (null-free), by an inequality join; None where no point is in
    any range. Points and ranges go on one axis where each thread has a stretch of its own
    (the thread's number × the distinct times, + the time's rank): "same thread and inside"
    is then two inequalities, which polars joins by sorting (IEJoin), where the thread's
    equality joined each point to every range of its thread before filtering (30 of a
    2,900-launch rank's 140 ms). On that axis the points no range reaches (the latest end of
    the ranges started before them) are dropped first: inside none (most launches outside
    NCCL's calls, 3,900 of 4,000 on a real rank)."""
    if points.height == 0 or ranges.height == 0:
        return None
    at, start, end = points["at"].to_numpy(), ranges["start"].to_numpy(), ranges["end"].to_numpy()
    tids = np.concatenate([points["tid"].to_numpy(), ranges["tid"].to_numpy()])
    times = _distinct(np.concatenate([at, start, end]))
    stretch = np.searchsorted(_distinct(tids), tids).astype(np.int64) * len(times)
    at_key = stretch[: len(at)] + np.searchsorted(times, at)
    start_key = stretch[len(at) :] + np.searchsorted(times, start)
    end_key = stretch[len(at) :] + np.searchsorted(times, end)
    by_start = np.argsort(start_key, kind="stable")
    reach = np.maximum.accumulate(end_key[by_start])
    last = np.searchsorted(start_key[by_start], at_key, side="right") - 1
    reached = np.flatnonzero((last >= 0) & (reach[np.maximum(last, 0)] >= at_key))
    if len(reached) == 0:
        return None
    return (
        points[reached, ["key"]]
        .lazy()
        .with_columns(pl.lit(pl.Series("_at", at_key[reached])))
        .join_where(
            ranges.lazy().with_columns(
                pl.lit(pl.Series("_start", start_key)), pl.lit(pl.Series("_end", end_key))
            ),
            pl.col("_at") >= pl.col("_start"),
            pl.col("_at") <= pl.col("_end"),
        )
        .sort(["start", "end"], descending=[True, False])
        .unique("key", keep="first")
        .select("key", "value")
    )


def _distinct(values: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """The distinct values, sorted (``np.unique`` imports ``numpy.ma`` on first use: 13 ms)."""
    ordered = np.sort(values)
    return ordered[np.concatenate([[True], ordered[1:] != ordered[:-1]])]
