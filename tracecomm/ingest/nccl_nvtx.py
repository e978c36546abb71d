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

from tracecomm.ingest.frames import innermost_enclosing

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
    json_id = (
        f"(SELECT substr(j.value, 1, {_PAYLOAD_LIMIT}) FROM {strings} j WHERE j.id = n.jsonTextId)"
        if "jsonTextId" in cols
        else "NULL"
    )
    blob = f"substr(n.binaryData, 1, {_PAYLOAD_LIMIT})" if "binaryData" in cols else "NULL"
    rows = db.execute(
        f"SELECT n.globalTid, n.start, n.end, substr(coalesce(n.text, s.value), 1, 100), "
        f"coalesce({json_text}, {json_id}), {blob} FROM NVTX_EVENTS n LEFT JOIN {strings} s "
        f"ON s.id = {text_id} WHERE n.eventType IN ({types.ranges}) AND n.end IS NOT NULL "
        f"AND n.end >= n.start AND n.domainId IN ({', '.join(map(str, domains))})"
    ).fetchall()
    schemas = _blob_schemas(db, tables) if any(r[5] is not None for r in rows) else {}
    return pl.DataFrame(list(_decoded(rows, schemas)), schema=CALL_SCHEMA, orient="row").filter(
        pl.col("call").is_not_null()
    )


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


def _decoded(rows: Iterable[tuple[object, ...]], schemas: dict) -> Iterator[tuple[object, ...]]:
    for tid, start, end, name, json_text, blob in rows:
        call = name[4:] if isinstance(name, str) and name.startswith("nccl") else None
        if not isinstance(tid, int) or not call or not call[:1].isupper():
            continue
        fields = _json_fields(json_text) if isinstance(json_text, str) else {}
        if not fields and blob is not None:
            fields = _blob_fields(blob, schemas)
        comm = fields.get("comm")
        yield (
            tid,
            start,
            end,
            call,
            f"{comm & _U64:#018x}" if isinstance(comm, int) else None,
            *(fields.get(f) for f in _INT_FIELDS),
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


def _put(out: dict[str, int], name: str, value: object) -> None:
    field = _FIELDS.get("".join(c for c in name[:100].lower() if c.isalnum()))
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


def _blob_schemas(db: sqlite3.Connection, tables: set[str]) -> dict[tuple[int, int], list[_Entry]]:
    """(domain, schema) -> the named entries NCCL's payloads are read by."""
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
        field = _FIELDS.get("".join(c for c in name[:100].lower() if c.isalnum()))
        fmt = _ENTRY_FORMATS.get(kind) if isinstance(kind, int) else None
        if field is None or fmt is None or (domain, schema, field) in seen:
            continue
        seen.add((domain, schema, field))
        at = offset if isinstance(offset, int) and 0 <= offset < _PAYLOAD_LIMIT else 0
        out.setdefault((domain, schema), []).append(_Entry(field, at, fmt))
    return out


def _blob_fields(blob: object, schemas: dict[tuple[int, int], list[_Entry]]) -> dict[str, int]:
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
    entries = schemas.get((domain, schema))
    if entries is None:  # some exports number domains apart from the header's: the schema id
        found = [e for (_, s), e in schemas.items() if s == schema]
        entries = found[0] if len(found) == 1 else None
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
    """What the ``ncclCommInitRank`` / ``ncclCommSplit`` payloads say: each communicator's size,
    and per process the rank it holds in its largest one (the world, when that is traced)."""

    sizes: pl.DataFrame  # comm, nranks
    largest: pl.DataFrame  # process, comm, nranks, comm_rank


def communicators(calls: pl.DataFrame) -> Communicators:
    inits = calls.filter(
        pl.col("call").str.starts_with("CommInit") | (pl.col("call") == "CommSplit")
    ).filter(pl.col("comm").is_not_null() & (pl.col("nranks") > 0))
    sizes = inits.group_by("comm").agg(pl.col("nranks").max()).sort("comm")
    largest = (
        inits.filter(pl.col("comm_rank").is_between(0, pl.col("nranks") - 1))
        .with_columns((pl.col("global_tid") // _TID_SPAN).alias("process"))
        .sort("nranks", "start_ns", descending=[True, False])
        .unique("process", keep="first")
        .select("process", "comm", "nranks", "comm_rank")
    )
    return Communicators(sizes, largest)


def launch_meta(
    runtime: pl.DataFrame, calls: pl.DataFrame, comms: Communicators, world_size: int | None
) -> pl.DataFrame:
    """Each launch made inside an NCCL call: the collective metadata of its calls, by (process,
    correlation). Sizes are in bytes (``dtype`` ``Byte``), In / Out as c10d counts them: an
    AllGather's output and a ReduceScatter's input are the message times the communicator's
    size; a group of sends and recvs is their sums; a peer is a global rank only in the
    communicator that spans the world (its ranks are the global ranks)."""
    every = calls.with_row_index("call_row")
    ops = every.filter(pl.col("call").is_in(_GROUP_CALLS).not_())
    if ops.height == 0 or runtime.height == 0:
        return pl.DataFrame(schema=LAUNCH_META_SCHEMA)
    launches = runtime.filter(pl.col("name").str.contains("(?i)launch")).with_row_index("key")
    enclosing = innermost_enclosing(
        launches.select("key", pl.col("global_tid").alias("tid"), pl.col("start_ns").alias("at")),
        every.select(
            pl.col("global_tid").alias("tid"),
            pl.col("start_ns").alias("start"),
            pl.col("end_ns").alias("end"),
            pl.col("call_row").alias("value"),
        ),
    ).join(
        every.select(pl.col("call_row").alias("value"), "call", "global_tid", "start_ns"),
        on="value",
    )
    alone = enclosing.filter(pl.col("call").is_in(_GROUP_CALLS).not_())
    grouped = _group_members(enclosing.filter(pl.col("call") == "GroupEnd"), every, ops)
    members = pl.concat(
        [alone.select("key", pl.col("value").alias("call_row")), grouped.select("key", "call_row")]
    ).join(ops.drop("global_tid", "start_ns", "end_ns"), on="call_row")
    if members.height == 0:
        return pl.DataFrame(schema=LAUNCH_META_SCHEMA)
    return _meta(members, launches, comms, world_size)


def _group_members(
    group_ends: pl.DataFrame, calls: pl.DataFrame, ops: pl.DataFrame
) -> pl.DataFrame:
    """For launches inside ``ncclGroupEnd``: the calls on the thread since the latest
    ``ncclGroupStart`` before the group's end. Each call is keyed by the group start before it
    (one as-of join), so a group finds its calls by equality, not by a search per launch."""
    if group_ends.height == 0:
        return pl.DataFrame(schema={"key": pl.UInt32(), "call_row": pl.UInt32()})
    starts = (
        calls.filter(pl.col("call") == "GroupStart")
        .select("global_tid", pl.col("start_ns").alias("group_start"))
        .sort("group_start")
    )

    def opened(frame: pl.DataFrame) -> pl.DataFrame:
        return frame.sort("start_ns").join_asof(
            starts,
            left_on="start_ns",
            right_on="group_start",
            by="global_tid",
            strategy="backward",
            check_sortedness=False,
        )

    members = opened(ops.select("call_row", "global_tid", "start_ns", "end_ns")).select(
        "call_row", "global_tid", "group_start", pl.col("end_ns").alias("op_end")
    )
    return (
        opened(group_ends)
        .drop_nulls("group_start")
        .join(members, on=["global_tid", "group_start"])
        .filter(pl.col("op_end") <= pl.col("start_ns"))
        .select("key", "call_row")
    )


def _meta(
    members: pl.DataFrame,
    launches: pl.DataFrame,
    comms: Communicators,
    world_size: int | None,
) -> pl.DataFrame:
    sized = members.join(comms.sizes, on="comm", how="left", suffix="_init").with_columns(
        pl.coalesce("nranks_init", "nranks").alias("nranks")
    )
    send, recv = pl.col("call") == "Send", pl.col("call") == "Recv"
    message = pl.col("bytes")
    n = pl.col("nranks")
    in_bytes = (
        pl.when(pl.col("call") == "ReduceScatter")
        .then(message * n)
        .when(recv)
        .then(0)
        .otherwise(message)
    )
    out_bytes = (
        pl.when(pl.col("call") == "AllGather")
        .then(message * n)
        .when(send)
        .then(0)
        .otherwise(message)
    )
    per_launch = (
        sized.with_columns(in_bytes.alias("_in"), out_bytes.alias("_out"))
        .group_by("key")
        .agg(
            pl.col("call").unique().alias("_calls"),
            pl.col("comm").drop_nulls().unique().alias("_comms"),
            pl.col("nranks").drop_nulls().max().alias("group_size"),
            pl.when(pl.col("_in").is_null().any())
            .then(None)
            .otherwise(pl.col("_in").sum())
            .alias("in_msg_nelems"),
            pl.when(pl.col("_out").is_null().any())
            .then(None)
            .otherwise(pl.col("_out").sum())
            .alias("out_msg_nelems"),
            pl.col("peer").filter(send).drop_nulls().unique().alias("_dst"),
            pl.col("peer").filter(recv).drop_nulls().unique().alias("_src"),
        )
    )
    single = pl.col("_calls").list.len() == 1
    name = pl.when(single).then(
        pl.col("_calls").list.first().replace_strict(_COLLECTIVE_NAMES, default=None)
    )
    comm = pl.when(pl.col("_comms").list.len() == 1).then(pl.col("_comms").list.first())
    joined = per_launch.join(
        launches.select("key", (pl.col("global_tid") // _TID_SPAN).alias("process"), "correlation"),
        on="key",
    ).with_columns(name.alias("collective_name"), comm.alias("_comm"))
    world = comms.largest.filter(
        pl.col("nranks") == world_size if world_size else pl.lit(True)
    ).select("process", pl.col("comm").alias("_world"))
    in_world = pl.col("_comm") == pl.col("_world")
    me = pl.col("_me")
    return (
        joined.join(world, on="process", how="left")
        .join(rank_of_process(comms, world_size).rename({"rank": "_me"}), on="process", how="left")
        .with_columns(
            pl.when(pl.col("collective_name") == "send")
            .then(
                pl.when(in_world & (pl.col("_dst").list.len() == 1)).then(
                    pl.col("_dst").list.first()
                )
            )
            .alias("dst_rank"),
            pl.when(pl.col("collective_name") == "recv")
            .then(
                pl.when(in_world & (pl.col("_src").list.len() == 1)).then(
                    pl.col("_src").list.first()
                )
            )
            .alias("src_rank"),
        )
        .with_columns(
            pl.when(pl.col("collective_name") == "send")
            .then(me)
            .otherwise("src_rank")
            .alias("src_rank"),
            pl.when(pl.col("collective_name") == "recv")
            .then(me)
            .otherwise("dst_rank")
            .alias("dst_rank"),
            pl.lit("Byte").alias("dtype"),
            # a send or recv alone: c10d records its message as both In and Out
            *(
                pl.when(pl.col("collective_name").is_in(["send", "recv"]))
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
        .select(list(LAUNCH_META_SCHEMA))
        .cast(LAUNCH_META_SCHEMA)  # type: ignore[arg-type]
    )


def rank_of_process(comms: Communicators, world_size: int | None) -> pl.DataFrame:
    """process -> global rank: the process's rank in the communicator that spans the world
    (``world_size`` ranks; when unknown, the largest communicator traced)."""
    largest = comms.largest
    if world_size:
        largest = largest.filter(pl.col("nranks") == world_size)
    return largest.select("process", pl.col("comm_rank").alias("rank"))
