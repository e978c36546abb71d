"""Records the NCCL log parser hands over (nccl-logs.md): plain, small, picklable values.

Every text field that comes from a log (messages, quoted lines, host names) has already been
through :func:`tracecomm.nccl.quote.quote`: control characters are escaped, so a record can be
printed as it is.
"""

from __future__ import annotations

from collections import Counter
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
NO_PROC: Proc = ("?", -1)  # an NCCL line whose host:pid:tid prefix the user stripped
# The WARN kinds (parse.WARN_KINDS) that are notices: a feature is absent and NCCL carries on
# without it. Here, not in parse.py, so that the diagnosis (which every report's types
# import) does not compile the parser's 60 patterns in a run with no NCCL log.
NOTICE_KINDS = frozenset({"collnet_unsupported", "no_net_plugin", "no_ibverbs", "nvls_unsupported"})

# COLL records kept as columns for the checks that compare records across processes (the
# damaged-count check, nccl.damage): about 150 bytes each, so that a log of tens of millions of
# them parses in bounded memory; the records past it are counted (and checked alone) only.
KEPT_COLLS = 1_000_000

# How many records of one family are kept (their counts go on): a hostile 1 GB log of WARN or
# watchdog lines must not hold millions of objects.
KEEP = 20_000


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
    """``Channel <cc>{/<conn>} : <src>[<id>] -> <dst>[<id>] {[send|receive] }via <transport>``
    (and ``Ring <cc> : <src> -> <dst> … via …`` of NCCL ≤2.4)."""

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
    kind: str  # ib_completion, ib_verbs, size_mismatch, socket, cuda, bootstrap, … (WARN_KINDS)
    stamp: str | None = None
    unwinding: tuple[str, ...] = ()


@dataclass(frozen=True)
class VersionRecord:
    """An NCCL / RCCL version, with who printed it (§3; PyTorch's environment dump)."""

    version: str  # as printed: 2.19.3+cuda12.3, 2.21.5-HEAD:9a0e6a1, 2.20.5
    library: str  # NCCL or RCCL
    source: str  # bare (≤2.21, rank 0 only), info (2.22+ per process), torch (env dump), banner
    host: str | None = None
    pid: int | None = None
    rank: int | None = None  # global rank, when the line says
    line: str = ""
    file: int | None = None  # which of the log's files printed it (an index into NcclLog.paths)

    @property
    def base(self) -> str:
        """``2.19.3`` of ``2.19.3+cuda12.3``: what two processes must agree on."""
        head = self.version
        for cut in ("+", "-"):
            head = head.split(cut, 1)[0]
        return head


@dataclass(frozen=True)
class PgRef:
    """A process-group tag of a PyTorch line (§11): ``[PG 3 Rank 1]``, ``[PG 0 (default_pg)
    Rank 0]``, ``[PG ID 2 PG GUID 9(dp) Rank 4]``. The GUID (or the name of the older tags) is
    the same on every rank of the group; the ID is per process."""

    id: str | None = None
    guid: str | None = None
    name: str | None = None
    desc: str | None = None

    @property
    def key(self) -> str:
        """What identifies the group across ranks."""
        return self.guid or self.name or self.id or "?"

    @property
    def label(self) -> str:
        if self.guid is not None:
            text = f"PG ID {self.id} PG GUID {self.guid}" if self.id else f"PG GUID {self.guid}"
        else:
            text = f"PG {self.name or self.id}"
        return f"{text} ({self.desc})" if self.desc else text

    @property
    def is_default(self) -> bool:
        return self.desc == "default_pg" or self.key == "0"


@dataclass(frozen=True)
class WatchdogRecord:
    """A PyTorch ProcessGroupNCCL watchdog line (§11)."""

    kind: str  # timeout, exception, failure, timeout_at, desync, dump_signal, stuck
    global_rank: int | None  # the [rank<G>]: prefix (torch ≈2.3+)
    pg: PgRef | None  # from the [PG …] tag; None on the plain [Rank r] tag
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
    launcher: str | None = None  # the launcher prefix of the line (mpirun rank, Ray pid, …)
    joined_ranks: tuple[int, ...] = ()  # desync report: joined but did not finish
    missing_ranks: tuple[int, ...] = ()  # desync report: did not join


@dataclass(frozen=True)
class TestRank:
    """An nccl-tests / rccl-tests header line: ``#  Rank 3 Group 0 Pid 58192 on z292 device 3``.
    Rank 0 prints one for every rank of the job."""

    rank: int
    pid: int
    host: str
    device: int


@dataclass
class Tears:
    """Records of one file torn by processes that share one stream (nccl-logs.md §16.1): a
    record cut by another process's write, its tail on a line of its own."""

    torn: int = 0  # records found cut
    recovered: int = 0  # of them, joined whole again with their tail (the rest are dropped)


@dataclass
class Signal:
    """A network-selection fact of one process, with the first line that shows it."""

    count: int
    line: str


# The network facts a process's lines can show (nccl-logs.md §6–7):
#   socket_selected   "Using network Socket" / "Using internal Network Socket" (≤2.4)
#   socket_channel    a Channel / Ring line via NET/Socket: inter-node traffic over TCP
#   no_ib_device      "NET/IB : No device found." (a socket fallback follows)
#   no_ibverbs        "Failed to open libibverbs.so" (no IB library: sockets)
#   ib_disabled       "NCCL_IB_DISABLE set by environment to 1" (sockets by choice)
#   fast_selected     "Using network IB" / a plugin net
#   fast_channel      a Channel line via NET/IB or a plugin net
#   ib_device         "NET/IB : Using [0]mlx5_0:1/IB …" (an HCA was found)
#   multi_node        "nNodes N" with N > 1
#   single_node       "nNodes 1"
SIGNALS = (
    "socket_selected",
    "socket_channel",
    "no_ib_device",
    "no_ibverbs",
    "ib_disabled",
    "fast_selected",
    "fast_channel",
    "ib_device",
    "multi_node",
    "single_node",
)


@dataclass
class NcclLog:
    """Everything read from one or more log files; ``colls`` are columns (they can be many)."""

    paths: list[str] = field(default_factory=list)
    lines: int = 0
    nccl_lines: int = 0  # lines of NCCL / PyTorch-NCCL families (known + unknown)
    unknown: int = 0  # NCCL lines of no family we read: counted, never fatal
    procs: Counter[Proc] = field(default_factory=Counter)  # NCCL lines per process
    # the file each process first printed in (an index into ``paths``): a line without a
    # process of its own is attributed only to the processes of its own file
    proc_files: dict[Proc, int] = field(default_factory=dict)
    versions: list[VersionRecord] = field(default_factory=list)
    inits: list[CommInit] = field(default_factory=list)
    nodes: dict[Proc, tuple[int, int]] = field(default_factory=dict)  # nNodes, localRanks
    channels: list[ChannelSummary] = field(default_factory=list)
    transports: list[Transport] = field(default_factory=list)
    transport_counts: Counter[str] = field(default_factory=Counter)  # NET/IB, P2P, … -> lines
    networks: dict[Proc, str] = field(default_factory=dict)  # "Using network X"
    signals: dict[tuple[Proc, str], Signal] = field(default_factory=dict)
    socket_interfaces: dict[Proc, tuple[str, ...]] = field(default_factory=dict)
    nvls_support: dict[str, bool] = field(default_factory=dict)  # host -> multicast available
    rings: int = 0  # Channel / Ring / Tree / Trees / NVLS / CollNet graph lines
    tunings: list[tuple[str, str, int, str, str]] = field(default_factory=list)
    warns: list[WarnRecord] = field(default_factory=list)  # the first KEEP
    warn_counts: Counter[str] = field(default_factory=Counter)  # kind -> WARN lines
    watchdog: list[WatchdogRecord] = field(default_factory=list)  # the first KEEP
    watchdog_lines: int = 0
    global_ranks_seen: set[int] = field(default_factory=set)  # [rank<G>]: prefixes
    pg_global: dict[tuple[str, int], int] = field(default_factory=dict)  # (pg key, pg rank) -> G
    test_ranks: list[TestRank] = field(default_factory=list)
    coll_frames: list[pl.DataFrame] = field(default_factory=list)  # COLL lines, per block
    tears: dict[int, Tears] = field(default_factory=dict)  # file (index into paths) -> tears
    coll_records: int = 0  # every COLL record read, kept as columns or not (KEPT_COLLS)
    coll_kept: int = 0  # of them, kept in coll_frames
    unkept_too_large: int = 0  # of those not kept, buffers past any device (nccl.damage)

    @property
    def colls(self) -> pl.DataFrame:
        """Every COLL line (nccl-logs.md §8) as columns: COLL_SCHEMA."""
        return pl.concat(self.coll_frames) if self.coll_frames else pl.DataFrame(schema=COLL_SCHEMA)

    def signal(self, proc: Proc, name: str, line: str) -> None:
        seen = self.signals.get((proc, name))
        if seen is None:
            self.signals[(proc, name)] = Signal(1, line)
        else:
            seen.count += 1
