"""Records the NCCL log parser hands over (nccl-logs.md): plain, small, picklable values."""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

COLL_SCHEMA: dict[str, pl.DataType] = {
    "host": pl.String(),
    "pid": pl.Int64(),
    "op": pl.String(),
    "op_count": pl.Int64(),
    "count": pl.Int64(),
    "datatype": pl.Int64(),
    "redop": pl.Int64(),
    "root": pl.Int64(),  # the peer of Send / Recv
    "comm": pl.String(),  # per-process pointer
    "nranks": pl.Int64(),
}
Proc = tuple[str, int]  # (host, pid): a process; comm pointers mean something only inside one


@dataclass(frozen=True)
class CommInit:
    """An ``Init START`` / ``Init COMPLETE`` line (nccl-logs.md §4)."""

    host: str
    pid: int
    comm: str  # per-process pointer
    rank: int
    nranks: int
    cuda_dev: int | None
    nvml_dev: int | None
    bus_id: str | None
    comm_id: str | None  # identical on every rank of the communicator (absent on 2.23+ splits)
    api: str | None  # ncclCommInitRank, ncclCommSplit, … (2.21+)
    parent: str | None  # splits: the parent comm pointer
    color: int | None
    complete: bool


@dataclass(frozen=True)
class ChannelSummary:
    """``<c> coll channels, {<k> collnet channels, }{<v> nvls channels, }<p> p2p channels,
    <q> p2p channels per peer``. The line names no communicator: it belongs to the one whose
    Init line the same process printed last."""

    host: str
    pid: int
    comm_id: str | None  # of the Init line it follows in the same process
    coll: int
    collnet: int | None
    nvls: int | None
    p2p: int
    per_peer: int


@dataclass(frozen=True)
class Transport:
    """``Channel <cc>{/<conn>} : <src>[<id>] -> <dst>[<id>] {[send|receive] }via <transport>``."""

    host: str
    pid: int
    channel: int
    src: int
    dst: int
    direction: str | None  # send / receive (NET only)
    via: str  # the whole transport text, e.g. NET/IB/3(12)/GDRDMA
    kind: str  # P2P, SHM, NET, COLLNET
    net: str | None  # IB, Socket, a plugin name (NET only)
    gdr: bool


@dataclass(frozen=True)
class WarnRecord:
    """A WARN line, with the error-unwinding INFO lines of the same thread folded in (§10)."""

    host: str
    pid: int
    tid: int
    source: str | None  # file:line
    message: str
    kind: str  # ib_completion, ib_verbs, size_mismatch, socket, cuda, bootstrap, …
    stamp: str | None = None
    unwinding: tuple[str, ...] = ()


@dataclass(frozen=True)
class WatchdogRecord:
    """A PyTorch ProcessGroupNCCL watchdog line (§11)."""

    kind: str  # timeout, failure, exception, timeout_at, desync
    global_rank: int | None  # the [rank<G>]: prefix (torch ≈2.3+)
    pg: str | None  # PG name / uid / id from the tag
    pg_rank: int | None  # rank within the PG
    seq: int | None
    op_type: str | None
    numel_in: int | None
    numel_out: int | None
    timeout_ms: int | None
    ran_ms: int | None
    last_enqueued: int | None
    last_started: int | None
    last_completed: int | None
    line: str


@dataclass
class NcclLog:
    """Everything read from one or more log files; ``colls`` are columns (they can be many)."""

    paths: list[str] = field(default_factory=list)
    lines: int = 0
    nccl_lines: int = 0
    unknown: int = 0  # NCCL lines of no family we read: counted, never fatal
    versions: dict[Proc, str] = field(default_factory=dict)
    bare_versions: list[str] = field(default_factory=list)  # ≤2.21 prefix-less version lines
    inits: list[CommInit] = field(default_factory=list)
    nodes: dict[Proc, tuple[int, int]] = field(default_factory=dict)  # nNodes, localRanks
    channels: list[ChannelSummary] = field(default_factory=list)
    transports: list[Transport] = field(default_factory=list)
    networks: dict[Proc, str] = field(default_factory=dict)  # "Using network X"
    ib_devices: dict[Proc, str] = field(default_factory=dict)  # NET/IB : Using …
    no_ib_device: set[Proc] = field(default_factory=set)  # NET/IB : No device found.
    nvls_support: dict[str, bool] = field(default_factory=dict)  # host -> multicast available
    rings: int = 0  # Channel / Ring / Tree / Trees / NVLS / CollNet graph lines
    tunings: list[tuple[str, str, int, str, str]] = field(default_factory=list)
    warns: list[WarnRecord] = field(default_factory=list)
    watchdog: list[WatchdogRecord] = field(default_factory=list)
    coll_frames: list[pl.DataFrame] = field(default_factory=list)  # COLL lines, per block

    @property
    def colls(self) -> pl.DataFrame:
        """Every COLL line (nccl-logs.md §8) as columns: COLL_SCHEMA."""
        return pl.concat(self.coll_frames) if self.coll_frames else pl.DataFrame(schema=COLL_SCHEMA)
