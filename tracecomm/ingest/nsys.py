"""Nsight Systems SQLite exports (``nsys export --type sqlite``) as the same columnar events as
a Kineto trace: one ``RankEvents`` per (process, GPU) of the report, so that everything
downstream reads them unchanged (docs/metrics.md §1b).

What is read (export schema 2.x ``EXPORT_META_DATA`` to 3.25 ``META_DATA_EXPORT``; a table
exists only when it has rows, and since 2025.6 rows are not ordered):
- kernels, copies and sets (``CUPTI_ACTIVITY_KIND_KERNEL`` / ``MEMCPY`` / ``MEMSET``) with
  their names from ``StringIds``; runtime calls (``CUPTI_ACTIVITY_KIND_RUNTIME``) by
  ``correlationId``, their ``_v7000``-style suffixes dropped;
- NVTX push/pop and start/end ranges (``NVTX_EVENTS`` 59 / 60, ``text`` or ``textId``) as CPU
  annotations: PyTorch's ``ProfilerStep#N`` and ``nccl:all_to_all, op_id = …`` (the
  ``, op_id = …`` suffix dropped), NCCL's own domain ranges ``ncclAllReduce`` … as
  ``nccl:AllReduce`` so that a generic kernel takes the collective its launch sat in (§1);
- identity: the host (``TARGET_INFO_SYSTEM_ENV``), the session start (every time is relative
  to ``TARGET_INFO_SESSION_START_TIME.utcEpochNs``: the epoch clock), GPU names
  (``TARGET_INFO_GPU`` / ``TARGET_INFO_CUDA_DEVICE``), the global rank (below).

Queries are SQL projections with the joins done by SQLite, each column fetched whole as one JSON
array (``_json_frame``; row by row where a value is not of its column's type); nothing is
written, the file is opened read-only and immutable.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from urllib.parse import quote

import orjson
import polars as pl

from tracecomm.errors import NotATrace, TraceError
from tracecomm.ingest.events import META_SCHEMA, STEP_NAME
from tracecomm.ingest.frames import innermost_enclosing, int64_or_none, rank_from_columns
from tracecomm.ingest.limits import check_plain_size
from tracecomm.ingest.model import RankEvents, ReadOptions, TraceMeta
from tracecomm.ingest.nccl_nvtx import (
    NvtxTypes,
    communicators,
    launch_meta,
    nccl_calls,
    nccl_domains,
    nvtx_types,
    rank_of_process,
)

SQLITE_MAGIC = b"SQLite format 3\x00"
# PyTorch's NVTX ranges (emit_nvtx / record_function) carry their ids after the name
_NVTX_SUFFIX = re.compile(r", (?:op_id|seq|sizes|input_op_ids) = .*$", re.DOTALL)
_NCCL_RANGE = re.compile(r"^nccl([A-Z][A-Za-z]*)$")
_RUNTIME_VERSION = re.compile(r"_v\d+$")
_GPU_NAME_LIMIT = 200
# a serialized GlobalId: ... | pid (24 bits) | tid (24 bits)
_TID_SPAN = 0x1000000
# the largest name read from an export (a crafted one is cut, not carried)
_NAME_LIMIT = 4096


def is_sqlite(path: Path) -> bool:
    try:
        with path.open("rb") as handle:
            return handle.read(len(SQLITE_MAGIC)) == SQLITE_MAGIC
    except OSError:
        return False


@dataclass(frozen=True)
class _Process:
    global_pid: int
    device: int
    rank: int | None


def load_nsys(path: Path | str, read: ReadOptions | None = None) -> list[RankEvents]:
    """One RankEvents per (process, GPU) of the export. Raises ``TraceError`` for a file that
    is no SQLite database or no Nsight Systems export."""
    path = Path(path)
    read = read or ReadOptions()
    try:
        check_plain_size(path, read)
    except OSError as exc:
        raise TraceError(path, f"cannot read: {exc.strerror or exc}") from None
    if not is_sqlite(path):
        raise TraceError(path, "not an SQLite database (an Nsight Systems export is one)")
    try:
        with _connect(path) as db:
            return _read(db, path, read)
    except sqlite3.DatabaseError as exc:
        raise TraceError(path, f"unreadable SQLite database ({exc})") from None


def _connect(path: Path) -> sqlite3.Connection:
    uri = f"file:{quote(str(path.resolve()))}?mode=ro&immutable=1"
    return sqlite3.connect(uri, uri=True)


def _read(db: sqlite3.Connection, path: Path, read: ReadOptions) -> list[RankEvents]:
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if "StringIds" not in tables and "StringTable" not in tables:
        raise NotATrace(path, "an SQLite database, but not an Nsight Systems export")
    strings = "StringIds" if "StringIds" in tables else "StringTable"
    warnings: list[str] = []
    version = _schema_version(db, tables)
    kernels = _kernels(db, tables, strings)
    if kernels.height == 0:
        raise TraceError(path, f"an Nsight Systems export (schema {version}) with no kernel")
    launcher = _launcher(db, tables)
    types = nvtx_types(db, tables)
    nccl_ids = nccl_domains(db, tables, strings, types)
    calls = nccl_calls(db, tables, strings, nccl_ids, types)
    comms = communicators(calls)
    nccl_ranks = dict(rank_of_process(comms, launcher.world_size).iter_rows())
    processes = _processes(kernels, launcher, nccl_ranks, warnings, path)
    base = _session_start(db, tables)
    host = _hostname(db, tables)
    gpu_names = _gpu_names(db, tables)
    runtime = _runtime(db, tables, strings)
    ranges = _nvtx(db, tables, strings, nccl_ids, types)
    ranges = _named_steps(ranges, read.step_range, warnings, path)
    copies = _copies(db, tables)
    kernel_meta = launch_meta(runtime, calls, comms, launcher.world_size)
    if calls.height and calls["bytes"].is_null().all():
        warnings.append(
            f"{path}: NCCL's NVTX ranges without their payload values (export with "
            "--include-json true): no message sizes or communicators, so no bandwidth"
        )
    out = []
    for proc in processes:
        events = _rank_columns(proc, kernels, copies, runtime, ranges, kernel_meta)
        meta = TraceMeta(
            rank=proc.rank,
            world_size=launcher.world_size,
            backend=None,
            nccl_version=None,
            pg_config=(),
            device_names={proc.device: gpu_names[proc.device]} if proc.device in gpu_names else {},
            base_time_ns=base,
            host_name=host,
            trace_id=None,
        )
        name = f"{path}#pid{proc.global_pid // _TID_SPAN % _TID_SPAN}.gpu{proc.device}"
        rank = rank_from_columns(name, meta, events, list(warnings), False, 0)
        out.append(replace(rank, launches=_launch_ops(rank.launches, rank.cpu)))
    return out


# ranges that name no op: the step, and the collective annotations around record_param_comms
_NOT_AN_OP = r"^(?:nccl:|gloo:|ProfilerStep#)"


def _launch_ops(launches: pl.DataFrame, cpu: pl.DataFrame) -> pl.DataFrame:
    """Each launch's ``op``: the innermost PyTorch range open on its thread when it was made
    (what Kineto's External id names; an export has no such link)."""
    ranges = cpu.filter(
        (pl.col("kind") == "annotation") & ~pl.col("name").str.contains(_NOT_AN_OP)
    ).select(
        "tid",
        pl.col("start_ns").alias("start"),
        pl.col("end_ns").alias("end"),
        pl.col("name").alias("value"),
    )
    keyed = launches.with_row_index("key")
    found = innermost_enclosing(
        keyed.select("key", "tid", pl.col("start_ns").alias("at")).drop_nulls(), ranges
    )
    return (
        keyed.join(found, on="key", how="left", maintain_order="left")
        .with_columns(pl.coalesce("op", "value").alias("op"))
        .drop("key", "value")
    )


def _schema_version(db: sqlite3.Connection, tables: set[str]) -> str:
    for table in ("META_DATA_EXPORT", "EXPORT_META_DATA"):
        if table in tables:
            row = db.execute(
                f"SELECT value FROM {table} WHERE name = 'EXPORT_SCHEMA_VERSION'"
            ).fetchone()
            if row is not None:
                return str(row[0])[:40]
    return "unknown"


def _frame(db: sqlite3.Connection, query: str, schema: dict[str, pl.DataType]) -> pl.DataFrame:
    """The query's rows in ``schema``'s columns. SQLite keeps any value in any column: a value
    of another type (text in a time, say) is null, and a row without both times is dropped."""
    frame = _json_frame(db, query, schema)
    if frame is None:
        frame = _row_frame(db, query, schema)
    times = [c for c in ("start_ns", "end_ns") if c in schema]
    return frame.drop_nulls(times) if times else frame


def _json_frame(
    db: sqlite3.Connection, query: str, schema: dict[str, pl.DataType]
) -> pl.DataFrame | None:
    """The query's columns as one JSON array each (``json_group_array``), parsed in C: a Python
    tuple per row was most of a read (16 of the 21 ms of the shared mfu export's NVTX ranges).
    None where a value is not of its column's type (polars refuses text or a real in an Int64
    column, a number in a String one; ``_row_frame`` says what it becomes) or SQLite cannot
    build the arrays (a blob, text that is not UTF-8, an array past SQLite's length limit, no
    JSON functions): the rows are read one by one then, as before."""
    names = [f"c{i}" for i in range(len(schema))]
    arrays = ", ".join(f"json_group_array({n})" for n in names)
    try:
        columns = db.execute(
            f"WITH q({', '.join(names)}) AS ({query}) SELECT {arrays} FROM q"
        ).fetchone()
        return pl.DataFrame(
            [
                pl.Series(name, orjson.loads(text), dtype=dtype)
                for (name, dtype), text in zip(schema.items(), columns, strict=True)
            ]
        )
    except (sqlite3.DatabaseError, orjson.JSONDecodeError, TypeError, pl.exceptions.PolarsError):
        return None


def _row_frame(db: sqlite3.Connection, query: str, schema: dict[str, pl.DataType]) -> pl.DataFrame:
    rows = db.execute(query).fetchall()
    try:
        return pl.DataFrame(rows, schema=schema, orient="row")
    except (pl.exceptions.PolarsError, TypeError, OverflowError):
        strings = [dtype == pl.String for dtype in schema.values()]
        return pl.DataFrame(
            [tuple(_typed(v, text) for v, text in zip(r, strings, strict=True)) for r in rows],
            schema=schema,
            orient="row",
        )


def _typed(value: object, text: bool) -> object:
    if text:
        return value if isinstance(value, str) else None
    return int64_or_none(value)


def _schema(ints: str, strings: str = "") -> dict[str, pl.DataType]:
    """A frame's columns: Int64 ones, then String ones (names separated by spaces)."""
    return {n: pl.Int64() for n in ints.split()} | {n: pl.String() for n in strings.split()}


def _columns(db: sqlite3.Connection, table: str) -> set[str]:
    return {r[1] for r in db.execute(f"PRAGMA table_info({table})")}


def _kernels(db: sqlite3.Connection, tables: set[str], strings: str) -> pl.DataFrame:
    schema = _schema("start_ns end_ns device stream correlation global_pid", "name")
    if "CUPTI_ACTIVITY_KIND_KERNEL" not in tables:
        return pl.DataFrame(schema=schema)
    cols = _columns(db, "CUPTI_ACTIVITY_KIND_KERNEL")
    name_col = "demangledName" if "demangledName" in cols else "shortName"
    pid = "globalPid" if "globalPid" in cols else "NULL"
    ids = _frame(
        db,
        f"SELECT start, end, deviceId, streamId, correlationId, {pid}, "
        f"{name_col} FROM CUPTI_ACTIVITY_KIND_KERNEL",
        {**schema, "name": pl.Int64()},
    )
    return _with_strings(
        db, ids, strings, f"SELECT DISTINCT {name_col} FROM CUPTI_ACTIVITY_KIND_KERNEL"
    )


def _with_strings(
    db: sqlite3.Connection,
    frame: pl.DataFrame,
    strings: str,
    used: str,
    cleaned: pl.Expr | None = None,
) -> pl.DataFrame:
    """``frame``'s ``name`` ids as their strings (``cleaned``: how each string is cleaned, once
    per distinct string): each distinct string fetched once (a name repeats over thousands of
    rows; fetching it per row was most of the read)."""
    names = _frame(
        db,
        f"SELECT id, substr(value, 1, {_NAME_LIMIT}) FROM {strings} WHERE id IN ({used})",
        {"name": pl.Int64(), "_text": pl.String()},
    ).unique("name", keep="first")
    if cleaned is not None:
        names = names.with_columns(cleaned.alias("_text"))
    return (
        frame.join(names, on="name", how="left", maintain_order="left")
        .with_columns(pl.col("_text").alias("name"))
        .drop("_text")
    )


def _copies(db: sqlite3.Connection, tables: set[str]) -> pl.DataFrame:
    # the SQL below selects kind and name first
    schema = {"kind": pl.String(), "name": pl.String()} | _schema(
        "start_ns end_ns device stream correlation global_pid"
    )
    parts = []
    for table, kind in (
        ("CUPTI_ACTIVITY_KIND_MEMCPY", "memcpy"),
        ("CUPTI_ACTIVITY_KIND_MEMSET", "memset"),
        ("CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "sync"),
    ):
        if table not in tables:
            continue
        cols = _columns(db, table)
        pid = "globalPid" if "globalPid" in cols else "NULL"
        parts.append(
            _frame(
                db,
                f"SELECT '{kind}', {_copy_name(kind, cols, tables)}, start, end, deviceId, "
                f"streamId, correlationId, {pid} FROM {table}",
                schema,
            )
        )
    return pl.concat(parts) if parts else pl.DataFrame(schema=schema)


# Kineto's names for CUPTI's synchronization records (ENUM_CUPTI_SYNC_TYPE ids)
_SYNC_NAMES = {1: "Event Sync", 2: "Stream Wait Event", 3: "Stream Sync", 4: "Context Sync"}


def _copy_name(kind: str, cols: set[str], tables: set[str]) -> str:
    """The SQL expression naming a copy, a set or a sync record as Kineto names it:
    ``Memcpy HtoD (Pinned -> Device)``, ``Memset (Device)``, ``Event Sync``."""
    if kind == "memset":
        return "'Memset (Device)'"
    if kind == "sync":
        cases = " ".join(f"WHEN {k} THEN '{v}'" for k, v in _SYNC_NAMES.items())
        return f"CASE syncType {cases} ELSE 'Sync' END" if "syncType" in cols else "'Sync'"
    if "copyKind" not in cols or "ENUM_CUDA_MEMCPY_OPER" not in tables:
        return "'Memcpy'"
    code = (
        "(SELECT replace(replace(e.name, 'CUDA_MEMCPY_KIND_', ''), 'TO', 'to') "
        "FROM ENUM_CUDA_MEMCPY_OPER e WHERE e.id = copyKind)"
    )
    if {"srcKind", "dstKind"} <= cols and "ENUM_CUDA_MEM_KIND" in tables:
        ends = (
            "' (' || coalesce((SELECT label FROM ENUM_CUDA_MEM_KIND m WHERE m.id = srcKind), "
            "'?') || ' -> ' || coalesce((SELECT label FROM ENUM_CUDA_MEM_KIND m "
            "WHERE m.id = dstKind), '?') || ')'"
        )
        return f"'Memcpy ' || coalesce({code}, 'copy') || {ends}"
    return f"'Memcpy ' || coalesce({code}, 'copy')"


def _runtime(db: sqlite3.Connection, tables: set[str], strings: str) -> pl.DataFrame:
    schema = _schema("start_ns end_ns global_tid correlation", "name")
    if "CUPTI_ACTIVITY_KIND_RUNTIME" not in tables:
        return pl.DataFrame(schema=schema)
    ids = _frame(
        db,
        "SELECT start, end, globalTid, correlationId, nameId FROM CUPTI_ACTIVITY_KIND_RUNTIME",
        {**schema, "name": pl.Int64()},
    )
    return _with_strings(
        db,
        ids,
        strings,
        "SELECT DISTINCT nameId FROM CUPTI_ACTIVITY_KIND_RUNTIME",
        pl.col("_text").str.replace(_RUNTIME_VERSION.pattern, ""),
    )


def _nvtx(
    db: sqlite3.Connection, tables: set[str], strings: str, nccl_ids: list[int], types: NvtxTypes
) -> pl.DataFrame:
    """NVTX push/pop and start/end ranges as annotations: PyTorch's without their ids, NCCL's
    domain's ``ncclX`` as ``nccl:X``."""
    schema = _schema("start_ns end_ns global_tid", "name")
    if "NVTX_EVENTS" not in tables:
        return pl.DataFrame(schema=schema)
    cols = _columns(db, "NVTX_EVENTS")
    text_id = "n.textId" if "textId" in cols else "NULL"
    domain_id = "n.domainId" if "domainId" in cols else "NULL"
    frame = _frame(
        db,
        f"SELECT n.start, n.end, n.globalTid, substr(coalesce(n.text, s.value), 1, "
        f"{_NAME_LIMIT}), {domain_id} FROM NVTX_EVENTS n LEFT JOIN {strings} s "
        f"ON s.id = {text_id} WHERE n.eventType IN ({types.ranges}) "
        "AND n.end IS NOT NULL AND n.end >= n.start",
        {**schema, "domain": pl.Int64()},
    )
    # one query, each regex run once per row (the suffix's was run three times), on the
    # in-memory engine as every lazy plan of the project (partition.py)
    call = pl.col("name").str.extract(_NCCL_RANGE.pattern)
    nccl = pl.col("domain").is_in(nccl_ids) & call.is_not_null()
    return (
        frame.lazy()
        .with_columns(pl.col("name").str.replace(_NVTX_SUFFIX.pattern, ""))
        .select(
            *(c for c in schema if c != "name"),
            pl.when(nccl).then(pl.lit("nccl:") + call).otherwise(pl.col("name")).alias("name"),
        )
        .filter(pl.col("name").is_not_null())
        .collect(engine="in-memory")
    )


# Step ranges when the PyTorch profiler did not run alongside (no ProfilerStep#N): a range
# named as training loops name their step, alone, with an optional number
DEFAULT_STEP_RANGE = (
    r"(?i)^(?:train(?:ing)?[ _-]?step|iteration|iter|step|global[ _-]?step)"
    r"(?:[ _#:=-]*\[?(\d+)\]?)?$"
)


def _named_steps(
    ranges: pl.DataFrame, step_range: str | None, warnings: list[str], path: Path
) -> pl.DataFrame:
    """The ranges that mark steps renamed ``ProfilerStep#N`` (what the engine reads steps
    from): the user's ``--step-range`` regex, else the default names; N is the regex's first
    group where every range has a distinct one, else the range's order in its process. Ranges
    inside another step range are not steps."""
    # each regex run once over the names (they ran twice each: 0.4 ms a run on 19,000 names)
    profiler_steps = ranges.get_column("name").str.contains(STEP_NAME.pattern)
    if step_range is None and profiler_steps.any():
        return ranges
    pattern = step_range or DEFAULT_STEP_RANGE
    matches = ranges.get_column("name").str.contains(pattern)
    # the user's ranges replace the profiler's steps (unless they are the profiler's)
    kept = ~profiler_steps | matches
    ranges = ranges.filter(kept)
    matches = matches.filter(kept)
    process = pl.col("global_tid") // _TID_SPAN
    hits = (
        ranges.with_row_index("_row")
        .filter(matches)
        .sort("start_ns")
        .with_columns(pl.col("end_ns").cum_max().shift(1).over(process).alias("_open_until"))
        .filter(pl.col("_open_until").is_null() | (pl.col("start_ns") >= pl.col("_open_until")))
    )
    if hits.height == 0:
        return ranges
    numbers = hits["name"].str.extract(pattern, 1).cast(pl.Int64, strict=False)
    distinct = (
        hits.with_columns(numbers.alias("_n"))
        .select(
            pl.col("_n").is_not_null().all()
            & (pl.col("_n").n_unique().over(process) == pl.len().over(process)).all()
        )
        .item()
    )
    step = numbers if distinct else hits.select(pl.int_range(pl.len()).over(process)).to_series()
    named = hits.select("_row", pl.format("ProfilerStep#{}", step).alias("_step"))
    warnings.append(
        f"{path}: steps from {hits.height} NVTX ranges that match "
        f"{'--step-range' if step_range else 'the default step names'} ({pattern})"
    )
    return (
        ranges.with_row_index("_row")
        .join(named, on="_row", how="left", maintain_order="left")
        .with_columns(pl.coalesce("_step", "name").alias("name"))
        .drop("_row", "_step")
    )


def _processes(
    kernels: pl.DataFrame,
    launcher: _Launcher,
    nccl_ranks: dict[int, int],
    warnings: list[str],
    path: Path,
) -> list[_Process]:
    """The (process, GPU) pairs that ran kernels, in GPU order, with their global ranks: the
    process's rank in the NCCL communicator that spans the world (``ncclCommInitRank``'s
    payload, ``nccl_ranks`` by process), else its own ``RANK`` (``META_DATA_CAPTURE``:
    ``PROCESS_k:PID`` and its environment), else
    the launcher's ``--node_rank`` × ``--nproc_per_node`` + the GPU's place in the file; else the
    GPU order within the file, said in a warning (one process: no rank, the run assigns it)."""
    pairs = (
        kernels.select("global_pid", "device")
        .unique()
        .sort("device", "global_pid", nulls_last=True)
        .rows()
    )
    out = []
    for local, (gpid, device) in enumerate(pairs):
        pid = (gpid or 0) // _TID_SPAN % _TID_SPAN
        rank = nccl_ranks.get((gpid or 0) // _TID_SPAN, launcher.rank_of_pid.get(pid))
        if rank is None and launcher.node_rank is not None and len(pairs) > 1:
            rank = launcher.node_rank * (launcher.per_node or len(pairs)) + local
        out.append(_Process(gpid or 0, device, rank))
    if len(pairs) > 1 and any(p.rank is None for p in out):
        warnings.append(
            f"{path}: {len(pairs)} processes / GPUs and no rank or node rank recorded for "
            "them: ranks by GPU order within the file"
        )
        out = [_Process(p.global_pid, p.device, i) for i, p in enumerate(out)]
    return out


@dataclass(frozen=True)
class _Launcher:
    node_rank: int | None
    per_node: int | None
    rank_of_pid: dict[int, int]
    world_size: int | None = None


_ARG = re.compile(r"^--(node[_-]rank|nproc[_-]per[_-]node|nnodes)=(\d+)")
_RANK_ENV = re.compile(r'^RANK="?(\d+)"?$')
_WORLD_ENV = re.compile(r'^WORLD_SIZE="?(\d+)"?$')
_PROCESS_KEY = re.compile(r"^(PROCESS_\d+):(PID|ENVIRONMENT_VARIABLE|ARGUMENT_\d+)$")


def _launcher(db: sqlite3.Connection, tables: set[str]) -> _Launcher:
    """What the capture recorded of the launched processes: the launcher's arguments, and each
    process's pid and ``RANK`` environment variable."""
    if "META_DATA_CAPTURE" not in tables:
        return _Launcher(None, None, {}, None)
    found: dict[str, int] = {}
    pids: dict[str, int] = {}
    ranks: dict[str, int] = {}
    world: int | None = None
    for name, value in db.execute("SELECT name, value FROM META_DATA_CAPTURE LIMIT 100000"):
        key = _PROCESS_KEY.match(str(name)[:100])
        if key is None:
            continue
        process, field = key.groups()
        text = str(value)[:_NAME_LIMIT]
        if field == "PID" and text.isdigit():
            pids[process] = int(text)
        elif field == "ENVIRONMENT_VARIABLE" and (m := _RANK_ENV.match(text)):
            ranks[process] = int(m.group(1))
        elif field == "ENVIRONMENT_VARIABLE" and (m := _WORLD_ENV.match(text)):
            world = int(m.group(1))
        elif field.startswith("ARGUMENT_") and (m := _ARG.match(text)):
            found.setdefault(m.group(1).replace("-", "_"), int(m.group(2)))
    node_rank = found.get("node_rank")
    if node_rank is None and found.get("nnodes") == 1:
        node_rank = 0
    by_pid = {pids[p]: r for p, r in ranks.items() if p in pids and pids[p] > 0}
    per_node = found.get("nproc_per_node")
    nodes = found.get("nnodes")
    if world is None and per_node is not None and nodes is not None:
        world = per_node * nodes
    return _Launcher(node_rank, per_node, by_pid, world)


def _session_start(db: sqlite3.Connection, tables: set[str]) -> int | None:
    if "TARGET_INFO_SESSION_START_TIME" not in tables:
        return None
    row = db.execute("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME").fetchone()
    return int(row[0]) if row and isinstance(row[0], int) else None


def _hostname(db: sqlite3.Connection, tables: set[str]) -> str | None:
    if "TARGET_INFO_SYSTEM_ENV" not in tables:
        return None
    row = db.execute(
        "SELECT value FROM TARGET_INFO_SYSTEM_ENV WHERE name = 'Hostname' LIMIT 1"
    ).fetchone()
    return str(row[0])[:_GPU_NAME_LIMIT] if row else None


def _gpu_names(db: sqlite3.Connection, tables: set[str]) -> dict[int, str]:
    """GPU names by the ``deviceId`` kernels carry (the CUDA ordinal): ``TARGET_INFO_GPU``'s
    ``cuDevice`` where present (its ``id`` can differ), else its ``id``."""
    if "TARGET_INFO_GPU" not in tables:
        return {}
    cols = _columns(db, "TARGET_INFO_GPU")
    key = "cuDevice" if "cuDevice" in cols else "id"
    return {
        int(k): str(name)[:_GPU_NAME_LIMIT]
        for k, name in db.execute(f"SELECT {key}, name FROM TARGET_INFO_GPU")
        if isinstance(k, int) and name is not None
    }


def _rank_columns(
    proc: _Process,
    kernels: pl.DataFrame,
    copies: pl.DataFrame,
    runtime: pl.DataFrame,
    ranges: pl.DataFrame,
    meta: pl.DataFrame,
) -> pl.DataFrame:
    """The rank's events in the columns the Kineto readers produce (``frames.columns``), the
    NCCL calls' metadata on the kernels they launched (as Kineto writes it on the kernel).
    One plan on the in-memory engine: its dozen eager steps took twice as long on a rank of
    the shared mfu export (2.3 -> 1.3 ms)."""
    mine = (pl.col("global_pid") == proc.global_pid) | pl.col("global_pid").is_null()
    on_gpu = mine & (pl.col("device") == proc.device)
    pid = proc.global_pid // _TID_SPAN % _TID_SPAN
    meta_columns = [c for c in meta.columns if c != "process"]
    own_meta = meta.lazy().filter(pl.col("process") == proc.global_pid // _TID_SPAN)
    device = pl.concat(
        [
            kernels.lazy()
            .filter(on_gpu)
            .with_columns(pl.lit("kernel").alias("kind"))
            .join(own_meta.drop("process"), on="correlation", how="left", maintain_order="left"),
            copies.lazy().filter(on_gpu),
        ],
        how="diagonal_relaxed",
    ).select(
        "kind",
        "name",
        pl.lit(pid, pl.Int64).alias("pid"),
        pl.col("stream").alias("tid"),
        "start_ns",
        "end_ns",
        "correlation",
        pl.col("device").alias("arg_device"),
        pl.col("stream").alias("arg_stream"),
        *(pl.col(c) for c in meta_columns if c != "correlation"),
    )
    of_process = (pl.col("global_tid") // _TID_SPAN) == (proc.global_pid // _TID_SPAN)

    def on_host(frame: pl.DataFrame, kind: str, *more: str) -> pl.LazyFrame:
        """The process's rows of a CPU-side table as events of ``kind``."""
        return (
            frame.lazy()
            .filter(of_process)
            .select(
                pl.lit(kind).alias("kind"),
                "name",
                pl.lit(pid, pl.Int64).alias("pid"),
                (pl.col("global_tid") % _TID_SPAN).alias("tid"),
                "start_ns",
                "end_ns",
                *more,
            )
        )

    launches = on_host(runtime, "launch", "correlation")
    annotations = on_host(ranges, "annotation")
    events = pl.concat([device, launches, annotations], how="diagonal_relaxed")
    return (
        events.sort("start_ns", maintain_order=True)
        .with_columns(
            pl.col("correlation").cast(pl.Int64),
            pl.lit(None, pl.Int64).alias("external_id"),
            pl.lit(None, pl.Int64).alias("graph_id"),
            pl.lit(None, pl.Int64).alias("graph_node"),
            *(
                (pl.col(name).cast(dtype) if name in meta_columns else pl.lit(None, dtype)).alias(
                    name
                )
                for name, dtype in META_SCHEMA.items()
            ),
            pl.lit(None, pl.String).alias("input_dims"),
            pl.lit(None, pl.String).alias("concrete_inputs"),
            pl.lit(None, pl.String).alias("input_types"),
        )
        .collect(engine="in-memory")
    )


def nsys_command(path: Path) -> str:
    """The export a report needs before tracecomm can read it."""
    out = path.with_suffix(".sqlite").name
    return f"nsys export --type sqlite --include-json true -o {out} {path.name}"


__all__: Sequence[str] = ("is_sqlite", "load_nsys", "nsys_command")
