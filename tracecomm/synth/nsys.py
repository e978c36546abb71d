"""Render a RunSpec as Nsight Systems SQLite exports (``nsys export --type sqlite``).

The same planning as the Kineto writer (its ``_RankWriter``: correlation ids, launch and CPU span
times, sync records) feeds both, so a rank's export and its Kineto file describe the same events:
a time ``start`` inside the export is ``start + utcEpochNs`` (TARGET_INFO_SESSION_START_TIME) in
the Kineto file's absolute ns, and the PyTorch NVTX ranges' ``op_id`` is the Kineto op's
``Record function id``.

Tables, columns and enum rows copy a real export (``synth.nsys_schema``); rows are shuffled, as
Nsight Systems 2025.6 and later write them, so a reader must sort.
"""

from __future__ import annotations

import hashlib
import json
import random
import sqlite3
import struct
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from tracecomm.synth.layout import CpuSpan, Launch
from tracecomm.synth.names import COLLECTIVES, COMM_PROFILE, is_deepep, profile_for
from tracecomm.synth.nsys_schema import (
    ENUMS,
    EXPORT_PRODUCT_VERSION,
    EXPORT_SCHEMA_VERSION,
    TABLES,
)
from tracecomm.synth.ops import ROW_ELEMS
from tracecomm.synth.schedule import CpuCall, RankSpec, RunSpec
from tracecomm.synth.writer import _BANDWIDTH, _RankWriter, _Sync

# Serialized GlobalId: hardware id << 56 | VM id << 48 | pid << 24 | tid (as the real exports
# read: PID = globalTid / 0x1000000 % 0x1000000). Local captures have VM id 1.
VM_ID = 1 << 48
_PID_SHIFT = 24
# How long before the first event of the file the capture began (real exports: tens of s).
SESSION_LEAD_NS = 2_000_000_000
NCCL_DOMAIN_ID = 1
EVENT_PUSH_POP = 59
EVENT_DOMAIN_CREATE = 75
_CLASS_RUNTIME, _CLASS_DRIVER = 0, 1
_TORCHRUN_PID = 3_090_001
_MASTER_PORT = 29500
_SCRIPT = "train.py"
_DEV_STATE = "Local (CLI)"

# The launch call of each op kind, as CUPTI names them in an export (versioned runtime names).
_LAUNCH_CALL = {
    "compute": ("cudaLaunchKernel_v7000", _CLASS_RUNTIME),
    # NCCL >= 2.19 launches through the driver API
    "comm": ("cuLaunchKernelEx", _CLASS_DRIVER),
    "memcpy": ("cudaMemcpyAsync_v3020", _CLASS_RUNTIME),
    "memset": ("cudaMemsetAsync_v3020", _CLASS_RUNTIME),
}
_GRAPH_LAUNCH = ("cudaGraphLaunch_v10000", _CLASS_RUNTIME)
_LEGACY_COMM_LAUNCH = ("cudaLaunchKernel_v7000", _CLASS_RUNTIME)
_DEEPEP_LAUNCH = ("cudaLaunchKernelExC_v11060", _CLASS_RUNTIME)
# Versioned names of the non-launching runtime calls the specs make; others get _v3020.
_CALL_VERSIONS = {
    "cudaStreamBeginCapture": "cudaStreamBeginCapture_v10000",
    "cudaStreamEndCapture": "cudaStreamEndCapture_v10000",
    "cudaGraphInstantiate": "cudaGraphInstantiate_v12000",
    "cudaGraphLaunch": "cudaGraphLaunch_v10000",
}
# The NCCL API call (NCCL's own NVTX domain) behind each ungrouped collective type.
_NCCL_CALL = {
    "AllReduce": "ncclAllReduce",
    "AllGather": "ncclAllGather",
    "ReduceScatter": "ncclReduceScatter",
    "Broadcast": "ncclBroadcast",
    "Reduce": "ncclReduce",
}
# The tables whose rows the writer shuffles (the event tables; metadata stays in order).
_SHUFFLED = frozenset(
    {
        "PROCESSES",
        "ThreadNames",
        "CUPTI_ACTIVITY_KIND_KERNEL",
        "CUPTI_ACTIVITY_KIND_MEMCPY",
        "CUPTI_ACTIVITY_KIND_MEMSET",
        "CUPTI_ACTIVITY_KIND_RUNTIME",
        "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
        "NVTX_EVENTS",
    }
)
_NCCL_ARGS = "(ncclDevKernelArgsStorage<4096ul>)"
_SYNC_TYPES = {"Event Sync": 1, "Stream Wait Event": 2}
_MEMCPY_KINDS = {"HtoD": 1, "DtoH": 2, "DtoD": 8, "HtoH": 9, "PtoP": 10}
_MEM_KINDS = {"Pageable": 0, "Pinned": 1, "Device": 2, "Array": 3, "Managed": 4}


def file_name_for_rank(rank: int) -> str:
    return f"rank{rank}.sqlite"


def file_name_for_host(host: str) -> str:
    return f"{host}.sqlite"


def global_pid(pid: int) -> int:
    """The serialized GlobalId of a local process."""
    return VM_ID | (pid << _PID_SHIFT)


def global_tid(pid: int, tid: int) -> int:
    """The serialized GlobalId of a thread (its OS tid in the low 24 bits)."""
    return global_pid(pid) | tid


def write_nsys_run(
    spec: RunSpec,
    out_dir: Path,
    per_node: bool = False,
    seed: int = 0,
    payloads: str = "json",
) -> list[Path]:
    """Write the run as Nsight Systems SQLite exports into out_dir; returns the paths.

    Default: ``rank<N>.sqlite`` per rank, in rank order. per_node: ``<host>.sqlite`` per host
    holding all that host's ranks (one ``nsys profile torchrun ...`` per node), in host order.
    seed picks the (deterministic) row order. payloads: how NCCL's NVTX payload values are
    exported: "json" (``--include-json true``: ``jsonText``), "blobs" (``--include-blobs
    true``: ``binaryData`` laid out by ``NVTX_PAYLOAD_SCHEMA_ENTRIES``) or "none".
    """
    if payloads not in PAYLOAD_FORMS:
        raise ValueError(f"payloads {payloads!r}: one of {', '.join(PAYLOAD_FORMS)}")
    out_dir.mkdir(parents=True, exist_ok=True)
    ranks = sorted(spec.ranks, key=lambda r: r.rank)
    hosts = sorted({r.host for r in ranks}, key=_host_key)
    groups: list[tuple[str, list[RankSpec]]]
    if per_node:
        groups = [(file_name_for_host(h), [r for r in ranks if r.host == h]) for h in hosts]
    else:
        groups = [(file_name_for_rank(r.rank), [r]) for r in ranks]
    paths = []
    for name, members in groups:
        path = out_dir / name
        export = _Export(spec, members, hosts.index(members[0].host), name, seed, payloads)
        export.build()
        export.save(path)
        paths.append(path)
    return paths


def _host_key(host: str) -> tuple[str, int]:
    """node2 before node10."""
    stem = host.rstrip("0123456789")
    digits = host[len(stem) :]
    return stem, int(digits) if digits else -1


@dataclass
class _Export:
    """The rows of one export file: one host's session, one or more rank processes."""

    run: RunSpec
    ranks: list[RankSpec]
    node_rank: int
    name: str
    seed: int
    payloads: str = "json"
    rows: dict[str, list[tuple[object, ...]]] = field(default_factory=dict)
    strings: dict[str, int] = field(default_factory=dict)
    writers: list[_RankWriter] = field(default_factory=list)
    session_ns: int = 0

    def __post_init__(self) -> None:
        self.writers = [_RankWriter(self.run, rank) for rank in self.ranks]
        first = min(w.trace_start for w in self.writers)
        # Specs near the epoch (handmade ones) keep their times: the session starts at 0.
        self.session_ns = min(first, max(0, first - SESSION_LEAD_NS))

    # ---- helpers --------------------------------------------------------------------------

    def sid(self, text: str) -> int:
        known = self.strings.get(text)
        if known is None:
            known = self.strings[text] = len(self.strings) + 1
        return known

    def add(self, table: str, *row: object) -> None:
        self.rows.setdefault(table, []).append(row)

    def t(self, ns: int) -> int:
        """An absolute ns time as the export stores it: ns since the session start."""
        return ns - self.session_ns

    # ---- building -------------------------------------------------------------------------

    def build(self) -> None:
        host = self.ranks[0].host
        self._meta_export()
        self._capture(host)
        self._target(host)
        self.add("PROCESSES", global_pid(_TORCHRUN_PID), _TORCHRUN_PID, "torchrun")
        self.add("ThreadNames", self.sid("torchrun"), 20, global_tid(_TORCHRUN_PID, _TORCHRUN_PID))
        for writer in self.writers:
            _RankRows(self, writer).build()
        if self.payloads == "blobs":
            for schema_id, (_, entries, size) in _NCCL_SCHEMAS.items():
                self.add(
                    "NVTX_PAYLOAD_SCHEMAS",
                    NCCL_DOMAIN_ID,
                    schema_id,
                    None,
                    1,
                    None,
                    len(entries),
                    size,
                    None,
                )
                for idx, (name, kind, offset) in enumerate(entries):
                    self.add(
                        "NVTX_PAYLOAD_SCHEMA_ENTRIES",
                        NCCL_DOMAIN_ID,
                        schema_id,
                        idx,
                        None,
                        kind,
                        name,
                        None,
                        None,
                        offset or None,
                    )

    def _meta_export(self) -> None:
        major, minor, micro = EXPORT_SCHEMA_VERSION.split(".")
        stem = self.name.removesuffix(".sqlite")
        end = max(w.trace_end for w in self.writers) + 5_000_000_000
        utc = _utc(end)
        for key, value in (
            ("EXPORT_PRODUCT_NAME", "NVIDIA Nsight Systems"),
            ("EXPORT_PRODUCT_VERSION", EXPORT_PRODUCT_VERSION),
            ("EXPORT_PRODUCT_DATE", ".".join(EXPORT_PRODUCT_VERSION.split(".")[:2])),
            ("EXPORT_SCHEMA_VERSION", EXPORT_SCHEMA_VERSION),
            ("EXPORT_SCHEMA_VERSION_MAJOR", major),
            ("EXPORT_SCHEMA_VERSION_MINOR", minor),
            ("EXPORT_SCHEMA_VERSION_MICRO", micro),
            ("EXPORT_PLATFORM", "linux-desktop"),
            ("EXPORT_ARCH", "x64"),
            ("EXPORT_TIME_UTC", utc),
            ("EXPORT_TIME_LOCAL", f"{utc} +0000 UTC"),
            ("EXPORT_HOST", self.ranks[0].host),
            ("EXPORT_USER", ""),
            ("EXPORT_PARAM_EXPORT_TYPE", "SQLite"),
            ("EXPORT_PARAM_INPUT_FILE", f"{stem}.nsys-rep"),
            ("EXPORT_PARAM_OUTPUT_FILE", self.name),
            ("EXPORT_PARAM_USE_SHUFFLE", "true"),
            ("EXPORT_PARAM_INCLUDE_JSON", "false"),
            ("EXPORT_PARAM_TIME_NORMALIZE", "false"),
            ("EXPORT_PARAM_TIME_SHIFT", "0"),
        ):
            self.add("META_DATA_EXPORT", key, value)

    def _capture(self, host: str) -> None:
        """META_DATA_CAPTURE: the launched torchrun is PROCESS_0 (as in a real export); each rank
        process it started is PROCESS_<k> (k = 1, 2, ... in rank order) with its PID and its
        torchrun environment (RANK, LOCAL_RANK, WORLD_SIZE, ...)."""
        per_node = self._per_node()
        nnodes = len({r.host for r in self.run.ranks})
        for key, value in (
            ("DEVICE_ID", _DEV_STATE),
            ("CAPTURE_EVENT_TYPE", "NvtxEvents"),
            ("CAPTURE_EVENT_TYPE", "Cuda"),
            ("START_TRIGGER", "Immediate"),
            ("DEVICE_TYPE", "Unix"),
            ("DEVICE_DISPLAY_NAME", host),
            ("CUDA_TRACE_SCOPE", "ProcessTree"),
            ("PROCESS_0:HOW_TO_ATTACH", "LaunchAnother"),
            ("PROCESS_0:COMMAND", "torchrun"),
            ("PROCESS_0:ARGUMENT_0", f"--nnodes={nnodes}"),
            ("PROCESS_0:ARGUMENT_1", f"--nproc_per_node={per_node}"),
            ("PROCESS_0:ARGUMENT_2", f"--node_rank={self.node_rank}"),
            ("PROCESS_0:ARGUMENT_3", "--master_addr=node0"),
            ("PROCESS_0:ARGUMENT_4", f"--master_port={_MASTER_PORT}"),
            ("PROCESS_0:ARGUMENT_5", _SCRIPT),
            ("PROCESS_0:WORKING_DIR", "/workspace"),
            ("PROCESS_0:PID", "0"),
            ("PROCESS_0:ENVIRONMENT_VARIABLE", 'NCCL_DEBUG="WARN"'),
            ("PROCESS_0:ENVIRONMENT_VARIABLE", 'PYTHONUNBUFFERED="1"'),
            ("PROCESS_0:COLLECT_NVTX_TRACE", "true"),
            ("PROCESS_0:COLLECT_CUDA_TRACE", "true"),
            ("INCLUDE_CHILDREN", "true"),
        ):
            self.add("META_DATA_CAPTURE", key, value)
        for k, writer in enumerate(self.writers, start=1):
            rank = writer.spec.rank
            prefix = f"PROCESS_{k}:"
            env: dict[str, object] = {
                "RANK": rank,
                "LOCAL_RANK": writer.device,
                "WORLD_SIZE": self.run.world_size,
                "LOCAL_WORLD_SIZE": per_node,
                "GROUP_RANK": self.node_rank,
                "MASTER_ADDR": "node0",
                "MASTER_PORT": _MASTER_PORT,
            }
            self.add("META_DATA_CAPTURE", prefix + "COMMAND", "python3")
            self.add("META_DATA_CAPTURE", prefix + "ARGUMENT_0", "-u")
            self.add("META_DATA_CAPTURE", prefix + "ARGUMENT_1", _SCRIPT)
            self.add("META_DATA_CAPTURE", prefix + "PID", str(writer.pid))
            for var, setting in env.items():
                self.add("META_DATA_CAPTURE", prefix + "ENVIRONMENT_VARIABLE", f'{var}="{setting}"')

    def _per_node(self) -> int:
        counts: dict[str, int] = {}
        for rank in self.run.ranks:
            counts[rank.host] = counts.get(rank.host, 0) + 1
        return max(counts.values())

    def _target(self, host: str) -> None:
        self.add(
            "TARGET_INFO_SESSION_START_TIME",
            self.session_ns,
            _utc(self.session_ns),
            _utc(self.session_ns),
            30_000_000_000 + 1_000_003 * self.node_rank,
        )
        for name, enum, value in (
            ("CpuCores", 1, "224"),
            ("CpuArchitecture", 3, "x86_64"),
            ("NvDriverVersion", 205, "570.124.06"),
            ("OsDescription", 605, "Ubuntu 22.04.5 LTS"),
            ("CudaDriverVersion", 611, "12080"),
            ("Hostname", 619, host),
            ("HasNvtxEvents", 809, "1"),
            ("HasCudaEvents", 812, "1"),
            ("SupportsNCCL", 925, "1"),
        ):
            self.add("TARGET_INFO_SYSTEM_ENV", VM_ID, _DEV_STATE, name, enum, value)
        for device in sorted({w.device for w in self.writers}):
            self._gpu(host, device)

    def _gpu(self, host: str, device: int) -> None:
        self.add(
            "TARGET_INFO_GPU",
            VM_ID,
            device,
            self.run.device_name,
            f"0000:{0x18 + 0x10 * device:02x}:00.0",
            1,
            52_428_800,
            84_929_347_584,
            3_352_320_000_000,
            1_980_000_000,
            132,
            device,
            _uuid(host, device),
            0,
            "GH100",
            device,
            "",
            "",
            161,
            0,
            65_536,
            4,
            65_536,
            49_152,
            232_448,
            233_472,
            65_536,
            32,
            3,
            64,
            32,
            1_024,
            1_024,
            1_024,
            64,
            2_147_483_647,
            65_535,
            65_535,
            9,
            0,
            9,
            0,
        )

    # ---- saving ---------------------------------------------------------------------------

    def save(self, path: Path) -> None:
        path.unlink(missing_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.unlink(missing_ok=True)
        db = sqlite3.connect(tmp)
        try:
            db.execute("PRAGMA journal_mode=OFF")
            db.execute("PRAGMA synchronous=OFF")
            for name, (create, enum_rows) in ENUMS.items():
                db.execute(create)
                db.executemany(f"INSERT INTO {name} VALUES (?, ?, ?)", enum_rows)
            self.rows["StringIds"] = [(i, s) for s, i in self.strings.items()]
            for table in TABLES:
                rows = self.rows.get(table)
                if not rows:
                    continue  # as in a real export: a table exists only when it has rows
                db.execute(TABLES[table])
                if table in _SHUFFLED:
                    rows = list(rows)
                    _shuffle(rows, f"{self.seed}/{self.name}/{table}")
                marks = ", ".join("?" * len(rows[0]))
                db.executemany(f"INSERT INTO {table} VALUES ({marks})", rows)
            db.commit()
        finally:
            db.close()
        tmp.replace(path)


class _RankRows:
    """The rows of one rank process."""

    def __init__(self, export: _Export, writer: _RankWriter) -> None:
        self.x = export
        self.w = writer
        self.spec: RankSpec = writer.spec
        self.gpid = global_pid(writer.pid)
        self.context = writer.device + 1
        self.grid_id = 1_000 + 100_000 * writer.device
        self.nccl_domain = False
        # the NCCL communicators this rank used: id -> (members, its rank in it)
        self.comms: dict[int, tuple[int, int]] = {}

    def tid(self, thread: str) -> int:
        return global_tid(self.w.pid, self.w.tids[thread])

    def build(self) -> None:
        w, x = self.w, self.x
        x.add("PROCESSES", self.gpid, w.pid, "python3")
        for thread, label in (("main", "python3"), ("autograd", "pt_autograd_0")):
            x.add("ThreadNames", x.sid(label), 20, self.tid(thread))
        x.add(
            "TARGET_INFO_CUDA_DEVICE",
            w.device,
            w.device,
            w.pid,
            _uuid(self.spec.host, w.device),
            132,
        )
        for step in self.spec.steps:
            self.pytorch_range(
                f"ProfilerStep#{step.number}",
                w.plan.step_ext[step.number],
                "main",
                step.cpu_start_ns,
                step.cpu_end_ns,
            )
        for launch in w.plan.launches:
            self.launch(launch)
        for launch in w.plan.unlinked:
            self.device_row(launch)
        corr = w.plan.next_corr
        for sync in w.syncs:
            self.sync(sync, corr)
            corr += 2
        op_id = 1 + max(
            [*w.plan.step_ext.values(), *(s.ext for x_ in w.plan.launches for s in x_.spans), 0]
        )
        for call in self.spec.cpu_calls:
            if call.cat == "cuda_runtime":
                self.cpu_runtime(call, corr)
                corr += 1
            else:
                self.pytorch_range(call.name, op_id, call.thread, call.start_ns, call.end_ns)
                op_id += 1
        if self.nccl_domain:
            x.add(
                "NVTX_EVENTS",
                *_nvtx(x.t(w.trace_start), None, EVENT_DOMAIN_CREATE, "NCCL", self.tid("main")),
                None,
                NCCL_DOMAIN_ID,
                *_NVTX_TAIL,
            )
            # each communicator's ncclCommInitRank, world first (c10d's default group, which
            # torchrun jobs initialize with a barrier), before the traced work
            self.comm(w._world.name, w._world.ranks)
            at = w.trace_start
            world = _comm_id("world")
            for comm in sorted(self.comms, key=lambda c: c != world):
                members, me = self.comms[comm]
                fields = {"comm": comm, "nranks": members, "rank": me, "cuda_device": w.device}
                self.nccl_range("ncclCommInitRank", "main", at, at + 1_000, fields)
                at += 1_000

    # ---- CPU side -------------------------------------------------------------------------

    def pytorch_range(self, name: str, op_id: int, thread: str, start: int, end: int) -> None:
        """A PyTorch record_function range as emit_nvtx pushes it: default domain, text."""
        x = self.x
        text = f"{name}, op_id = {op_id}"
        x.add(
            "NVTX_EVENTS",
            *_nvtx(x.t(start), x.t(end), EVENT_PUSH_POP, text, self.tid(thread)),
            None,
            0,
            *_NVTX_TAIL,
        )

    def nccl_range(
        self, name: str, thread: str, start: int, end: int, fields: dict[str, int] | None = None
    ) -> None:
        """A range of NCCL's own NVTX domain: a registered string (textId), no text, and the
        call's payload in the export's form."""
        x = self.x
        self.nccl_domain = True
        x.add(
            "NVTX_EVENTS",
            *_nvtx(x.t(start), x.t(end), EVENT_PUSH_POP, None, self.tid(thread)),
            x.sid(name),
            NCCL_DOMAIN_ID,
            *_NVTX_TAIL[:7],
            *_payload(name, fields, x.payloads),
        )

    def comm(self, key: str, members: tuple[int, ...]) -> tuple[int, int]:
        """The communicator of a group (its id, the rank's place in it), noted for its init."""
        comm = _comm_id(key)
        me = members.index(self.spec.rank) if self.spec.rank in members else 0
        self.comms[comm] = (len(members), me)
        return comm, me

    def launch(self, launch: Launch) -> None:
        op = launch.op
        x = self.x
        for span in launch.spans:
            self.pytorch_range(span.name, span.ext, op.launch_thread, span.start, span.end)
        if op.kind == "comm" and not op.graph and not is_deepep(launch.name):
            self.nccl_calls(launch)
        name, event_class = self.launch_call(launch)
        x.add(
            "CUPTI_ACTIVITY_KIND_RUNTIME",
            x.t(op.launch_ns),
            x.t(op.launch_ns + launch.rt_dur),
            event_class,
            self.tid(op.launch_thread),
            launch.corr,
            x.sid(name),
            0,
            None,
        )
        for device in (launch, *self.w.plan.replayed.get(launch.ordinal, ())):
            if device.op.recorded:
                self.device_row(device)

    @staticmethod
    def launch_call(launch: Launch) -> tuple[str, int]:
        op = launch.op
        if op.graph:
            return _GRAPH_LAUNCH
        if op.kind == "comm" and is_deepep(launch.name):
            return _DEEPEP_LAUNCH
        if op.annotated:
            return _LEGACY_COMM_LAUNCH
        return _LAUNCH_CALL[op.kind]

    def nccl_calls(self, launch: Launch) -> None:
        """NCCL's NVTX ranges around the launch, inside the innermost PyTorch range, with the
        payloads NCCL gives them (sizes in bytes; a peer or root is a rank of the communicator:
        PyTorch's send / recv use a communicator of the two ranks)."""
        op = launch.op
        inner: CpuSpan | None = launch.spans[-1] if launch.spans else None
        t, t_end = op.launch_ns, op.launch_ns + launch.rt_dur
        lo = inner.start if inner else t
        hi = inner.end if inner else t_end
        pre, post = t - lo, hi - t_end
        thread = op.launch_thread
        coll = op.coll or "Other"
        info = COLLECTIVES[coll]
        width = _DTYPE_BYTES[info.dtype]
        group = self.w._group(launch)
        if op.p2p:
            pair = tuple(sorted((self.spec.rank, op.peer)))
            comm, me = self.comm(f"p2p {pair[0]} {pair[1]}", pair)
            call = "ncclSend" if op.p2p == "send" else "ncclRecv"
            fields = {"comm": comm, "bytes": op.nelems * width, "peer": 1 - me}
            self.nccl_range(call, thread, t - pre // 2, t_end + post // 2, fields)
            return
        comm, _ = self.comm(group.name, group.ranks)
        single = _NCCL_CALL.get(coll)
        if single is not None:
            n = len(group.ranks)
            count = op.nelems // n if coll == "ReduceScatter" else op.nelems
            fields = {"comm": comm, "bytes": count * width}
            if coll in ("Broadcast", "Reduce"):
                fields["root"] = 0
            self.nccl_range(single, thread, t - pre // 2, t_end + post // 2, fields)
            return
        # grouped: ncclGroupStart, the point-to-point calls, then ncclGroupEnd launches
        calls: list[tuple[str, dict[str, int] | None]] = [("ncclGroupStart", None)]
        if coll == "AllToAll":
            n = len(group.ranks)
            sent = [r * ROW_ELEMS for r in op.in_splits] or [op.nelems // n] * n
            got = [r * ROW_ELEMS for r in op.out_splits] or [op.nelems // n] * n
            for peer in range(n):
                calls.append(
                    ("ncclSend", {"comm": comm, "bytes": sent[peer] * width, "peer": peer})
                )
                calls.append(("ncclRecv", {"comm": comm, "bytes": got[peer] * width, "peer": peer}))
        first, last = lo + pre // 4, t - pre // 4
        slot = max(0, last - first) // len(calls)
        for i, (call, payload) in enumerate(calls):
            begin = first + i * slot
            self.nccl_range(call, thread, begin, begin + slot // 2, payload)
        self.nccl_range("ncclGroupEnd", thread, t - pre // 4, t_end + post // 2)

    def cpu_runtime(self, call: CpuCall, corr: int) -> None:
        x = self.x
        name = _CALL_VERSIONS.get(call.name, f"{call.name}_v3020")
        x.add(
            "CUPTI_ACTIVITY_KIND_RUNTIME",
            x.t(call.start_ns),
            x.t(call.end_ns),
            _CLASS_RUNTIME,
            self.tid(call.thread),
            corr,
            x.sid(name),
            0,
            None,
        )

    # ---- GPU side -------------------------------------------------------------------------

    def device_row(self, launch: Launch) -> None:
        op = launch.op
        x = self.x
        corr = launch.device_corr or launch.corr
        head = (x.t(op.start_ns), x.t(op.end_ns), self.w.device, self.context, 0, op.stream)
        if op.kind == "memcpy":
            kind, src, dst = _memcpy_kinds(launch.name)
            nbytes = op.dur_ns * _BANDWIDTH["memcpy"]
            x.add(
                "CUPTI_ACTIVITY_KIND_MEMCPY",
                *head,
                corr,
                self.gpid,
                nbytes,
                kind,
                None,
                src,
                dst,
                *([None] * 7),
                1,
            )
            return
        if op.kind == "memset":
            nbytes = op.dur_ns * _BANDWIDTH["memset"]
            x.add(
                "CUPTI_ACTIVITY_KIND_MEMSET",
                *head,
                corr,
                self.gpid,
                0,
                nbytes,
                None,
                _memset_kind(launch.name),
            )
            return
        comm = op.kind == "comm"
        profile = COMM_PROFILE if comm else profile_for(launch.name)
        self.grid_id += 1
        shared = profile.shared_mem
        cluster = (4, 1, 1, 1, 8, 30) if comm else (0, 0, 0, 1, 0, 0)
        x.add(
            "CUPTI_ACTIVITY_KIND_KERNEL",
            *head,
            corr,
            self.gpid,
            x.sid(launch.name),
            x.sid(short_name(launch.name)),
            x.sid(mangled_name(launch.name)),
            1,
            1,
            profile.registers,
            *profile.grid,
            *profile.block,
            min(shared, 49_152),
            max(0, shared - 49_152),
            0,
            250_871_808,
            self.grid_id,
            max(32_768, -(-shared // 8_192) * 8_192),
            (op.graph << 32) | op.node if op.graph else None,
            1 if comm else 0,
            None,
            None,
            None,
            op.graph or None,
            *cluster,
            None,
            "[]",
        )

    def sync(self, sync: _Sync, corr: int) -> None:
        x = self.x
        event = 6_000 + corr % 1_000
        x.add(
            "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
            x.t(sync.start),
            x.t(sync.end),
            self.w.device,
            self.context,
            None,
            sync.stream,
            corr,
            self.gpid,
            None,
            _SYNC_TYPES[sync.name],
            event,
            16_000 + event,
        )


# rangeId, category, color come first; then text, globalTid, endGlobalTid; textId and domainId
# are passed by the caller; the payload columns after them stay NULL.
_NVTX_TAIL = (None,) * 9


PAYLOAD_FORMS = ("json", "blobs", "none")
# bytes per element of the dtypes the generator's collectives use (names.COLLECTIVES)
_DTYPE_BYTES = {"Float": 4, "BFloat16": 2}
# NCCL's payload entries: our field -> (entry name, NVTX entry type, offset in the struct)
_ENTRY = {
    "comm": ("NCCL communicator ID", 18),
    "nranks": ("No. of ranks", 5),
    "rank": ("Rank", 5),
    "cuda_device": ("CUDA device", 5),
    "bytes": ("Message size [bytes]", 22),
    "peer": ("Peer rank", 5),
    "root": ("Root", 5),
}
# NCCL's static schemas as a 2.2x NCCL registers them: call -> (id, entries, struct size)
_NCCL_SCHEMAS: dict[int, tuple[str, tuple[tuple[str, int, int], ...], int]] = {}


def _schema_rows() -> None:
    layouts = {
        "ncclCommInitRank": ("comm", "nranks", "rank", "cuda_device"),
        "ncclAllGather": ("comm", "bytes"),
        "ncclAllReduce": ("comm", "bytes"),
        "ncclBroadcast": ("comm", "bytes", "root"),
        "ncclReduceScatter": ("comm", "bytes"),
        "ncclReduce": ("comm", "bytes", "root"),
        "ncclSend": ("comm", "bytes", "peer"),
        "ncclRecv": ("comm", "bytes", "peer"),
    }
    for i, (call, names) in enumerate(layouts.items()):
        entries, offset = [], 0
        for name in names:
            label, kind = _ENTRY[name]
            entries.append((label, kind, offset))
            offset += 8 if kind in (18, 22) else 4
        _NCCL_SCHEMAS[(1 << 24) + 2 + i] = (call, tuple(entries), (offset + 7) // 8 * 8)


_schema_rows()
_SCHEMA_OF_CALL = {call: sid for sid, (call, _, _) in _NCCL_SCHEMAS.items()}


def _comm_id(key: str) -> int:
    """A communicator's id (NCCL's commHash): the same on every member."""
    return int.from_bytes(hashlib.sha256(f"comm {key}".encode()).digest()[:8], "little")


def _payload(call: str, fields: dict[str, int] | None, form: str) -> tuple[object, object]:
    """(jsonText, binaryData) of one NCCL call's payload in the export's form."""
    if not fields or form == "none":
        return None, None
    if form == "json":
        return json.dumps({_ENTRY[k][0]: v for k, v in fields.items()}), None
    schema_id = _SCHEMA_OF_CALL[call]
    _, entries, size = _NCCL_SCHEMAS[schema_id]
    body = bytearray(size)
    by_label = {_ENTRY[k][0]: v for k, v in fields.items()}
    for label, kind, offset in entries:
        fmt = "<Q" if kind in (18, 22) else "<i"
        struct.pack_into(fmt, body, offset, by_label.get(label, 0))
    header = struct.pack("<QQQQ", NCCL_DOMAIN_ID, schema_id, size, 32)
    return None, header + bytes(body)


def _nvtx(
    start: int, end: int | None, event_type: int, text: str | None, tid: int
) -> tuple[object, ...]:
    return (start, end, event_type, None, None, None, text, tid, None)


def short_name(name: str) -> str:
    """The base function name of a demangled kernel name (the export's shortName)."""
    base = _strip_args(name)
    if base.startswith("void "):
        base = base[len("void ") :]
    base = _strip_templates(base)
    return base.rsplit("::", 1)[-1].strip() or name


def mangled_name(name: str) -> str:
    """An Itanium-style mangled name for a demangled kernel name.

    Plain ``extern "C"`` names (no argument list, as cuBLAS's) are their own mangled name; the
    others get their qualified path and a ``v`` parameter list: plausible, not exact.
    """
    if "(" not in name:
        return name
    if name.endswith(_NCCL_ARGS) and " " not in name:
        base = name.removesuffix(_NCCL_ARGS)
        return f"_Z{len(base)}{base}24ncclDevKernelArgsStorageILm4096EE"
    base = _strip_templates(_strip_args(name).removeprefix("void "))
    parts = [p for p in base.replace("(anonymous namespace)", "_GLOBAL__N_1").split("::") if p]
    encoded = "".join(f"{len(p)}{p}" for p in parts)
    return f"_ZN{encoded}Ev" if len(parts) > 1 else f"_Z{encoded}v"


def _strip_args(name: str) -> str:
    """The name without its final top-level parameter list."""
    depth = 0
    for i in range(len(name) - 1, -1, -1):
        ch = name[i]
        if ch == ")":
            depth += 1
        elif ch == "(":
            depth -= 1
            if depth == 0:
                head = name[:i]
                # "(anonymous namespace)" is part of the path, not a parameter list
                return head if not head.endswith("::") else name
    return name


def _strip_templates(name: str) -> str:
    out = []
    depth = 0
    for ch in name:
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif depth == 0:
            out.append(ch)
    return "".join(out)


def _memcpy_kinds(name: str) -> tuple[int, int, int]:
    """copyKind, srcKind, dstKind from a CUPTI name like ``Memcpy HtoD (Pinned -> Device)``."""
    words = name.replace("(", " ").replace(")", " ").split()
    kind = next((_MEMCPY_KINDS[w] for w in words if w in _MEMCPY_KINDS), 8)
    mems = [_MEM_KINDS[w] for w in words if w in _MEM_KINDS]
    src, dst = (mems[0], mems[1]) if len(mems) >= 2 else (2, 2)
    return kind, src, dst


def _memset_kind(name: str) -> int:
    return next((v for k, v in _MEM_KINDS.items() if k in name), 2)


def _uuid(host: str, device: int) -> str:
    h = hashlib.sha256(f"{host}/{device}".encode()).hexdigest()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def _utc(ns: int) -> str:
    return datetime.fromtimestamp(ns // 1_000_000_000, tz=timezone.utc).strftime(
        "%Y-%m-%dT%H:%M:%S"
    )


def _shuffle(rows: list[tuple[object, ...]], key: str) -> None:
    digest = hashlib.sha256(key.encode()).digest()
    random.Random(int.from_bytes(digest[:8], "big")).shuffle(rows)
