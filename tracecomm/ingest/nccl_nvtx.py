"""NCCL's own NVTX ranges in an Nsight Systems export, with the values of their payloads, as the
collective metadata a Kineto trace carries on its kernels (docs/metrics.md §1b).

NCCL marks each API call with a range of its ``NCCL`` domain (``ncclAllReduce``, ``ncclSend``,
``ncclGroupEnd``, ``ncclCommInitRank`` …) and a payload: the communicator id, the message size,
the peer or root, the number of ranks and the caller's rank in the communicator. An export holds
the values when written with ``--include-json true`` (``jsonText`` / ``jsonTextId``: one JSON
object keyed by the entries' names) or ``--include-blobs true`` (``binaryData``: a 32-byte
header ``domain, schema, size, offset`` as little-endian u64, then the packed struct that
``NVTX_PAYLOAD_SCHEMA_ENTRIES`` lays out). NCCL's schema ids change between versions; the
entries' names do not, so fields are found by name.

A kernel's calls: the NCCL call open on the launching thread at the launch, or — when that is
``ncclGroupEnd`` — every call on the thread since the group's ``ncclGroupStart``.
"""

from __future__ import annotations

import sqlite3
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import orjson
import polars as pl

from tracecomm.ingest.frames import innermost_enclosing, int64_or_none

# NVTX_EVENTS eventType ids (ENUM_NSYS_EVENT_TYPE) of push/pop and start/end ranges and of a
# domain's creation, by their enum names; the ids of the exports seen when the enum is absent
_EVENT_NAMES = {"NvtxPushPopRange": 59, "NvtxStartEndRange": 60, "NvtxDomainCreate": 75}


@dataclass(frozen=True)
class NvtxTypes:
    ranges: str  # "59, 60": for an SQL IN (...)
    domain_create: int


def nvtx_types(db: sqlite3.Connection, tables: set[str]) -> NvtxTypes:
    """The export's own eventType ids for NVTX ranges (older releases numbered them apart)."""
    ids = dict(_EVENT_NAMES)
    if "ENUM_NSYS_EVENT_TYPE" in tables:
        marks = ", ".join(f"'{n}'" for n in _EVENT_NAMES)
        for ident, name in db.execute(
            f"SELECT id, name FROM ENUM_NSYS_EVENT_TYPE WHERE name IN ({marks})"
        ):
            if isinstance(ident, int) and name in ids:
                ids[name] = ident
    return NvtxTypes(
        f"{ids['NvtxPushPopRange']}, {ids['NvtxStartEndRange']}", ids["NvtxDomainCreate"]
    )


_CALL = r"^nccl([A-Z][A-Za-z]*)$"
# payload entries by their names, normalized (lower case, letters and digits only)
_FIELDS = {
    "ncclcommunicatorid": "comm",
    "messagesizebytes": "bytes",
    "peerrank": "peer",
    "root": "root",
    "noofranks": "nranks",
    "rank": "comm_rank",
}
_INT_FIELDS = ("bytes", "peer", "root", "nranks", "comm_rank")
CALL_SCHEMA: dict[str, pl.DataType] = {
    "global_tid": pl.Int64(),
    "start_ns": pl.Int64(),
    "end_ns": pl.Int64(),
    "call": pl.String(),  # the API call without "nccl": AllReduce, Send, GroupEnd, CommInitRank
    "comm": pl.String(),  # the communicator id, as 0x-prefixed hex (a u64: Int64 cannot hold it)
    **{name: pl.Int64() for name in _INT_FIELDS},
}
# NVTX payload entry types (nvToolsExtPayload.h) -> struct format, little-endian
_ENTRY_FORMATS = {
    1: "<b", 2: "<B", 3: "<h", 4: "<H", 5: "<i", 6: "<I", 7: "<q", 8: "<Q", 9: "<q", 10: "<Q",
    11: "<b", 12: "<B", 13: "<h", 14: "<H", 15: "<i", 16: "<I", 17: "<q", 18: "<Q", 22: "<Q",
    23: "<Q",
}  # fmt: skip
_BLOB_HEADER = struct.Struct("<QQQQ")
# bounds on what one payload may cost: its text, its nesting, the entries looked at
_PAYLOAD_LIMIT = 65_536
_DEPTH_LIMIT = 4
_ENTRY_LIMIT = 256
_U64 = (1 << 64) - 1


@dataclass(frozen=True)
class _Entry:
    field: str
    offset: int
    fmt: str


def nccl_calls(
    db: sqlite3.Connection, tables: set[str], strings: str, domains: list[int], types: NvtxTypes
) -> pl.DataFrame:
    """Every range of NCCL's domains (``nccl_domains``) with its payload's fields (null where
    the export has no values)."""
    if "NVTX_EVENTS" not in tables:
        return pl.DataFrame(schema=CALL_SCHEMA)
    cols = {r[1] for r in db.execute("PRAGMA table_info(NVTX_EVENTS)")}
    if not {"domainId", "start", "end", "eventType", "globalTid"} <= cols:
        return pl.DataFrame(schema=CALL_SCHEMA)
    text_id = "n.textId" if "textId" in cols else "NULL"
    if not domains:
        return pl.DataFrame(schema=CALL_SCHEMA)
    json_text = f"substr(n.jsonText, 1, {_PAYLOAD_LIMIT})" if "jsonText" in cols else "NULL"
    json_id = "n.jsonTextId" if "jsonTextId" in cols else "NULL"
    blob = f"substr(n.binaryData, 1, {_PAYLOAD_LIMIT})" if "binaryData" in cols else "NULL"
    rows = db.execute(
        f"SELECT n.globalTid, n.start, n.end, substr(coalesce(n.text, s.value), 1, 100), "
        f"{json_text}, {json_id}, {blob} FROM NVTX_EVENTS n LEFT JOIN {strings} s "
        f"ON s.id = {text_id} WHERE n.eventType IN ({types.ranges}) AND n.end IS NOT NULL "
        f"AND n.end >= n.start AND n.domainId IN ({', '.join(map(str, domains))})"
    ).fetchall()
    # a registered payload string (jsonTextId) is fetched, and decoded, once however many
    # rows name it
    ids = sorted({r[5] for r in rows if isinstance(r[5], int) and r[4] is None})
    shared = dict(
        db.execute(
            f"SELECT id, substr(value, 1, {_PAYLOAD_LIMIT}) FROM {strings} WHERE id IN "
            f"({', '.join(map(str, ids))})"
        ).fetchall()
        if ids
        else []
    )
    with_blobs = any(r[6] is not None for r in rows)
    schemas = _blob_schemas(db, tables) if with_blobs else _Schemas({}, {})
    return pl.DataFrame(
        list(_decoded(rows, shared, schemas)), schema=CALL_SCHEMA, orient="row"
    ).filter(pl.col("call").is_not_null())


def nccl_domains(
    db: sqlite3.Connection, tables: set[str], strings: str, types: NvtxTypes
) -> list[int]:
    """The ids of NCCL's NVTX domain: the one created as "NCCL", else — an export cut to a
    window loses the creation — a domain other than the default whose every range is an
    ``nccl*`` call."""
    if "NVTX_EVENTS" not in tables:
        return []
    cols = {r[1] for r in db.execute("PRAGMA table_info(NVTX_EVENTS)")}
    if "domainId" not in cols:
        return []
    text_id = "n.textId" if "textId" in cols else "NULL"
    named = "upper(coalesce(n.text, s.value)) = 'NCCL'"
    found = [
        d
        for (d,) in db.execute(
            f"SELECT DISTINCT n.domainId FROM NVTX_EVENTS n LEFT JOIN {strings} s ON s.id = "
            f"{text_id} WHERE n.eventType = {types.domain_create} AND {named}"
        )
        if isinstance(d, int)
    ]
    if found:
        return found
    return [
        d
        for (d,) in db.execute(
            f"SELECT n.domainId FROM NVTX_EVENTS n LEFT JOIN {strings} s ON s.id = {text_id} "
            f"WHERE n.eventType IN ({types.ranges}) AND n.domainId > 0 GROUP BY n.domainId "
            "HAVING sum(coalesce(n.text, s.value) GLOB 'nccl[A-Z]*') = count(*)"
        )
        if isinstance(d, int)
    ]


def _decoded(
    rows: Iterable[tuple[object, ...]], shared: dict[int, str], schemas: _Schemas
) -> Iterator[tuple[object, ...]]:
    parsed: dict[int, dict[str, int]] = {}
    for tid, start, end, name, json_text, json_id, blob in rows:
        call = name[4:] if isinstance(name, str) and name.startswith("nccl") else None
        if (
            not call
            or not call[:1].isupper()
            or any(int64_or_none(v) is None for v in (tid, start, end))
        ):
            continue  # a crafted row: a time or thread that is no integer
        if isinstance(json_text, str):
            fields = _json_fields(json_text)
        elif isinstance(json_id, int) and json_id in shared:
            if json_id not in parsed:
                parsed[json_id] = _json_fields(shared[json_id])
            fields = parsed[json_id]
        else:
            fields = {}
        if not fields and blob is not None:
            fields = _blob_fields(blob, schemas)
        comm = fields.get("comm")
        yield (
            tid,
            start,
            end,
            call,
            f"{comm & _U64:#018x}" if isinstance(comm, int) else None,
            *(int64_or_none(fields.get(f)) for f in _INT_FIELDS),
        )


def _json_fields(text: str) -> dict[str, int]:
    """The payload's fields from its JSON (``{"Message size [bytes]": 4096, …}``); nested
    objects and ``[{"name": …, "value": …}]`` lists are looked into, within bounds."""
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return {}
    out: dict[str, int] = {}
    _collect(value, out, 0)
    return out


def _collect(value: object, out: dict[str, int], depth: int) -> None:
    if depth > _DEPTH_LIMIT:
        return
    if isinstance(value, dict):
        if isinstance(value.get("name"), str) and "value" in value:
            _put(out, value["name"], value["value"])
        for key, item in list(value.items())[:_ENTRY_LIMIT]:
            if isinstance(item, dict | list):
                _collect(item, out, depth + 1)
            elif isinstance(key, str):
                _put(out, key, item)
    elif isinstance(value, list):
        for item in value[:_ENTRY_LIMIT]:
            _collect(item, out, depth + 1)


def _field_of(name: str) -> str | None:
    """Our field for a payload entry's name, compared in lower case, letters and digits only."""
    return _FIELDS.get("".join(c for c in name[:100].lower() if c.isalnum()))


def _put(out: dict[str, int], name: str, value: object) -> None:
    field = _field_of(name)
    number = _as_int(value)
    if field is not None and number is not None:
        out.setdefault(field, number)


def _as_int(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if -(1 << 63) <= value <= _U64 else None
    if isinstance(value, str) and 0 < len(value) <= 24:
        try:
            number = int(value.strip(), 0)
        except ValueError:
            return None
        return number if -(1 << 63) <= number <= _U64 else None
    return None


@dataclass(frozen=True)
class _Schemas:
    """The named entries NCCL's payloads are read by, by (domain, schema), and by schema id
    alone where one domain has it (some exports number domains apart from the header's)."""

    by_key: dict[tuple[int, int], list[_Entry]]
    by_schema: dict[int, list[_Entry]]


def _blob_schemas(db: sqlite3.Connection, tables: set[str]) -> _Schemas:
    entries = _schema_entries(db, tables)
    counts: dict[int, int] = {}
    for _, schema in entries:
        counts[schema] = counts.get(schema, 0) + 1
    unique = {schema: e for (_, schema), e in entries.items() if counts[schema] == 1}
    return _Schemas(entries, unique)


def _schema_entries(
    db: sqlite3.Connection, tables: set[str]
) -> dict[tuple[int, int], list[_Entry]]:
    if "NVTX_PAYLOAD_SCHEMA_ENTRIES" not in tables:
        return {}
    out: dict[tuple[int, int], list[_Entry]] = {}
    seen: set[tuple[int, int, str]] = set()
    for domain, schema, name, kind, offset in db.execute(
        "SELECT domainId, schemaId, name, type, offset FROM NVTX_PAYLOAD_SCHEMA_ENTRIES "
        "ORDER BY domainId, schemaId, idx LIMIT 100000"
    ):
        if not isinstance(name, str) or not isinstance(domain, int) or not isinstance(schema, int):
            continue
        field = _field_of(name)
        fmt = _ENTRY_FORMATS.get(kind) if isinstance(kind, int) else None
        if field is None or fmt is None or (domain, schema, field) in seen:
            continue
        seen.add((domain, schema, field))
        at = offset if isinstance(offset, int) and 0 <= offset < _PAYLOAD_LIMIT else 0
        out.setdefault((domain, schema), []).append(_Entry(field, at, fmt))
    return out


def _blob_fields(blob: object, schemas: _Schemas) -> dict[str, int]:
    """The fields of one ``binaryData`` payload (bytes, or their hex text)."""
    if isinstance(blob, str):
        try:
            raw = bytes.fromhex(blob)
        except ValueError:
            return {}
    elif isinstance(blob, bytes):
        raw = blob
    else:
        return {}
    if len(raw) < _BLOB_HEADER.size:
        return {}
    domain, schema, size, offset = _BLOB_HEADER.unpack_from(raw)
    entries = schemas.by_key.get((domain, schema)) or schemas.by_schema.get(schema)
    if entries is None or offset < _BLOB_HEADER.size or offset > len(raw):
        return {}
    payload = raw[offset : offset + min(size, _PAYLOAD_LIMIT)]
    out: dict[str, int] = {}
    for entry in entries:
        width = struct.calcsize(entry.fmt)
        if entry.offset + width <= len(payload):
            out[entry.field] = struct.unpack_from(entry.fmt, payload, entry.offset)[0]
    return out


# ---- calls -> kernels ---------------------------------------------------------------------

# Kineto's "Collective name" of each NCCL call made alone
_COLLECTIVE_NAMES = {
    "AllReduce": "allreduce",
    "AllGather": "allgather",
    "ReduceScatter": "reduce_scatter",
    "Broadcast": "broadcast",
    "Reduce": "reduce",
    "AllToAll": "all_to_all",
    "AlltoAll": "all_to_all",  # NCCL 2.28's ncclAlltoAll
    "Gather": "gather",
    "Scatter": "scatter",
    "Send": "send",
    "Recv": "recv",
}
_GROUP_CALLS = ("GroupStart", "GroupEnd")
LAUNCH_META_SCHEMA: dict[str, pl.DataType] = {
    "process": pl.Int64(),  # globalTid // 0x1000000: the process's serialized id
    "correlation": pl.Int64(),
    "collective_name": pl.String(),
    "in_msg_nelems": pl.Int64(),
    "out_msg_nelems": pl.Int64(),
    "group_size": pl.Int64(),
    "dtype": pl.String(),
    "pg_name": pl.String(),
    "src_rank": pl.Int64(),
    "dst_rank": pl.Int64(),
}
_TID_SPAN = 0x1000000


@dataclass(frozen=True)
class Communicators:
    """What the ``ncclCommInitRank*`` payloads say: each communicator's size, and per process
    the rank it holds in its largest one (the world, when that is traced)."""

    sizes: pl.DataFrame  # comm, nranks
    largest: pl.DataFrame  # process, comm, nranks, comm_rank


def communicators(calls: pl.DataFrame) -> Communicators:
    # ncclCommSplit's payload names the new communicator with its parent's size and rank
    # (NCCL's init.cc): only the inits say a communicator's own
    inits = (
        calls.lazy()
        .filter(pl.col("call").str.starts_with("CommInitRank"))
        .filter(pl.col("comm").is_not_null() & (pl.col("nranks") > 0))
    )
    sizes, largest = pl.collect_all(  # in memory, as every lazy plan of the project
        [
            inits.group_by("comm").agg(pl.col("nranks").max()).sort("comm"),
            inits.filter(pl.col("comm_rank").is_between(0, pl.col("nranks") - 1))
            .with_columns((pl.col("global_tid") // _TID_SPAN).alias("process"))
            .sort("nranks", "start_ns", descending=[True, False])
            .unique("process", keep="first")
            .select("process", "comm", "nranks", "comm_rank"),
        ],
        engine="in-memory",
    )
    return Communicators(sizes, largest)


def launch_meta(
    runtime: pl.DataFrame, calls: pl.DataFrame, comms: Communicators, world_size: int | None
) -> pl.DataFrame:
    """Each launch made inside an NCCL call: the collective metadata of its calls, by (process,
    correlation). Sizes are in bytes (``dtype`` ``Byte``), In / Out as c10d counts them: an
    AllGather's output and a ReduceScatter's input are the message times the communicator's
    size (an all-to-all's, gather's or scatter's message is per peer); a group of sends and
    recvs is their sums; a peer is a global rank only in the communicator that spans the world
    (its ranks are the global ranks). A call or group that launched several kernels gives its
    sizes to the first, so that no byte counts twice.

    Plans, collected three times (and in ``innermost_enclosing``) on the in-memory engine:
    each of the fifty eager steps they replace was a query on frames of a few hundred rows
    (8 -> 5 ms on the shared mfu export)."""
    every = calls.with_row_index("call_row")
    ops = every.filter(pl.col("call").is_in(_GROUP_CALLS).not_())
    if ops.height == 0 or runtime.height == 0:
        return pl.DataFrame(schema=LAUNCH_META_SCHEMA)
    launches = (
        runtime.lazy()
        .filter(pl.col("name").str.contains("(?i)launch"))
        .with_row_index("key")
        .collect(engine="in-memory")
    )
    # each launch's owner: the NCCL call open at the launch (an op, or a group's end)
    owned = innermost_enclosing(
        launches.select("key", pl.col("global_tid").alias("tid"), pl.col("start_ns").alias("at")),
        every.select(
            pl.col("global_tid").alias("tid"),
            pl.col("start_ns").alias("start"),
            pl.col("end_ns").alias("end"),
            pl.col("call_row").alias("value"),
        ),
    ).rename({"value": "owner"})
    members = (
        pl.concat(
            [
                ops.lazy().select(pl.col("call_row").alias("owner"), "call_row"),
                _group_members(every, ops),
            ]
        )
        .join(owned.lazy().select("owner").unique(), on="owner")
        .collect(engine="in-memory")
    )
    if members.height == 0:
        return pl.DataFrame(schema=LAUNCH_META_SCHEMA)
    first = (pl.col("start_ns") == pl.col("start_ns").min().over("owner")) & (
        pl.col("key") == pl.col("key").min().over("owner", "start_ns")
    )
    by_launch = (
        owned.lazy()
        .join(
            launches.lazy().select(
                "key",
                "start_ns",
                "correlation",
                (pl.col("global_tid") // _TID_SPAN).alias("process"),
            ),
            on="key",
        )
        .with_columns(first.alias("_sized"))
    )
    per_owner = _per_owner(
        members.lazy().join(ops.lazy().drop("global_tid", "start_ns", "end_ns"), on="call_row"),
        comms,
    )
    return _meta(per_owner.join(by_launch, on="owner"), comms, world_size)


def _group_members(calls: pl.DataFrame, ops: pl.DataFrame) -> pl.LazyFrame:
    """(owner, call_row): each outermost ``ncclGroupEnd`` and the calls on its thread since its
    group's first ``ncclGroupStart``. Nested groups count as their outermost; a group end
    whose start the export lost (cut to a window) owns nothing. Each call is keyed by the
    group start before it (one as-of join), so a group finds its calls by equality."""
    marks = (
        calls.lazy()
        .filter(pl.col("call").is_in(_GROUP_CALLS))
        .select("call_row", "global_tid", "start_ns", "call")
        .sort("global_tid", "start_ns")
        .with_columns(
            pl.col("call").shift(1).over("global_tid").alias("_before"),
            pl.col("call").shift(-1).over("global_tid").alias("_after"),
        )
    )
    opens = (
        marks.filter(
            (pl.col("call") == "GroupStart") & (pl.col("_before") != "GroupStart").fill_null(True)
        )
        .select("global_tid", pl.col("start_ns").alias("group_start"))
        .sort("group_start")
    )
    closes = (
        marks.filter(
            (pl.col("call") == "GroupEnd") & (pl.col("_after") != "GroupEnd").fill_null(True)
        )
        .with_columns(pl.col("start_ns").shift(1).over("global_tid").alias("_last_close"))
        .select(pl.col("call_row").alias("owner"), "global_tid", "start_ns", "_last_close")
    )

    def opened(frame: pl.LazyFrame) -> pl.LazyFrame:
        return frame.sort("start_ns").join_asof(
            opens,
            left_on="start_ns",
            right_on="group_start",
            by="global_tid",
            strategy="backward",
            check_sortedness=False,
        )

    groups = opened(closes).filter(
        pl.col("group_start").is_not_null()
        & (pl.col("_last_close").is_null() | (pl.col("group_start") > pl.col("_last_close")))
    )
    inside = opened(ops.lazy().select("call_row", "global_tid", "start_ns", "end_ns")).select(
        "call_row", "global_tid", "group_start", pl.col("end_ns").alias("op_end")
    )
    return (
        groups.join(inside, on=["global_tid", "group_start"])
        .filter(pl.col("op_end") <= pl.col("start_ns"))
        .select("owner", "call_row")
    )


# calls whose payload gives the bytes per peer: In / Out are the message times the members
_PER_PEER = ("AlltoAll", "AllToAll")


def _per_owner(members: pl.LazyFrame, comms: Communicators) -> pl.LazyFrame:
    """One row of sizes, names and peers per owner (a call, or a group's end)."""
    sized = members.join(comms.sizes.lazy(), on="comm", how="left", suffix="_init").with_columns(
        pl.coalesce("nranks_init", "nranks").alias("nranks")
    )
    call = pl.col("call")
    send, recv = call == "Send", call == "Recv"
    message, n = pl.col("bytes"), pl.col("nranks")

    def side(whole_group: list[str], none_of: pl.Expr) -> pl.Expr:
        """One side's bytes: the message, × the members for calls whose side is all of them,
        0 for calls that move nothing that way."""
        return (
            pl.when(call.is_in(whole_group))
            .then(message * n)
            .when(none_of)
            .then(0)
            .otherwise(message)
        )

    in_bytes = side(["ReduceScatter", "Scatter", *_PER_PEER], recv)
    out_bytes = side(["AllGather", "Gather", *_PER_PEER], send)
    whole = lambda c: pl.when(c.is_null().any()).then(None).otherwise(c.sum())  # noqa: E731
    per_owner = (
        sized.with_columns(in_bytes.alias("_in"), out_bytes.alias("_out"))
        .group_by("owner")
        .agg(
            pl.col("call").unique().alias("_calls"),
            pl.col("comm").drop_nulls().unique().alias("_comms"),
            pl.col("nranks").drop_nulls().max().alias("group_size"),
            whole(pl.col("_in")).alias("in_msg_nelems"),
            whole(pl.col("_out")).alias("out_msg_nelems"),
            pl.col("peer").filter(send).drop_nulls().unique().alias("_dst"),
            pl.col("peer").filter(recv).drop_nulls().unique().alias("_src"),
        )
    )
    single = pl.col("_calls").list.len() == 1
    name = pl.when(single).then(
        pl.col("_calls").list.first().replace_strict(_COLLECTIVE_NAMES, default=None)
    )
    comm = pl.when(pl.col("_comms").list.len() == 1).then(pl.col("_comms").list.first())
    return per_owner.with_columns(name.alias("collective_name"), comm.alias("_comm"))


def _meta(joined: pl.LazyFrame, comms: Communicators, world_size: int | None) -> pl.DataFrame:
    world = (
        comms.largest.lazy()
        .filter(pl.col("nranks") == (world_size or -1))
        .select("process", pl.col("comm").alias("_world"))
    )
    in_world = pl.col("_comm") == pl.col("_world")
    me = pl.col("_me")
    name = pl.col("collective_name")

    def peer(side: str) -> pl.Expr:
        return pl.when(in_world & (pl.col(side).list.len() == 1)).then(pl.col(side).list.first())

    return (
        joined.join(world, on="process", how="left")
        .join(
            rank_of_process(comms, world_size).lazy().rename({"rank": "_me"}),
            on="process",
            how="left",
        )
        .with_columns(
            pl.when(name == "send")
            .then(me)
            .when(name == "recv")
            .then(peer("_src"))
            .alias("src_rank"),
            pl.when(name == "recv")
            .then(me)
            .when(name == "send")
            .then(peer("_dst"))
            .alias("dst_rank"),
            pl.lit("Byte").alias("dtype"),
            # a send or recv alone: c10d records its message as both In and Out; a launch
            # after the first of its call's has no size of its own
            *(
                pl.when(~pl.col("_sized"))
                .then(None)
                .when(name.is_in(["send", "recv"]))
                .then(pl.max_horizontal("in_msg_nelems", "out_msg_nelems"))
                .otherwise(c)
                .alias(c)
                for c in ("in_msg_nelems", "out_msg_nelems")
            ),
            pl.format("comm {}", pl.col("_comm")).alias("pg_name"),
        )
        .with_columns(
            pl.when(pl.col("src_rank").is_null() | pl.col("dst_rank").is_null())
            .then(None)
            .otherwise(pl.col(c))
            .alias(c)
            for c in ("src_rank", "dst_rank")
        )
        .unique(["process", "correlation"], keep="first", maintain_order=True)
        .select(list(LAUNCH_META_SCHEMA))
        .cast(LAUNCH_META_SCHEMA)  # type: ignore[arg-type]
        .collect(engine="in-memory")
    )


def rank_of_process(comms: Communicators, world_size: int | None) -> pl.DataFrame:
    """process -> global rank: the process's rank in a communicator of ``world_size`` ranks.
    None without a world size: the largest communicator a file holds may be a subgroup's."""
    if not world_size:
        return pl.DataFrame(schema={"process": pl.Int64, "rank": pl.Int64})
    return comms.largest.filter(pl.col("nranks") == world_size).select(
        "process", pl.col("comm_rank").alias("rank")
    )
