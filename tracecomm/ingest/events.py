"""The trace file's event types and schema: what msgspec decodes a Kineto / Chrome trace into,
the categories tracecomm uses, the collective metadata it keeps, and the file-level facts.

Everything here is a declaration; the readers (``salvage``, ``stream``, ``fast``) and the frame
builders (``frames``) share it.
"""

from __future__ import annotations

import re
from typing import Any, ClassVar, Union

import msgspec
import polars as pl

from tracecomm.ingest.model import TraceMeta

GZIP_MAGIC = b"\x1f\x8b"
UTF8_BOM = b"\xef\xbb\xbf"
# Between two events of the array: where a chunk may end, or a cut file be closed.
EVENT_BOUNDARY = re.compile(rb"\}\s*,\s*\{")
COMM_OP = "record_param_comms"  # the CPU op PyTorch records collective metadata on
# A CPU op kept only as the op a launch may name (its External id): no other frame reads it.
LAUNCH_OP_KIND = "op"

# Old and current spellings of the categories we use, lower-cased, to one kind each.
KIND_OF_CAT: dict[str, str] = {
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

STEP_NAME = re.compile(r"^ProfilerStep#(\d+)$")


class Args(msgspec.Struct, gc=False):
    correlation: Any = None
    external_id: Any = msgspec.field(default=None, name="External id")
    external_id_lc: Any = msgspec.field(default=None, name="external id")
    device: Any = None
    stream: Any = None
    # CUDA graph replays: CUPTI's graphId / graphNodeId on the kernel (0: not from a graph)
    graph_id: Any = msgspec.field(default=None, name="graph id")
    graph_node: Any = msgspec.field(default=None, name="graph node id")
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
    in_split_size: Any = msgspec.field(default=None, name="In split size")
    out_split_size: Any = msgspec.field(default=None, name="Out split size")
    input_dims: Any = msgspec.field(default=None, name="Input Dims")
    concrete_inputs: Any = msgspec.field(default=None, name="Concrete Inputs")
    input_types: Any = msgspec.field(default=None, name="Input type")


class EventFields(msgspec.Struct, gc=False):
    cat: Any = None
    name: Any = None
    pid: Any = None
    tid: Any = None
    ts: Any = None
    dur: Any = None
    args: msgspec.Raw = msgspec.Raw(b"null")


class Event(EventFields, gc=False):
    """Any event, its phase read as a field (the fallback for files with unusual phases)."""

    ph: Any = None


class Complete(EventFields, tag_field="ph", tag="X", gc=False):
    """A complete ('X') event: the only phase whose fields are decoded."""

    ph: ClassVar[str] = "X"


class Begin(EventFields, tag_field="ph", tag="B", gc=False):
    """Duration events written as a B / E pair (some tools and converters do)."""

    ph: ClassVar[str] = "B"


class End(EventFields, tag_field="ph", tag="E", gc=False):
    ph: ClassVar[str] = "E"


class MetaEvent(msgspec.Struct, tag_field="ph", tag="M", gc=False):
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
# decoded again with the untagged Event, which reads ph as a plain field.
_PHASES = "iICbneSTpFstfPONDVvRc()"
_PHASE_TYPES = (Complete, Begin, End, MetaEvent, *(_skipped_phase(p) for p in _PHASES))
AnyPhase = Union[_PHASE_TYPES]  # type: ignore[valid-type]  # noqa: UP007


class Trace(msgspec.Struct, gc=False):
    traceEvents: list[Event] | None = None
    distributedInfo: Any = None
    deviceProperties: Any = None
    baseTimeNanoseconds: Any = None
    trace_id: Any = None
    host_name: Any = None


class TaggedTrace(Trace, gc=False):
    traceEvents: list[AnyPhase] | None = None


# float_hook=str hands fractional numbers over as their literal text: exact ns later.
TAGGED_DECODER = msgspec.json.Decoder(TaggedTrace, float_hook=str)
DECODER = msgspec.json.Decoder(Trace, float_hook=str)


def decode_doc(data: bytes) -> Trace:
    """The whole document; files with unusual phases are read with the untagged ``Event``."""
    try:
        return TAGGED_DECODER.decode(data)
    except msgspec.ValidationError:
        return DECODER.decode(data)


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
    "in_split_size": pl.String(),  # all_to_all(v): rows sent to each member, as "[a, b, …]"
    "out_split_size": pl.String(),  # and received from each
}


def _meta_arg_names() -> dict[str, str]:
    fields = {f.name: f.encode_name for f in msgspec.structs.fields(Args)}
    return {column: fields[column] for column in META_SCHEMA}


# the Kineto argument each metadata column is read from ("Process Group Name", ...): the
# export writes them back under the same names
META_ARG_NAMES: dict[str, str] = _meta_arg_names()


class Envelope(Trace, gc=False):
    """The document with its event array left undecoded (the C scanner reads it). Empty when
    the document has none: msgspec cannot decode ``Raw | None`` (it would accept only null)."""

    traceEvents: msgspec.Raw = msgspec.Raw(b"")  # type: ignore[assignment]


ENVELOPE_DECODER = msgspec.json.Decoder(Envelope)
ARGS_DECODER = msgspec.json.Decoder(Args | None)
ARGS_LIST_DECODER = msgspec.json.Decoder(list[Args | None])
NO_ARGS = Args()


def trace_meta(doc: Trace) -> TraceMeta:
    """File-level facts from the document's envelope (distributedInfo, deviceProperties, …)."""
    info = doc.distributedInfo if isinstance(doc.distributedInfo, dict) else {}
    props = doc.deviceProperties if isinstance(doc.deviceProperties, list) else []
    base = doc.baseTimeNanoseconds
    rank = as_int(info.get("rank"))
    return TraceMeta(
        rank=rank if rank is not None and rank >= 0 else None,
        world_size=as_int(info.get("world_size")),
        backend=as_str(info.get("backend")),
        nccl_version=as_str(info.get("nccl_version")),
        pg_config=tuple(p for p in info.get("pg_config") or () if isinstance(p, dict)),
        device_names={
            int(p["id"]): str(p.get("name"))
            for p in props
            if isinstance(p, dict) and as_int(p.get("id")) is not None
        },
        base_time_ns=as_int(base),
        host_name=as_str(doc.host_name),
        trace_id=as_str(doc.trace_id),
        device_props={
            int(p["id"]): {k: p[k] for k in DEVICE_FIELDS if k in p}
            for p in props
            if isinstance(p, dict) and as_int(p.get("id")) is not None
        },
    )


DEVICE_FIELDS = ("name", "numSms", "computeMajor", "computeMinor", "totalGlobalMem", "warpSize")


def as_int(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    return None


def as_str(value: object) -> str | None:
    return None if value is None else str(value)
