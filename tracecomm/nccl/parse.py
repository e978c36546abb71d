"""Streaming parser of NCCL debug output and PyTorch ProcessGroupNCCL lines (nccl-logs.md
§2–11): every line becomes a typed record in an :class:`NcclLog`, or a count.

A log is read in blocks cut at line ends (a 5 GB log never loads whole). Each block is split
and filtered in Rust (polars): only lines that can belong to a family we read reach Python,
and COLL lines (they can be millions) are split into columns there too.

Logs as users paste them carry more than NCCL wrote. Handled on every line:

- launcher prefixes: mpirun ``[1,3]<stdout>:``, pdsh ``host: ``, Ray ``(RayWorker pid=…)``,
  torchrun ``[default0]:``, slurm ``0: ``, timestamps, markdown ``> `` (several may stack);
  NCCL's own ``host:pid:tid`` prefix is searched for anywhere in the line, with redacted hosts
  (``[pod-name]``, ``<cluster_name>``);
- ANSI colour escapes, also when the ESC byte was lost (`` [36m``), Ray's
  ``[repeated 6x across cluster]``, markdown emphasis and backticks;
- hard line wraps inside PyTorch watchdog lines (a line cut mid-word continues on the next);
- CRLF, invalid UTF-8 (replaced), lines cut at 1023 bytes (they match no family: unknown);
- records torn by processes sharing one stream (see :class:`_Hosts` and :func:`_records`):
  a record cut by another process's whole record, its tail on the next line. The two halves
  are joined back when both are there, the record is dropped otherwise, and no fragment is
  ever taken as a host, a process or a value.

A line is never an error: it is read, or counted as unknown, or is not an NCCL line at all.
Every pattern is bounded (no nested quantifiers over a line), and only the first
``MAX_LINE`` characters of a line are looked at, so the time per line is bounded.
"""

from __future__ import annotations

import itertools
import re
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import BinaryIO

import polars as pl

from tracecomm.nccl.damage import too_large_count
from tracecomm.nccl.model import (
    COLL_SCHEMA,
    KEEP,
    KEPT_COLLS,
    NO_PROC,
    ChannelSummary,
    CommInit,
    NcclLog,
    PgRef,
    Proc,
    Tears,
    TestRank,
    Transport,
    VersionRecord,
    WarnRecord,
    WatchdogRecord,
)
from tracecomm.nccl.quote import quote

BLOCK = 8 << 20
MAX_LINE = 8192  # characters of one line that are parsed (NCCL's own lines stop at 1023 bytes)
OPS = (
    "AllGather|AllReduce|Broadcast|ReduceScatter|Reduce|Send|Recv|AlltoAll|Gather|Scatter|"
    "PutSignal|WaitSignal|Signal"
)

# --- Rust regexes (polars), run on every line of a block ---------------------------------
# Lines that may belong to a family we read: NCCL / RCCL output, PyTorch's ProcessGroupNCCL,
# the watchdog, its desync report, and the nccl-tests header.
_CANDIDATE = (
    r"NCCL|RCCL|[Ww]atchdog|Timeout at collective|joined but didn|join collective|"
    r"#\s+Rank\s+\d"
)
# Terminal and chat noise removed before anything is matched.
_NOISE = (
    r"\x1b\[[0-9;?]*[A-Za-z]|(?:^|[ \t])\[\d{1,3}(?:;\d{1,3})*m|[ \t]*\[repeated \d+x across "
    r"cluster\]|\*\*|`"
)
# What a cut record leaves before the next record's prefix: a partial prefix cut after a space
# (``host:pid:tid [3] ``, ``… [3] NCCL ``), text run into a launcher tag or into the host
# (``[3]n136-…``, ``host:n136-…``; a tag's ``>:`` and ``]:`` are no such text). Such a line is
# read the Python way.
_PARTIAL_PREFIX = (
    r":\d{1,10}:\d{1,10} .*:\d{1,10}:\d{1,10}|NCCL|\S\[\d{1,9},\d{1,9}\]<|\][^\s:<]"
    r"|[^\s>\]]:[^\s:\[\]<>]+:\d{1,10}:\d{1,10}(?: \[\d+\])?$"
)
_HEAD = (  # the part of a COLL line before " NCCL INFO "
    r"(?P<host>\[[^\s\[\]]+\]|<[^\s<>]+>|[^\s:\[\]<>]+):(?P<pid>\d{1,10}):\d{1,10}"
    r"(?: \[\d+\])?$"
)

# --- Python regexes ------------------------------------------------------------------------
_HOST = r"\[[^\s\[\]]{1,128}\]|<[^\s<>]{1,128}>|[\w.%/\-]{1,253}"
# A host starts a token (the look-behind keeps the scan linear: one try per token). A bracket
# may stand before it: the tail of a cut record (``[nranks=1``) glued to the next record's host.
# The prefix of an NCCL record, found anywhere in a line (a paste may glue several records
# into one line: each runs to the next prefix). The host may be redacted to nothing.
_LINE = re.compile(
    rf"(?<![\w.%/\-])({_HOST})?:(\d{{1,10}}):(\d{{1,10}}) (?:\[\d{{1,5}}\] )?"
    r"(?:[\d.]{1,32} )?(?:(\S{1,512}:\d{1,7})(?: \([^()]{0,256}\))? )?"
    r"NCCL (INFO|WARN|CALL|TRACE|ABORT)(?= |$) ?"
)
_RECORDS_PER_LINE = 64
_PREFIXLESS = re.compile(r"(?:^|\s)NCCL (INFO|WARN) (.*)$")  # prefixes stripped by the user
_HOST_ONLY = re.compile(_HOST)
# a launcher tag written in front of a record that was glued to another record's head
_TRAILING_TAG = re.compile(r"(?:\[\d{1,9},\d{1,9}\]<(?:stdout|stderr)>:|\[default\d{1,9}\]:)$")
_COLL = re.compile(
    rf"^({OPS}): opCount ([0-9a-fA-F]{{1,15}}) sendbuff \S{{1,32}} recvbuff \S{{1,32}} "
    r"count (\d{1,18}) datatype (\d{1,6}) op (\d{1,6}) root (-?\d{1,10}) comm (\S{1,32}) "
    r"\[nranks=(\d{1,9})\] stream \S{1,32}$"
)
_COLL_START = re.compile(rf"^(?:{OPS})(?::$|: opCount)")  # a COLL message, maybe cut short
_OP_NAMES = OPS.split("|")
_LAUNCHER = re.compile(
    r"^[ \t]*(?:"
    r"\[(?P<job>\d{1,9}),(?P<mpi>\d{1,9})\]<(?:stdout|stderr)>:"  # mpirun --tag-output
    r"|\[default(?P<torchrun>\d{1,9})\]:"  # torchrun --tee / --role
    r"|\((?P<ray>[\w.\-]{1,128}) pid=(?P<raypid>\d{1,10})(?:, ip=[^)\s]{0,64})?\)"  # Ray
    r"|(?P<slurm>\d{1,6}): "  # srun --label
    r"|\[?\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d{1,9})?(?:Z|[+-]\d\d:?\d\d)?\]?"  # stamps
    r"|>"  # markdown quote
    r"|(?P<pdsh>[\w.\-]{1,253}): (?=\S)"  # pdsh / pssh ``host: ``
    r")[ \t]*"
)
_VERSION = re.compile(
    r"(?:^|[\s:>\]])(NCCL|RCCL) version\s{0,8}:?\s{0,8}"
    r"(\d{1,4}\.\d{1,4}(?:\.\d{1,6})?[\w.+\-:]{0,64})\s*$"
)
_TORCH_ENV = re.compile(r"ProcessGroupNCCL environments:\s*NCCL version:\s*(\d[\w.+\-]{0,64})")
_TORCH_OPTIONS = re.compile(
    r"ProcessGroupNCCL initialization options:\s*size:\s*(\d{1,9}),\s*global rank:\s*(\d{1,9})"
)
_TEST_RANK = re.compile(
    r"#\s+Rank\s+(\d{1,9})\s+Group\s+\d{1,9}\s+Pid\s+(\d{1,10})\s+on\s+(\S{1,253})\s+"
    r"device\s+(\d{1,5})"
)
_STAMP = re.compile(r"\[(\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d[^\]]{0,32})\]")

_INIT = re.compile(
    r"^(?:\[Rank \d+\] )?(?:(?P<api>nccl\w{1,64}) )?comm (?P<comm>0x[0-9a-fA-F]{1,16}|\(nil\)) "
    r"rank (?P<rank>\d{1,9}) nranks (?P<nranks>\d{1,9}) cudaDev (?P<cuda>\d{1,5})"
    r"(?: nvmlDev (?P<nvml>\d{1,5}))?(?: busId (?P<bus>[0-9a-fA-F]{1,16}))?"
    r"(?: parent (?P<parent>\S{1,32}) color (?P<color>-?\d{1,10}) key -?\d{1,10}"
    r"(?: (?:splitCount|childCount) \d{1,10})?)?(?: commId (?P<commid>0x[0-9a-fA-F]{1,32}))? ?"
    r"(?:- Init (?P<state>START|COMPLETE)|$)"
)
_OLD_INIT = re.compile(r"^rank (\d{1,9}) nranks (\d{1,9})\s*$")  # NCCL 2.3
_NODES = re.compile(
    r"^comm \S{1,32} rank \d{1,9} nRanks \d{1,9} nNodes (\d{1,9}) localRanks (\d{1,9})"
)
_CHANNELS = re.compile(
    r"^(\d{1,5}) coll channels, (?:(\d{1,5}) collnet channels, )?(?:(\d{1,5}) nvls channels, )?"
    r"(\d{1,5}) p2p channels, (\d{1,5}) p2p channels per peer"
)
_TRANSPORT = re.compile(
    r"^(?:Channel|Ring) (\d{1,5})(?:/\d{1,5})? : (\d{1,9})(?:\[[0-9a-fA-F]{1,16}\])? -> "
    r"(\d{1,9})(?:\[[0-9a-fA-F]{1,16}\])? (?:\[(send|receive)\] )?via (\S.{0,256}?)\s*$"
)
_COLLNET = re.compile(
    r"^CollNet (\d{1,5})(?:/\d{1,5})? : (\d{1,9}) \[?(send|receive)\]? via (\S.{0,256}?)\s*$"
)
_GRAPH = re.compile(
    r"^(?:Channel \d+/\d+ :|Ring \d+ :|Trees? |NVLS Trees|(?:Connected )?Collnet Chains)"
)
_UNWIND = re.compile(r"^\S{1,512}:\d{1,7}(?: \([^()]{0,256}\))? -> \d")
_TUNING = re.compile(
    rf"^(?:({OPS})(?: \[[^\]]{{1,64}}\])?: )?(\d{{1,20}}) Bytes -> "
    r"(?:Algo (\S{1,32}) proto (\S{1,32})|Kernel (\S{1,128}))"
)
_KNOWN = re.compile(
    r"^(?:NCCL version|cudaDriverVersion|NCCL_\w+ set by|Init timings|Setting affinity|"
    r"P2P Chunksize|Comm config|CC |RAS |threadThresholds|Pattern |=== System|\s*\+ |\s+\d+ : |"
    r"=+|NVLS comm|Connected |Bootstrap ?:|NET/Plugin ?:|\w+/Plugin ?:|Plugin load|"
    r"GPU Direct RDMA|comm \S+ rank \d+ nranks \d+ cudaDev \d+ busId \S+ - (?:Destroy|Abort)|"
    r"NCCL git version|NET/Socket ?:|Using network|Using internal [Nn]etwork|NET/IB ?:|"
    r"NVLS multicast|Channel |Ring |Trees|Tree |NVLS Trees|(?:Connected )?Collnet|CollNet |"
    r"NET ?: |NET/\w+ ?:|CUDA Dev |Kernel version|ROCr version|HIP version|Dmabuf |"
    r"Using non-device net plugin|Failed to open libibverbs|Attribute \w+ of node|CPU/|GPU/|"
    r"NET/\d|NIC/|PCI/|MNNVL |\[node_id|comm \S+ rank \d+ nRanks|rank \d+ nranks \d+|"
    r"Could not |Loaded |Using \w+ plugin|Trying to load|NCCL_\w+ |Enabled |Disabled |"
    r"ncclCommInitRank|ncclCommSplit|ncclCommInit|Assigned NET plugin|Check P2P Type|"
    r"Profiler|Tuner|Inspector)"
)
_IB_USING = re.compile(r"^NET/IB ?: ?(?:Using \[|Using interface|\[\d+\] )")
_NO_IB_DEVICE = re.compile(r"^NET/IB ?: ?No device found")
_NETWORK = re.compile(r"^Using (?:internal )?[Nn]etwork (\S.{0,128}?)\s*$")
_IB_DISABLE = re.compile(r"^NCCL_IB_DISABLE set by environment to (\d+)")
_SOCKET_IFACES = re.compile(r"\[\d{1,3}\]([\w.\-@]{1,64}):")

# Message families of a WARN and what NCCL means by them. A notice (the first four kinds)
# says a feature is absent and NCCL carries on without it: info, never an error.
WARN_KINDS = (
    (
        "collnet_unsupported",
        re.compile(r"CollNet is not supported|ncclCollNetPlugin|CollNet.{0,40}not"),
    ),
    (
        "no_net_plugin",
        re.compile(r"No plugin found|Plugin load returned|dlerror|Could not find: lib"),
    ),
    ("no_ibverbs", re.compile(r"Failed to open libibverbs")),
    ("nvls_unsupported", re.compile(r"NVLS.{0,40}not (?:supported|available)")),
    ("size_mismatch", re.compile(r"collective mismatch error")),
    ("ib_completion", re.compile(r"NET/IB ?: ?Got completion")),
    ("ib_verbs", re.compile(r"NET/IB ?: ?Got async event|Call to ibv_")),
    ("bootstrap", re.compile(r"Bootstrap|bootstrap")),
    ("socket", re.compile(r"socketProgress|Connection closed|Net : |message truncated")),
    ("cuda", re.compile(r"Cuda failure|CUDA error")),
    ("version_mismatch", re.compile(r"Mismatched NCCL version")),
    ("proxy", re.compile(r"Proxy Call|\[Service thread\]|\[Proxy Thread\]|Proxy Service")),
)

# --- PyTorch ProcessGroupNCCL (§11) -------------------------------------------------------
_WD_MARKER = re.compile(
    r"Watchdog caught collective operation timeout|detected by watchdog at work|"
    r"Timeout at NCCL work|Timeout at collective|Received a dump signal due to a collective|"
    r"watchdog got stuck|joined but didn't finish|(?:didn't|did not) join collective"
)
_GRANK = re.compile(r"\[rank(\d{1,9})\]:")
_PG_TAG = re.compile(
    r"\[(?:PG ID (?P<id>[^\s\]()]{1,64}) PG GUID (?P<guid>[^\s\]()]{1,256})"
    r"(?:\((?P<gdesc>[^()\]]{0,256})\))?|PG (?P<name>[^\s\]()]{1,256})"
    r"(?: \((?P<desc>[^()\]]{0,256})\))?)\s?Rank (?P<rank>\d{1,9})\]"
)
_PLAIN_TAG = re.compile(r"\[Rank (\d{1,9})\]")
_WORK = re.compile(r"WorkNCCL\(((?:[^()]|\([^()]{0,16}\)){0,4000})\)")
_WORK_OPEN = re.compile(r"WorkNCCL\([^)]{0,4000}$")
_KV = re.compile(r"(\w{1,32}(?:\(ms\))?)=(\[[^\]]{0,2000}\]|[^,]{0,64})")
_RAN = re.compile(r"ran\s?for\s?(\d{1,18})\s?milli")
_NUM = r"(-?\d{1,18})(?!\d)"
_AT_SEQ = re.compile(
    r"(?:at\s?work(?:\s?sequence\s?id)?|Timeout\s?at\s?NCCL\s?work)\s?:\s?" + _NUM, re.I
)
_ENQ = re.compile(r"last\s?enqueued\s?(?:NCCL\s?)?work\s?:\s?" + _NUM, re.I)
_STARTED = re.compile(r"last\s?started\s?(?:NCCL\s?)?work\s?:\s?" + _NUM, re.I)
_DONE = re.compile(r"last\s?completed\s?(?:NCCL\s?)?work\s?:\s?" + _NUM, re.I)
_DESYNC_AT = re.compile(r"Timeout at collective\s?:\s?(\w{1,64})\s?,\s?#(\d{1,18})(?!\d)")
_JOINED = re.compile(r"\[([\d,\s]{0,20000})\]\s?joined but didn't finish")
_MISSING = re.compile(r"\[([\d,\s]{0,20000})\]\s?(?:didn't|did not) join")
_DESYNC_SEQ = re.compile(r"collective #(\d{1,18})(?!\d)")
_STUCK = re.compile(r"watchdog got stuck for (\d{1,12}) seconds")
# a line that starts a record of its own (never the continuation of a wrapped line)
_RECORD_START = re.compile(
    r"^\s*(?:\[rank\d+\]:|\[[EWIF][\d ]|[EWIF]\d{4} |\(\w[\w.\-]* pid=|\[\d+,\d+\]<|"
    r"\S+:\d+:\d+ \[\d+\]|#\d+ |\[PG |\[Rank |Traceback|File \")"
)
_WRAPS = 3  # continuation lines a wrapped watchdog line may take
_COMPLETE_END = re.compile(r"(?:\d|timing out|\)|seconds|monitoring enqueued collectives)\.?\s*$")


# A host name this many times as frequent as another that ends it, or that it ends, is the
# real one and the other a fragment: every line of a process carries the real name, a torn
# record makes a fragment once.
_DOMINANT = 4
_MAX_HOSTS = 65_536  # distinct names counted (a hostile log may invent one per line)
_HOST_CHARS = 253  # the longest name a prefix can hold (_HOST)
_MAX_PAIRS = 1 << 20  # (host, pid) pairs remembered
_OWN_LINES = 8  # lines a process prints before its name can be no fragment
_LEADERS = 64  # the most frequent names, against which a name is checked for being a tail


@dataclass
class _Hosts:
    """How often each host name starts a line, and with which pids: the evidence that tells a
    host from a fragment. When another process's record cuts a record, the cut head runs into
    the next record's host (``0x7f33f4030n136-081-017``), and a cut inside the host leaves a
    tail line that starts with the name's last characters (``81-017:4123:4123 [3] …``). A
    fragment is rare next to the real name, and its pid is a pid of the real name's: the next
    record's (a glued head) or the cut record's (a tail), on a line or two. Two real hosts of
    which one's name ends with the other's have processes of their own."""

    counts: Counter[str] = field(default_factory=Counter)
    procs: Counter[tuple[str, int]] = field(default_factory=Counter)  # (host, pid) -> lines
    _leaders: list[tuple[str, int]] = field(default_factory=list)
    _memo: dict[str, str | None] = field(default_factory=dict)

    def add(self, seen: Iterable[tuple[str, int, int]]) -> None:
        """(host, pid, lines) of a block."""
        for host, pid, n in seen:
            if host in self.counts or len(self.counts) < _MAX_HOSTS:
                self.counts[host] += n
            if (host, pid) in self.procs or len(self.procs) < _MAX_PAIRS:
                self.procs[(host, pid)] += n
        self._leaders = self.counts.most_common(_LEADERS)
        self._memo.clear()

    def resolve(self, name: str, pid: int) -> str | None:
        """The host a prefix (``name:pid:…``) names: the name itself, the real host it ends
        with when a cut record's head is glued in front of it, or None when it is the tail of a
        real name. A process of its own (many lines, a pid the real name's host does not
        have) keeps its name."""
        named = self.named(name)
        if named == name:
            return name
        own = self.procs.get((name, pid), 0) >= _OWN_LINES
        if named is not None:
            return name if own and (named, pid) not in self.procs else named
        tail_of = [
            leader for leader, _ in self._leaders if leader.endswith(name) and leader != name
        ]
        return name if own and all((leader, pid) not in self.procs for leader in tail_of) else None

    def named(self, name: str) -> str | None:
        """What the name alone suggests, whatever the pid: itself, the far more frequent real
        name it ends with, or None when a far more frequent name ends with it."""
        if name not in self._memo:
            if len(self._memo) >= _MAX_HOSTS:
                self._memo.clear()
            self._memo[name] = self._named(name)
        return self._memo[name]

    def _named(self, name: str) -> str | None:
        floor = _DOMINANT * max(self.counts.get(name, 0), 1)
        for i in range(1, len(name)):  # the longest real name it ends with
            if self.counts.get(name[i:], 0) >= floor and self.named(name[i:]) == name[i:]:
                return name[i:]  # (a name itself glued to a real one is no real name)
        for leader, n in self._leaders:
            if n < floor:
                break
            if len(leader) > len(name) and leader.endswith(name):
                return None
        return name


@dataclass
class _State:
    """What one stream carries from block to block."""

    open_warns: dict[tuple[str, int, int], int] = field(default_factory=dict)
    pending: str | None = None  # a wrapped watchdog line waiting for its continuation
    pending_launcher: str | None = None
    pending_joined: int = 0  # continuation lines it already took
    hosts: _Hosts = field(default_factory=_Hosts)
    tears: Tears = field(default_factory=Tears)
    torn_head: str | None = None  # a cut record ending a block: the next may start with its tail
    torn_certain: bool = False  # it ran into the next record (else it may be other text)
    coll_rows: list[tuple[object, ...]] = field(default_factory=list)  # COLL records read in Python


def read_logs(paths: Iterable[Path | str]) -> NcclLog:
    log = NcclLog()
    for path in paths:
        with open(path, "rb") as handle:
            parse_stream(handle, log)
        log.paths.append(str(path))
    return log


def parse_text(text: str, log: NcclLog | None = None) -> NcclLog:
    log = log or NcclLog()
    state = _State()
    _parse_block(text.replace("\r", ""), log, state)
    _flush(log, state)
    return log


def parse_stream(handle: BinaryIO, log: NcclLog, block_size: int = BLOCK) -> None:
    state = _State()
    for block in blocks(handle, block_size):
        _parse_block(block, log, state)
    _flush(log, state)


def blocks(handle: BinaryIO, size: int = BLOCK) -> Iterator[str]:
    """Text blocks cut after a line end; invalid UTF-8 replaced, CR dropped. A line longer than
    a block is cut (its head is kept: no line is ever read whole into memory)."""
    rest = b""
    while chunk := handle.read(size):
        chunk = rest + chunk
        cut = chunk.rfind(b"\n") + 1
        if cut == 0:
            # one line longer than a block: its head is kept, the rest dropped
            rest = chunk[: MAX_LINE * 4] if len(chunk) > size else chunk
            continue
        rest = chunk[cut:]
        yield chunk[:cut].decode("utf-8", "replace").replace("\r", "")
    if rest:
        yield rest.decode("utf-8", "replace").replace("\r", "")


def _parse_block(text: str, log: NcclLog, state: _State) -> None:
    lines = pl.Series("line", text.split("\n"), dtype=pl.String)
    n = len(lines) - (1 if text.endswith("\n") else 0)
    log.lines += n
    skip_to = -1
    if state.pending is not None:
        skip_to = _continue_pending(lines, n, log, state)
    wanted = lines.str.contains(_CANDIDATE)
    index = wanted.arg_true()
    cand = lines.filter(wanted).str.slice(0, MAX_LINE).str.replace_all(_NOISE, "")
    parts = cand.str.split_exact(" NCCL INFO ", 1).struct.unnest()
    head = parts["field_0"].str.extract_groups(_HEAD).struct.unnest()
    # one record prefix, nothing of another before it: no torn record on the line
    prefixes = cand.str.count_matches(" NCCL ", literal=True)  # (a version line has two)
    single = (prefixes <= 1) & ~parts["field_0"].str.contains(_PARTIAL_PREFIX).fill_null(False)
    # the host of each line's first prefix: on a line with a torn record, the cut record's own
    procs = head.select("host", pid=pl.col("pid").cast(pl.Int64, strict=False)).drop_nulls()
    procs = procs.filter(pl.col("host").str.len_chars() <= _HOST_CHARS)
    state.hosts.add(procs.group_by("host", "pid").len().iter_rows())
    if state.torn_head is not None and n > 0:
        skip_to = max(skip_to, _continue_torn(log, state, _clean(lines[0])))
    trusted = head["host"].is_in(_trusted_hosts(state.hosts, head["host"].unique().drop_nulls()))
    colls, ok = _coll_frame(cand, parts, head, single & trusted)
    _keep_colls(log, colls)
    log.nccl_lines += colls.height
    _count_procs(log, colls)
    rest = ~ok
    for at, line in zip(index.filter(rest).to_list(), cand.filter(rest).to_list(), strict=True):
        if at <= skip_to:
            continue
        skip_to = max(skip_to, _line(log, state, line, lines, at, n))
    _flush_colls(log, state)


def _trusted_hosts(hosts: _Hosts, names: pl.Series) -> list[str]:
    """The names a COLL line may take the fast way with: real hosts, printable as they are."""
    return [
        name
        for name in names.to_list()
        if _HOST_ONLY.fullmatch(name) is not None  # first: it bounds the name's length
        and quote(name, 128) == name
        and hosts.named(name) == name  # not even a suspect: else read the Python way
    ]


def _count_procs(log: NcclLog, colls: pl.DataFrame) -> None:
    """Every process that wrote a COLL line the fast way is a process of the log."""
    for host, pid, lines in colls.group_by("host", "pid").len().iter_rows():
        log.procs[(host, pid)] += lines
        log.proc_files.setdefault((host, pid), len(log.paths))


def _flush_colls(log: NcclLog, state: _State) -> None:
    if state.coll_rows:
        _keep_colls(log, pl.DataFrame(state.coll_rows, schema=COLL_SCHEMA, orient="row"))
        state.coll_rows.clear()


def _keep_colls(log: NcclLog, colls: pl.DataFrame) -> None:
    """A block's COLL records: kept as columns up to KEPT_COLLS, the rest counted, and their
    buffers checked alone (a record past any device's memory is damaged wherever it is)."""
    room = max(0, KEPT_COLLS - log.coll_kept)
    kept, rest = colls.head(room), colls.slice(room)
    if kept.height:
        log.coll_frames.append(kept)
        log.coll_kept += kept.height
    log.coll_records += colls.height
    if rest.height:
        log.unkept_too_large += too_large_count(rest)


def _flush(log: NcclLog, state: _State) -> None:
    if state.pending is not None:
        _watchdog_line(log, state.pending, state.pending_launcher)
        state.pending = None
    if state.torn_head is not None:  # the log ends before its tail
        state.torn_head = None
        state.tears.torn += state.torn_certain
    if state.tears.torn:
        log.tears[len(log.paths)] = replace(state.tears)


def _continue_pending(lines: pl.Series, n: int, log: NcclLog, state: _State) -> int:
    """The first lines of a block that continue a watchdog line cut by the previous block."""
    assert state.pending is not None
    text, at = state.pending, -1
    for i in range(min(_WRAPS - state.pending_joined, n)):
        if not _incomplete(text) or len(text) >= MAX_LINE:
            break
        nxt = _clean(lines[i])
        if _starts_record(nxt):
            break
        text, at = text + nxt, i
    _watchdog_line(log, text, state.pending_launcher)
    state.pending = None
    return at


def _starts_record(line: str) -> bool:
    """A line that is a record of its own, never the continuation of a wrapped line."""
    return (
        not line
        or _RECORD_START.match(line) is not None
        or _LINE.search(line) is not None
        or _WD_MARKER.search(line) is not None
    )


_NOISE_PY = re.compile(_NOISE)


def _clean(line: str) -> str:
    line = line[:MAX_LINE]
    return (
        _NOISE_PY.sub("", line)
        if ("\x1b" in line or "[" in line or "*" in line or "`" in line)
        else line
    )


# COLL line tokens after "NCCL INFO ": Op: opCount X sendbuff X recvbuff X count N datatype N
# op N root N comm X [nranks=N] stream X
_COLL_FIELDS = {1: "opCount", 3: "sendbuff", 5: "recvbuff", 7: "count", 9: "datatype"}


def _coll_frame(
    lines: pl.Series, parts: pl.DataFrame, head: pl.DataFrame, whole: pl.Series
) -> tuple[pl.DataFrame, pl.Series]:
    """COLL lines as columns, split in Rust (they can be millions), and which of ``lines`` they
    are: lines cut short, of another shape, holding a torn record or naming no real host
    (``whole`` false) go the Python way."""
    is_coll = lines.str.contains(": opCount ", literal=True)
    msg = parts["field_1"].str.split_exact(" ", 18).struct.unnest()
    frame = pl.DataFrame(
        {
            "host": head["host"],
            "pid": head["pid"].cast(pl.Int64, strict=False),
            "op": msg["field_0"].str.strip_suffix(":"),
            "op_count": msg["field_2"].str.to_integer(base=16, strict=False),
            "count": msg["field_8"].cast(pl.Int64, strict=False),
            "datatype": msg["field_10"].cast(pl.Int64, strict=False),
            "redop": msg["field_12"].cast(pl.Int64, strict=False),
            "root": msg["field_14"].cast(pl.Int64, strict=False),
            "comm": msg["field_16"],
            "nranks": msg["field_17"]
            .str.strip_prefix("[nranks=")
            .str.strip_suffix("]")
            .cast(pl.Int64, strict=False),
        },
        schema=COLL_SCHEMA,
    )
    shape = pl.all_horizontal(msg[f"field_{i}"] == word for i, word in _COLL_FIELDS.items())
    ok = (
        frame.select(
            (
                shape.fill_null(False)
                & pl.all_horizontal(pl.all().is_not_null())
                & pl.col("op").is_in(_OP_NAMES)
            ).alias("ok")
        )["ok"]
        & is_coll
        & whole
    )
    return frame.filter(ok), ok


def _int_or_none(text: str | None) -> int | None:
    return int(text) if text else None


def split_launcher(line: str) -> tuple[str | None, str, int | None]:
    """(launcher tag, the rest, the rank the launcher names): up to four stacked prefixes."""
    tags: list[str] = []
    rank: int | None = None
    for _ in range(4):
        m = _LAUNCHER.match(line)
        if m is None or m.end() == 0:
            break
        g = m.groupdict()
        if g["mpi"] is not None:
            tags.append(f"mpirun rank {g['mpi']}")
            rank = int(g["mpi"])
        elif g["slurm"] is not None:
            tags.append(f"task {g['slurm']}")
            rank = int(g["slurm"]) if rank is None else rank
        elif g["torchrun"] is not None:
            tags.append(f"local rank {g['torchrun']}")
        elif g["raypid"] is not None:
            tags.append(f"pid {g['raypid']}")
        elif g["pdsh"] is not None:
            tags.append(g["pdsh"])
        line = line[m.end() :]
    return (quote(", ".join(tags), 120) if tags else None), line, rank


def _line(log: NcclLog, state: _State, line: str, lines: pl.Series, at: int, n: int) -> int:
    """Read one candidate line; returns the index of the last block line it consumed."""
    heads = list(itertools.islice(_LINE.finditer(line), _RECORDS_PER_LINE))
    if heads:
        return _records(log, state, line, heads, lines, at, n)
    if "NCCL INFO" in line or "NCCL WARN" in line:
        p = _PREFIXLESS.search(line)
        if p is not None:
            log.nccl_lines += 1
            _dispatch(log, state, NO_PROC, 0, None, p.group(1), p.group(2), line)
            return at
    launcher, rest, launcher_rank = split_launcher(line)
    if "version" in rest:
        v = _VERSION.search(rest)
        if v is not None:
            log.nccl_lines += 1
            library, version = v.groups()
            source = "banner" if " :" in rest[v.start() : v.end()] else "bare"
            _version(
                log, VersionRecord(version, library, source, rank=launcher_rank, line=quote(line))
            )
            return at
    if _WD_MARKER.search(rest) is not None:
        return _watchdog_start(log, state, rest, launcher, lines, at, n)
    if "ProcessGroupNCCL" in rest:
        log.nccl_lines += 1
        _torch_info(log, rest)
        return at
    t = _TEST_RANK.search(rest)
    if t is not None:
        log.nccl_lines += 1
        rank, pid, host, dev = t.groups()
        if len(log.test_ranks) < KEEP:
            log.test_ranks.append(TestRank(int(rank), int(pid), quote(host, 128), int(dev)))
    return at


@dataclass(frozen=True)
class _Head:
    """A record prefix found in a line, and the host it really names."""

    match: re.Match[str]
    start: int  # where its record starts: the real host, or a launcher tag written before it
    host: str | None  # "" when the prefix names none; None when the name is a fragment
    glued: bool  # text runs into it without a space: the record before it was cut


def _head(hosts: _Hosts, line: str, m: re.Match[str]) -> _Head:
    name = m.group(1) or ""
    host = hosts.resolve(name, int(m.group(2))) if name else ""
    start = m.start() + len(name) - len(host) if host else m.start()
    window = max(0, start - 48)
    if (tag := _TRAILING_TAG.search(line[window:start])) is not None:
        start = window + tag.start()
    return _Head(m, start, host, start > 0 and not line[start - 1].isspace())


def _records(
    log: NcclLog,
    state: _State,
    line: str,
    matches: list[re.Match[str]],
    lines: pl.Series,
    at: int,
    n: int,
) -> int:
    """The records of a line. A record that another process's record cut (the next prefix
    runs into it, or its message is empty or a COLL message cut short) is never read as it
    stands: the cut record just before the line's last record is joined with the next line
    when that is its tail, every other cut record is dropped."""
    heads = [_head(state.hosts, line, m) for m in matches]
    lead = line[: heads[0].start]
    # a cut record's head before the first prefix: certain when it ran into the host's name
    cut, certain = lead, heads[0].start > heads[0].match.start() and heads[0].host is not None
    if not certain and (p := _PREFIXLESS.search(lead)) is not None:
        log.nccl_lines += 1  # a record whose prefix was cut off, glued before the others
        _dispatch(log, state, NO_PROC, 0, None, p.group(1), p.group(2), p.group(0))
        cut = ""
    for i, h in enumerate(heads):
        nxt = heads[i + 1] if i + 1 < len(heads) else None
        end = nxt.start if nxt is not None else len(line)
        msg = line[h.match.end() : end]
        if nxt is not None and _was_cut(nxt, msg):
            state.tears.torn += certain  # the record before this one, cut, is dropped
            cut, certain = line[h.start : end], True
            continue
        if h.host is None:
            continue  # the tail of a real host's name: the rest of a record whose head is lost
        record = line if len(heads) == 1 else line[h.start : end].rstrip()
        _read_record(log, state, h.match, h.host, msg, record)
    if not split_launcher(cut)[1].strip():
        return at  # nothing before the first record but a launcher's tag
    return _recover(log, state, cut, certain, lines, at, n)


def _was_cut(nxt: _Head, msg: str) -> bool:
    """Whether the record before ``nxt`` (its message ``msg``) was cut by it."""
    text = msg.strip()
    return (
        nxt.glued
        or nxt.host is None
        or not text
        or (_COLL_START.match(text) is not None and _COLL.match(text) is None)
    )


def _read_record(
    log: NcclLog, state: _State, m: re.Match[str], host: str, msg: str, record: str
) -> None:
    _, pid, tid, src, level = m.groups()
    proc = (quote(host, 128) if host else "?", int(pid))
    log.nccl_lines += 1
    log.procs[proc] += 1
    log.proc_files.setdefault(proc, len(log.paths))  # the file being read
    _dispatch(log, state, proc, int(tid), src, level, msg, record)


def _recover(
    log: NcclLog, state: _State, cut: str, certain: bool, lines: pl.Series, at: int, n: int
) -> int:
    """Join a cut record with the next line when that is its tail; returns the last line
    consumed. A cut record that ends a block waits for the next block's first line."""
    if at + 1 == n and n == len(lines) - 1:
        state.torn_head, state.torn_certain = cut, certain
        return at
    joined = at + 1 < n and _join(log, state, cut, _clean(lines[at + 1]))
    state.tears.torn += certain or joined
    state.tears.recovered += joined
    return at + 1 if joined else at


def _continue_torn(log: NcclLog, state: _State, tail: str) -> int:
    """The first line of a block, when it is the tail of a record cut at the previous end."""
    assert state.torn_head is not None
    joined = _join(log, state, state.torn_head, tail)
    state.tears.torn += state.torn_certain or joined
    state.tears.recovered += joined
    state.torn_head = None
    return 0 if joined else -1


def _join(log: NcclLog, state: _State, cut: str, tail: str) -> bool:
    """Read ``cut + tail`` as one record when it is one: a prefix naming a real host at its
    start, no other prefix, a message that is whole; and the tail names no real host itself
    (then it is a record of its own)."""
    if not tail or any(
        m.group(1) and state.hosts.resolve(m.group(1), int(m.group(2))) == m.group(1)
        for m in itertools.islice(_LINE.finditer(tail), 4)
    ):
        return False
    _, rest, _ = split_launcher(cut + tail)
    m = _LINE.match(rest)
    if (
        m is None
        or not m.group(1)
        or state.hosts.resolve(m.group(1), int(m.group(2))) != m.group(1)
        or _LINE.search(rest, m.end()) is not None
    ):
        return False
    msg = rest[m.end() :].rstrip()
    if not msg or (": opCount " in msg and _COLL.match(msg) is None):
        return False
    _read_record(log, state, m, m.group(1), msg, rest)
    return True


def _version(log: NcclLog, record: VersionRecord) -> None:
    """``paths`` holds the files read before this one: its length is this file's index."""
    if len(log.versions) < KEEP:
        log.versions.append(replace(record, file=len(log.paths)))


def _torch_info(log: NcclLog, text: str) -> None:
    """ProcessGroupNCCL's own INFO lines: the environment dump (NCCL version) and the
    initialization options (PG size and global rank)."""
    grank = _GRANK.search(text)
    tag = _PG_TAG.search(text)
    pg, pg_rank = (_pg_ref(tag), int(tag.group("rank"))) if tag else (None, None)
    global_rank = int(grank.group(1)) if grank else None
    opts = _TORCH_OPTIONS.search(text)
    if opts is not None:
        global_rank = int(opts.group(2))
        if pg is not None and pg_rank is not None:
            log.pg_global[(pg.key, pg_rank)] = global_rank
    if global_rank is None and pg is not None and pg.is_default:
        global_rank = pg_rank  # the default group spans the world: its ranks are global
    if global_rank is not None:
        log.global_ranks_seen.add(global_rank)
    env = _TORCH_ENV.search(text)
    if env is not None:
        _version(
            log, VersionRecord(env.group(1), "NCCL", "torch", rank=global_rank, line=quote(text))
        )


def _incomplete(text: str) -> bool:
    return _WORK_OPEN.search(text) is not None or _COMPLETE_END.search(text) is None


def _watchdog_start(
    log: NcclLog, state: _State, text: str, launcher: str | None, lines: pl.Series, at: int, n: int
) -> int:
    """A watchdog line, joined with the lines a hard wrap cut it into (no separator: a wrap
    cuts mid-word). A wrap at the end of the block waits for the next block."""
    last = at
    while _incomplete(text) and last - at < _WRAPS and len(text) < MAX_LINE:
        if last + 1 >= n:
            if last + 1 == n and n == len(lines) - 1:  # the block ends here: wait for the next
                state.pending, state.pending_launcher = text, launcher
                state.pending_joined = last - at
                return last
            break
        nxt = _clean(lines[last + 1])
        if _starts_record(nxt):
            break
        text += nxt
        last += 1
    _watchdog_line(log, text, launcher)
    return last


def _watchdog_line(log: NcclLog, text: str, launcher: str | None) -> None:
    log.nccl_lines += 1
    log.watchdog_lines += 1
    record = _watchdog(text, launcher)
    if record.global_rank is not None:
        log.global_ranks_seen.add(record.global_rank)
    if len(log.watchdog) < KEEP:
        log.watchdog.append(record)


def _dispatch(
    log: NcclLog,
    state: _State,
    proc: Proc,
    tid: int,
    src: str | None,
    level: str,
    msg: str,
    line: str,
) -> None:
    host, pid = proc
    msg = msg.rstrip()
    if level == "WARN":
        kind = _warn_kind(msg)
        log.warn_counts[kind] += 1
        if kind == "no_ibverbs":
            log.signal(proc, "no_ibverbs", quote(line))
        if len(log.warns) < KEEP:
            stamp = _STAMP.search(line[: line.find(host)] if host in line else "")
            log.warns.append(
                WarnRecord(
                    host,
                    pid,
                    tid,
                    quote(src, 200) if src else None,
                    quote(msg),
                    kind,
                    stamp.group(1) if stamp else None,
                )
            )
            state.open_warns[(host, pid, tid)] = len(log.warns) - 1
        return
    if level != "INFO":
        return  # CALL / TRACE lines: known, not used
    if ": opCount " in msg:
        _coll_record(log, state, proc, msg)
        return
    if _UNWIND.match(msg):
        at = state.open_warns.get((host, pid, tid))
        if at is not None and len(log.warns[at].unwinding) < 32:
            w = log.warns[at]
            log.warns[at] = WarnRecord(
                w.host,
                w.pid,
                w.tid,
                w.source,
                w.message,
                w.kind,
                w.stamp,
                (*w.unwinding, quote(msg, 200)),
            )
        return
    first = msg[:1]
    if first in "CR" and msg.startswith(("Channel ", "Ring ")):
        if (t := _TRANSPORT.match(msg)) is not None:
            _transport(log, proc, t, line)
        else:
            log.rings += 1
        return
    if (m := _INIT.match(msg)) is not None:
        if len(log.inits) < KEEP * 5:
            log.inits.append(_init(host, pid, m))
        return
    if (m := _CHANNELS.match(msg)) is not None:
        coll, collnet, nvls, p2p, per_peer = m.groups()
        last = next((i for i in reversed(log.inits[-64:]) if (i.host, i.pid) == proc), None)
        if len(log.channels) < KEEP:
            log.channels.append(
                ChannelSummary(
                    host,
                    pid,
                    (last.comm_id or f"{last.nranks} ranks") if last else None,
                    int(coll),
                    _int_or_none(collnet),
                    _int_or_none(nvls),
                    int(p2p),
                    int(per_peer),
                )
            )
        return
    if msg.startswith("NCCL version "):
        version = msg.split()[2] if len(msg.split()) > 2 else ""
        if re.match(r"\d{1,4}\.\d", version):
            _version(
                log, VersionRecord(quote(version, 80), "NCCL", "info", host, pid, line=quote(line))
            )
        return
    if (m := _NODES.match(msg)) is not None:
        nodes = int(m.group(1))
        log.nodes[proc] = (nodes, int(m.group(2)))
        log.signal(proc, "multi_node" if nodes > 1 else "single_node", quote(line))
        return
    if (m := _NETWORK.match(msg)) is not None:
        net = quote(m.group(1), 128)
        log.networks[proc] = net
        name = "socket_selected" if net == "Socket" else "fast_selected"
        log.signal(proc, name, quote(line))
        return
    if msg.startswith("NET/"):
        if _NO_IB_DEVICE.match(msg):
            log.signal(proc, "no_ib_device", quote(line))
        elif _IB_USING.match(msg):
            log.signal(proc, "ib_device", quote(line))
        elif msg.startswith(("NET/Socket : Using", "NET/Socket: Using")):
            log.socket_interfaces[proc] = tuple(
                quote(i, 64) for i in _SOCKET_IFACES.findall(msg)[:64]
            )
        if not _KNOWN.match(msg):
            log.unknown += 1
        return
    if msg.startswith("Failed to open libibverbs"):
        log.signal(proc, "no_ibverbs", quote(line))
        return
    if (m := _IB_DISABLE.match(msg)) is not None:
        if m.group(1) != "0":
            log.signal(proc, "ib_disabled", quote(line))
        return
    if msg.startswith("NVLS multicast support is "):
        log.nvls_support[host] = " not " not in msg
        return
    if (m := _COLLNET.match(msg)) is not None:
        via = m.group(4)
        _add_transport(
            log,
            Transport(
                host,
                pid,
                int(m.group(1)),
                int(m.group(2)),
                -1,
                m.group(3),
                quote(via, 200),
                "COLLNET",
                _net_name(via.removeprefix("COLLNET/")),
                "GDRDMA" in via,
            ),
        )
        return
    if (m := _TUNING.match(msg)) is not None:
        op, nbytes, algo, proto, kernel = m.groups()
        if len(log.tunings) < KEEP:
            log.tunings.append(
                (
                    host,
                    op or "",
                    int(nbytes),
                    quote(algo or kernel or "", 128),
                    quote(proto or "", 32),
                )
            )
        return
    if (m := _OLD_INIT.match(msg)) is not None:
        return
    if _GRAPH.match(msg):
        log.rings += 1
        return
    if not _KNOWN.match(msg):
        log.unknown += 1


def _coll_record(log: NcclLog, state: _State, proc: Proc, msg: str) -> None:
    """A COLL line the fast way did not take (a line of several records, a joined one)."""
    m = _COLL.match(msg)
    if m is None or proc == NO_PROC:  # cut short, or of no process: nothing to key it by
        log.unknown += 1
        return
    op, op_count, count, datatype, redop, root, comm, nranks = m.groups()
    state.coll_rows.append(
        (
            proc[0],
            proc[1],
            op,
            int(op_count, 16),
            int(count),
            int(datatype),
            int(redop),
            int(root),
            quote(comm, 32),
            int(nranks),
        )
    )


def _init(host: str, pid: int, m: re.Match[str]) -> CommInit:
    g = m.groupdict()
    return CommInit(
        host=host,
        pid=pid,
        comm=g["comm"],
        rank=int(g["rank"]),
        nranks=int(g["nranks"]),
        cuda_dev=int(g["cuda"]),
        nvml_dev=_int_or_none(g["nvml"]),
        bus_id=g["bus"],
        comm_id=g["commid"],
        api=g["api"],
        parent=g["parent"],
        color=int(g["color"]) if g["color"] else None,
        complete=g["state"] == "COMPLETE",
    )


def _transport(log: NcclLog, proc: Proc, m: re.Match[str], line: str) -> None:
    channel, src, dst, direction, via = m.groups()
    kind = "SHM" if via.startswith("direct shared memory") else via.split("/", 1)[0]  # ≤2.12
    net = _net_name(via[4:]) if kind == "NET" else None
    if net is not None:
        log.signal(proc, "socket_channel" if net == "Socket" else "fast_channel", quote(line))
    _add_transport(
        log,
        Transport(
            proc[0],
            proc[1],
            int(channel),
            int(src),
            int(dst),
            direction,
            quote(via, 200),
            quote(kind, 32),
            quote(net, 64) if net else None,
            "GDRDMA" in via,
        ),
    )


def _add_transport(log: NcclLog, t: Transport) -> None:
    log.transport_counts[f"{t.kind}/{t.net}" if t.net else t.kind] += 1
    if len(log.transports) < KEEP * 5:
        log.transports.append(t)


_NET = re.compile(r"^(.{1,128}?)/\d{1,5}(?:\(\d{1,9}\))?(?:/|$)")


def _net_name(rest: str) -> str:
    """``IB/3(12)/GDRDMA`` -> IB; plugin names may hold spaces and slashes: everything before
    the ``/<dev>`` part."""
    m = _NET.match(rest)
    return m.group(1) if m else rest.split("/", 1)[0]


def _warn_kind(message: str) -> str:
    for kind, pattern in WARN_KINDS:
        if pattern.search(message):
            return kind
    return "other"


def _pg_ref(tag: re.Match[str]) -> PgRef:
    g = tag.groupdict()
    return PgRef(
        id=quote(g["id"], 64) if g["id"] else None,
        guid=quote(g["guid"], 256) if g["guid"] else None,
        name=quote(g["name"], 256) if g["name"] else None,
        desc=quote(g["gdesc"] or g["desc"], 256) if (g["gdesc"] or g["desc"]) else None,
    )


def _ranks(text: str) -> tuple[int, ...]:
    return tuple(int(r) for r in re.findall(r"\d{1,9}", text)[:100_000])


def _watchdog(text: str, launcher: str | None) -> WatchdogRecord:
    """One watchdog record from a (re-joined) line: the global rank of the ``[rank<G>]:``
    prefix, the PG tag, the WorkNCCL descriptor and the seq numbers it names."""
    body = text[: MAX_LINE * 2]
    grank = _GRANK.search(body)  # a tqdm bar may be glued in front: searched, not matched
    tag = _PG_TAG.search(body)
    plain = _PLAIN_TAG.search(body)
    pg = _pg_ref(tag) if tag else None
    pg_rank = int(tag.group("rank")) if tag else (int(plain.group(1)) if plain else None)
    work: dict[str, str] = {}
    if (w := _WORK.search(body)) is not None:
        work = {k: v.strip() for k, v in _KV.findall(w.group(1))}
    if "Watchdog caught" in body:
        kind = "timeout"
    elif "failure detected by watchdog" in body:
        kind = "failure"
    elif "detected by watchdog at work" in body:
        kind = "exception"
    elif "Timeout at NCCL work" in body:
        kind = "timeout_at"
    elif "Received a dump signal" in body:
        kind = "dump_signal"
    elif "watchdog got stuck" in body:
        kind = "stuck"
    else:
        kind = "desync"
    seq = _num(work.get("SeqNum"))
    op = work.get("OpType") or None
    if seq is None and (m := _AT_SEQ.search(body)) is not None:
        seq = _num(m.group(1))
    if (d := _DESYNC_AT.search(body)) is not None:
        op = op or d.group(1)
        seq = seq if seq is not None else _num(d.group(2))
    if seq is None and kind == "desync" and (d2 := _DESYNC_SEQ.search(body)) is not None:
        seq = _num(d2.group(1))
    joined = _JOINED.search(body)
    missing = _MISSING.search(body)
    stuck = _STUCK.search(body)
    return WatchdogRecord(
        kind=kind,
        global_rank=int(grank.group(1)) if grank else None,
        pg=pg,
        pg_rank=pg_rank,
        seq=seq,
        op_type=quote(op, 64) if op else None,
        numel_in=_num(work.get("NumelIn")),
        numel_out=_num(work.get("NumelOut")),
        timeout_ms=_num(work.get("Timeout(ms)")),
        ran_ms=_first_num(_RAN, body)
        if kind != "stuck"
        else (int(stuck.group(1)) * 1000 if stuck else None),
        last_enqueued=_first_num(_ENQ, body),
        last_started=_first_num(_STARTED, body),
        last_completed=_first_num(_DONE, body),
        line=quote(body.strip()),
        launcher=launcher,
        joined_ranks=_ranks(joined.group(1)) if joined else (),
        missing_ranks=_ranks(missing.group(1)) if missing else (),
    )


def _num(text: str | None) -> int | None:
    if text is None or not re.fullmatch(r"-?\d{1,18}", text):
        return None
    return int(text)


def _first_num(pattern: re.Pattern[str], text: str) -> int | None:
    m = pattern.search(text)
    return int(m.group(1)) if m else None
