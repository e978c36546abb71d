"""Diagnostics from NCCL logs and Flight Recorder dumps: each a rule with its own test.

Records (parse.py) become findings here: a rule, a severity that follows what NCCL and
PyTorch mean by the lines (a notice is info, a fallback or a hang is an error), the ranks,
hosts and process group concerned, and the log lines that prove it.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Annotated, Literal

from msgspec import Meta

from tracecomm.doc import Doc, NonNegative
from tracecomm.nccl.damage import count_damaged
from tracecomm.nccl.flight import Divergence, FrDump, divergences
from tracecomm.nccl.model import (
    NO_PROC,
    NOTICE_KINDS,
    NcclLog,
    PgRef,
    Proc,
    VersionRecord,
    WatchdogRecord,
)
from tracecomm.text import compact_ranges

Severity = Literal["error", "warning", "info"]
EVIDENCE_LINES = 4  # log lines quoted per finding
MAX_TIMEOUT_FINDINGS = 32  # hang / desync findings listed (every group stays in the JSON)


class Diagnostic(Doc, frozen=True):
    rule: Annotated[
        str,
        Meta(
            description=(
                "transport_fallback, version_mismatch, fewer_channels, nvls, collnet, "
                "warn, hang, desync, watchdog_stuck"
            )
        ),
    ]
    severity: Severity
    message: str
    ranks: tuple[int, ...] = ()
    hosts: tuple[str, ...] = ()
    evidence: Annotated[
        tuple[str, ...],
        Meta(description="the log lines that prove the finding, control characters escaped"),
    ] = ()  # the log lines that prove it (control characters escaped)
    pg: Annotated[str | None, Meta(description="process group (hang, desync)")] = (
        None  # process group label (hang / desync)
    )
    seq: int | None = None
    op: str | None = None


class VersionSeen(Doc, frozen=True):
    """One NCCL / RCCL version and everyone the logs show running it."""

    version: Annotated[
        str, Meta(description="as printed: 2.19.3+cuda12.3, 2.21.5-HEAD:9a0e6a1, 2.20.5")
    ]
    library: str  # "NCCL" or "RCCL"
    hosts: tuple[str, ...]
    processes: Annotated[tuple[str, ...], Meta(description="host:pid")]  # host:pid
    ranks: Annotated[tuple[int, ...], Meta(description="global ranks")]  # global ranks
    sources: Annotated[
        tuple[str, ...],
        Meta(
            description=(
                "bare: the ≤2.21 line (rank 0 only); info: 2.22+ per process; torch: "
                "ProcessGroupNCCL's environment dump; banner: RCCL's"
            )
        ),
    ]
    files: Annotated[
        tuple[str, ...], Meta(description="the log files that print it (several logs read at once)")
    ] = ()  # the log files that print it


class RankTimeout(Doc, frozen=True):
    """What one rank's watchdog lines say about one stuck collective."""

    rank: int
    seq: int
    op_type: str | None
    numel_in: int | None
    numel_out: int | None
    timeout_ms: int | None
    ran_ms: int | None
    last_enqueued_seq: int | None
    last_started_seq: int | None
    last_completed_seq: int | None
    pg_inferred: Annotated[
        bool, Meta(description="the rank's lines name no group: joined to this one by its seq")
    ]


class PgTimeout(Doc, frozen=True):
    """The watchdog's view of one process group: where its ranks are stuck."""

    pg: Annotated[
        str,
        Meta(
            description=(
                "the group as the log names it (PG ID 2 PG GUID 9, PG 1), or 'process "
                "group not named in the log'"
            )
        ),
    ]
    pg_id: str | None
    pg_guid: str | None
    pg_name: str | None
    pg_desc: str | None
    seq: Annotated[int, Meta(description="the earliest stuck seq")]  # the earliest stuck seq
    op_type: str | None
    numel_in: int | None
    numel_out: int | None
    timed_out_ranks: tuple[int, ...]
    ranks_are_global: Annotated[
        bool, Meta(description="false: ranks within the group (the lines name no global rank)")
    ]
    ranks: tuple[RankTimeout, ...]  # every (rank, seq) reported, by rank then seq
    last_enqueued_seq: int | None
    last_completed_seq: int | None
    desync: Annotated[bool, Meta(description="ranks stuck at different seqs")]
    never_joined: tuple[int, ...]


class NcclSummary(Doc, frozen=True):
    """What the logs say about the job, and the diagnostics."""

    files: tuple[str, ...]
    lines: int
    nccl_lines: int
    unknown_lines: int
    processes: Annotated[
        int,
        Meta(
            description=(
                "distinct host:pid of NCCL lines, or distinct ranks of PyTorch lines when more"
            )
        ),
    ]
    hosts: tuple[str, ...]
    ranks: Annotated[dict[str, int], Meta(description="host:pid -> global rank")]
    versions: tuple[VersionSeen, ...]
    networks: Annotated[dict[str, list[str]], Meta(description="network -> hosts")]
    transports: dict[str, int]  # P2P / SHM / NET/IB / NET/Socket / COLLNET … -> connections
    colls: int  # COLL records, the damaged ones not counted
    warns: dict[str, int]  # kind -> count
    watchdog_events: int
    watchdog_timeouts: tuple[PgTimeout, ...]
    flight_recorder_dumps: int
    diagnostics: tuple[Diagnostic, ...]
    hang: tuple[Divergence, ...] = ()  # from Flight Recorder dumps
    torn_records: Annotated[
        NonNegative,
        Meta(description="records cut by another process writing to the same stream"),
    ] = 0
    torn_recovered: Annotated[
        NonNegative, Meta(description="torn records joined whole again with their tail")
    ] = 0
    damaged_records: Annotated[
        NonNegative,
        Meta(
            description=(
                "COLL records whose size cannot be (past any device's memory, or a count no "
                "other rank of the collective has): not counted in colls"
            )
        ),
    ] = 0
    colls_compared: Annotated[
        NonNegative,
        Meta(
            description=(
                "COLL records whose counts were compared across processes: every one up to "
                "1,000,000 (kept as columns), those past it checked for their size alone"
            )
        ),
    ] = 0


class NcclDocument(Doc, frozen=True):
    """`tracecomm nccl LOG... --format json`: the NCCL section alone, in its own envelope."""

    kind: Literal["tracecomm-nccl"]
    schema_version: Literal[2]  # doc.NCCL_SCHEMA_VERSION
    nccl: NcclSummary | None
    warnings: tuple[str, ...]


def global_ranks(log: NcclLog) -> dict[Proc, int]:
    """Each process's rank in the largest communicator it initialized (the world)."""
    best: dict[Proc, tuple[int, int]] = {}
    for init in log.inits:
        proc = (init.host, init.pid)
        if proc not in best or init.nranks > best[proc][0]:
            best[proc] = (init.nranks, init.rank)
    return {proc: rank for proc, (_, rank) in best.items()}


def summarize(log: NcclLog, dumps: Sequence[FrDump] = ()) -> NcclSummary:
    ranks = global_ranks(log)
    hang = divergences(dumps) if dumps else []
    groups = _watchdog_groups(log, ranks)
    timeouts = [t for t, _ in groups]
    diagnostics = [
        *transport_fallback(log, ranks),
        *version_mismatch(log, ranks, dumps),
        *fewer_channels(log, ranks),
        *nvls_and_collnet(log),
        *warn_summary(log, ranks),
        *_timeout_findings(groups),
        *watchdog_stuck(log),
        *(_fr_hang(d) for d in hang),
    ]
    networks: dict[str, set[str]] = defaultdict(set)
    for (host, _), net in log.networks.items():
        networks[net].add(host)
    procs = [p for p in log.procs if p != NO_PROC]
    # the kept records compared across processes, those past KEPT_COLLS only checked alone
    broken = count_damaged(log.colls, log.inits) + log.unkept_too_large
    watchdog_ranks = {_rank_of(w, log)[0] for w in log.watchdog} - {None}
    return NcclSummary(
        files=tuple(log.paths),
        lines=log.lines,
        nccl_lines=log.nccl_lines,
        unknown_lines=log.unknown,
        processes=max(len(procs), len(watchdog_ranks | log.global_ranks_seen)),
        hosts=tuple(sorted({h for h, _ in procs})),
        ranks={f"{h}:{p}": r for (h, p), r in sorted(ranks.items(), key=lambda x: (x[1], x[0]))},
        versions=versions_seen(log, ranks),
        networks={k: sorted(v) for k, v in sorted(networks.items())},
        transports=dict(log.transport_counts.most_common()),
        colls=log.coll_records - broken,
        warns=dict(log.warn_counts.most_common()),
        watchdog_events=log.watchdog_lines,
        watchdog_timeouts=tuple(timeouts),
        flight_recorder_dumps=len(dumps),
        diagnostics=tuple(diagnostics),
        hang=tuple(hang),
        torn_records=sum(t.torn for t in log.tears.values()),
        torn_recovered=sum(t.recovered for t in log.tears.values()),
        damaged_records=broken,
        colls_compared=log.coll_kept,
    )


def _who(procs: Iterable[Proc], ranks: dict[Proc, int]) -> tuple[tuple[int, ...], tuple[str, ...]]:
    procs = list(procs)
    return (
        tuple(sorted({ranks[p] for p in procs if p in ranks})),
        tuple(sorted({h for h, _ in procs if (h, _) != NO_PROC})),
    )


def _ranges(numbers: Iterable[int]) -> str:
    return compact_ranges(numbers)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}{'es' if word.endswith('s') else 's'}"


# --- versions --------------------------------------------------------------------------------


def versions_seen(log: NcclLog, ranks: dict[Proc, int]) -> tuple[VersionSeen, ...]:
    """Every version printed, in every form (bare ≤2.21 line, 2.22+ INFO line, RCCL banner,
    ProcessGroupNCCL's environment dump), with the hosts, processes and ranks behind it."""
    rank0 = [p for p, r in ranks.items() if r == 0]
    groups: dict[tuple[str, str], list[VersionRecord]] = defaultdict(list)
    for v in log.versions:
        groups[(v.library, v.version)].append(v)
    out = []
    for (library, version), records in sorted(groups.items()):
        hosts: set[str] = set()
        procs: set[Proc] = set()
        who: set[int] = set()
        for v in records:
            if v.host is not None and v.pid is not None:
                proc = (v.host, v.pid)
                procs.add(proc)
                hosts.add(v.host)
                if proc in ranks:
                    who.add(ranks[proc])
            elif v.rank is not None:
                who.add(v.rank)
            elif v.source == "bare":
                # ≤2.21 prints the bare line only in the process that holds comm rank 0: of
                # its own file (a folder of logs holds several jobs' or nodes' rank 0)
                who.add(0)
                here = [p for p in rank0 if log.proc_files.get(p) == v.file]
                if len(here) == 1:
                    procs.add(here[0])
                    hosts.add(here[0][0])
        out.append(
            VersionSeen(
                version=version,
                library=library,
                hosts=tuple(sorted(hosts)),
                processes=tuple(f"{h}:{p}" for h, p in sorted(procs)),
                ranks=tuple(sorted(who)),
                sources=tuple(sorted({v.source for v in records})),
                files=tuple(
                    log.paths[i]
                    for i in sorted({v.file for v in records if v.file is not None})
                    if i < len(log.paths)
                ),
            )
        )
    return tuple(out)


def version_mismatch(
    log: NcclLog, ranks: dict[Proc, int], dumps: Sequence[FrDump] = ()
) -> list[Diagnostic]:
    """Processes of one job running different NCCL versions (any form of version line, or the
    ``comm_lib_version`` of Flight Recorder dumps). Versions are compared on x.y.z: the
    ``+cuda12.3`` suffix and PyTorch's shorter form name the same library."""
    by_base: dict[tuple[str, str], list[VersionRecord]] = defaultdict(list)
    for v in log.versions:
        by_base[(v.library, v.base)].append(v)
    fr_ranks: dict[str, list[int]] = defaultdict(list)
    for dump in dumps:
        if dump.nccl_version:
            fr_ranks[dump.nccl_version.split("+")[0]].append(dump.rank)
    for base in fr_ranks:
        by_base.setdefault(("NCCL", base), [])
    out = []
    for library in sorted({lib for lib, _ in by_base}):
        bases = sorted(b for lib, b in by_base if lib == library)
        if len(bases) < 2:
            continue
        parts: list[str] = []
        every_rank: set[int] = set()
        every_host: set[str] = set()
        evidence: list[str] = []
        for base in bases:
            records = by_base[(library, base)]
            seen = versions_seen(_only(log, records), ranks)
            r = {x for s in seen for x in s.ranks} | set(fr_ranks.get(base, []))
            h = {x for s in seen for x in s.hosts}
            every_rank |= r
            every_host |= h
            where = f" on {', '.join(sorted(h))}" if h else ""
            parts.append(f"{base}{where}" + (f" (ranks {_ranges(r)})" if r else ""))
            evidence.extend(v.line for v in records[:1] if v.line)
        out.append(
            Diagnostic(
                "version_mismatch",
                "error",
                f"{library} versions differ across processes: " + "; ".join(parts),
                tuple(sorted(every_rank)),
                tuple(sorted(every_host)),
                tuple(evidence[:EVIDENCE_LINES]),
            )
        )
    return out


def _only(log: NcclLog, records: list[VersionRecord]) -> NcclLog:
    view = NcclLog()
    view.versions = records
    view.inits = log.inits
    view.paths, view.proc_files = log.paths, log.proc_files
    return view


# --- network transport ------------------------------------------------------------------------

_VIRTUAL_IFACE = ("docker", "br-", "veth", "virbr", "cni", "flannel", "cali", "tunl", "lxc")


def transport_fallback(log: NcclLog, ranks: dict[Proc, int]) -> list[Diagnostic]:
    """Inter-node traffic over TCP sockets, from any evidence the log has: ``Using network
    Socket``, ``NET/IB : No device found.``, ``Failed to open libibverbs``,
    ``NCCL_IB_DISABLE=1``, connections ``via NET/Socket``. ``NET/Socket : Using [0]eth0`` alone
    is not evidence: NCCL names its bootstrap / out-of-band interface that way on every job.

    Whether the job spans nodes decides the severity: an error when the log proves it (nNodes
    > 1, NET connections, several hosts), a warning when the log cannot tell (a one-host
    excerpt, redacted host names), info when it proves a single node (nNodes 1, an nccl-tests
    header with every rank on one host)."""
    signals: dict[Proc, dict[str, str]] = defaultdict(dict)
    for (proc, name), seen in log.signals.items():
        signals[proc][name] = seen.line
    socket: list[Proc] = []
    fast: list[Proc] = []
    for proc, s in signals.items():
        net = log.networks.get(proc)
        if "socket_channel" in s or net == "Socket":
            socket.append(proc)
        elif "fast_selected" in s or "fast_channel" in s or "ib_device" in s:
            fast.append(proc)
        elif {"no_ib_device", "no_ibverbs", "ib_disabled"} & set(s):
            socket.append(proc)
    if not socket:
        return []
    nodes, node_line = _node_count(log, signals)
    r, h = _who(socket, ranks)
    cause = _socket_cause(socket, signals)
    evidence = _socket_evidence(socket, signals)
    if node_line and node_line not in evidence:
        evidence = (*evidence[: EVIDENCE_LINES - 1], node_line)
    where = f" on {', '.join(h)}" if h else ""
    ifaces = _virtual_interfaces(log, socket)
    if nodes == "multi":
        if fast:
            others = sorted({log.networks.get(p) or "IB" for p in fast})
            message = (
                f"socket fallback: {_plural(len(socket), 'process')}{where} send inter-node "
                f"traffic over NET/Socket (TCP) while the others use {'/'.join(others)}{cause}"
            )
        else:
            message = (
                "inter-node traffic over TCP sockets: NCCL uses NET/Socket for the connections "
                f"between nodes{where}{cause}"
            )
        severity: Severity = "error"
    elif nodes == "single":
        message = (
            f"NCCL selected the Socket network{where}{cause}, but the job runs on one node: no "
            "inter-node traffic goes over it"
        )
        severity = "info"
    else:
        message = (
            f"NCCL selected TCP sockets (NET/Socket) for inter-node traffic{where}{cause}; the "
            "log does not show whether the job spans nodes: if it does, its inter-node "
            "collectives run over TCP"
        )
        severity = "warning"
    if ifaces and severity != "info":
        message += (
            f"; NET/Socket uses {_plural(ifaces[0], 'interface')}, including virtual ones "
            f"({', '.join(ifaces[1])}): set NCCL_SOCKET_IFNAME"
        )
    return [Diagnostic("transport_fallback", severity, message, r, h, evidence)]


def _node_count(log: NcclLog, signals: dict[Proc, dict[str, str]]) -> tuple[str, str | None]:
    """multi / single / unknown, and a line that shows it."""
    for s in signals.values():
        if "multi_node" in s:
            return "multi", s["multi_node"]
    for s in signals.values():
        if "single_node" in s:  # nNodes counts nodes, not host names (pods of one node differ)
            return "single", s["single_node"]
    for s in signals.values():
        for name in ("socket_channel", "fast_channel"):
            if name in s:
                return "multi", s[name]  # NET connections join ranks of different nodes
    hosts = {h for h, _ in log.procs if (h, _) != NO_PROC}
    if len(hosts) > 1:
        return "multi", None
    test_hosts = {t.host for t in log.test_ranks}
    if len(test_hosts) > 1:
        return "multi", None
    if test_hosts and (not hosts or hosts == test_hosts):
        return "single", None
    # every rank of the job printed its connections and none goes over the network: a ring
    # over several nodes has NET links at each node boundary
    world = max((i.nranks for i in log.inits), default=0)
    connected = {(t.host, t.pid) for t in log.transports if t.kind in ("P2P", "SHM")}
    if world >= 2 and len(connected) >= world:
        return "single", None
    return "unknown", None


def _socket_cause(socket: list[Proc], signals: dict[Proc, dict[str, str]]) -> str:
    names = {n for p in socket for n in signals[p]}
    if "ib_disabled" in names:
        return " (forced: NCCL_IB_DISABLE=1)"
    if "no_ib_device" in names:
        return " (NET/IB found no device)"
    if "no_ibverbs" in names:
        return " (libibverbs could not be opened: no InfiniBand library)"
    return ""


def _socket_evidence(socket: list[Proc], signals: dict[Proc, dict[str, str]]) -> tuple[str, ...]:
    order = ("ib_disabled", "no_ib_device", "no_ibverbs", "socket_selected", "socket_channel")
    lines: list[str] = []
    for name in order:
        for proc in sorted(socket):
            line = signals[proc].get(name)
            if line and line not in lines:
                lines.append(line)
                break
    return tuple(lines[:EVIDENCE_LINES])


def _virtual_interfaces(log: NcclLog, socket: list[Proc]) -> tuple[int, list[str]] | None:
    for proc in sorted(socket):
        names = log.socket_interfaces.get(proc, ())
        virtual = [n for n in names if n.startswith(_VIRTUAL_IFACE)]
        if virtual:
            return len(names), [*virtual[:3], "…"] if len(virtual) > 3 else virtual
    return None


# --- channels, NVLS, CollNet, WARNs -----------------------------------------------------------


def fewer_channels(log: NcclLog, ranks: dict[Proc, int]) -> list[Diagnostic]:
    """Within one communicator every rank should build the same number of channels; a rank
    with fewer runs its collectives on fewer rings / trees than its peers."""
    by_comm: dict[str, dict[Proc, int]] = defaultdict(dict)
    for c in log.channels:
        if c.comm_id is not None:
            by_comm[c.comm_id][(c.host, c.pid)] = c.coll
    out = []
    for comm, counts in sorted(by_comm.items()):
        top = max(counts.values())
        low = sorted(p for p, n in counts.items() if n < top)
        if low:
            r, h = _who(low, ranks)
            detail = ", ".join(f"{counts[p]}" for p in low[:16])
            out.append(
                Diagnostic(
                    "fewer_channels",
                    "warning",
                    f"communicator {comm}: {_plural(len(low), 'process')} built fewer coll "
                    f"channels ({detail}) than their peers ({top})",
                    r,
                    h,
                )
            )
    return out


def nvls_and_collnet(log: NcclLog) -> list[Diagnostic]:
    out = []
    if log.nvls_support:
        yes = sorted(h for h, ok in log.nvls_support.items() if ok)
        no = sorted(h for h, ok in log.nvls_support.items() if not ok)
        if yes and no:
            out.append(
                Diagnostic(
                    "nvls",
                    "warning",
                    f"NVLS multicast available on {', '.join(yes)} but not on {', '.join(no)}",
                    hosts=tuple(no),
                )
            )
        else:
            state = "available" if yes else "not available"
            out.append(Diagnostic("nvls", "info", f"NVLS multicast {state} on every host"))
    collnet = [c for c in log.channels if c.collnet]
    if collnet:
        out.append(
            Diagnostic(
                "collnet",
                "info",
                f"CollNet (SHARP) channels built by "
                f"{_plural(len({(c.host, c.pid) for c in collnet}), 'process')}",
                hosts=tuple(sorted({c.host for c in collnet})),
            )
        )
    return out


_WARN_TEXT = {
    "collnet_unsupported": "CollNet (SHARP) is not available; NCCL uses the other algorithms",
    "no_net_plugin": "no network plugin; NCCL uses its internal IB / socket transports",
    "no_ibverbs": "no InfiniBand library (libibverbs); NCCL falls back to sockets",
    "nvls_unsupported": "NVLS is not available; NCCL uses the other algorithms",
}


def warn_summary(log: NcclLog, ranks: dict[Proc, int]) -> list[Diagnostic]:
    """WARN lines by kind. A notice (a feature NCCL found absent and carries on without:
    CollNet, a net plugin, libibverbs, NVLS) is info; every other WARN is an error."""
    out = []
    by_kind: dict[str, list[Proc]] = defaultdict(list)
    first: dict[str, int] = {}
    for i, w in enumerate(log.warns):
        by_kind[w.kind].append((w.host, w.pid))
        first.setdefault(w.kind, i)
    for kind, count in sorted(log.warn_counts.items(), key=lambda kv: (-kv[1], kv[0])):
        w0 = log.warns[first[kind]] if kind in first else None
        r, h = _who(by_kind.get(kind, []), ranks)
        notice = kind in NOTICE_KINDS
        where = f", first on {w0.host}" if w0 is not None and w0.host != "?" else ""
        text = f"{_plural(count, 'NCCL WARN')} ({kind}){where}: {w0.message if w0 else ''}"
        if notice:
            text += f" — {_WARN_TEXT[kind]}"
        evidence = (f"{w0.source + ' ' if w0.source else ''}NCCL WARN {w0.message}",) if w0 else ()
        out.append(Diagnostic("warn", "info" if notice else "error", text, r, h, evidence))
    return out


# --- watchdog timeouts ------------------------------------------------------------------------


@dataclass
class _Report:
    """One rank's lines about one seq, merged (the timeout line names the op; the exception
    line next to it names the process group and the last enqueued / completed seqs)."""

    rank: int
    rank_global: bool
    seq: int
    pg: PgRef | None
    records: list[WatchdogRecord]
    pg_inferred: bool = False

    def first(self, attr: str) -> int | str | None:
        for r in self.records:
            value = getattr(r, attr)
            if value is not None:
                return value
        return None


def _window(seq: int) -> int:
    return max(64, abs(seq) // 100)


def _near(a: int, b: int) -> bool:
    """Two seqs of one process group: PyTorch counts collectives per group, so ranks of one
    group stuck together are a few works apart; far-apart seqs belong to different groups."""
    return abs(a - b) <= _window(max(abs(a), abs(b)))


def _rank_of(w: WatchdogRecord, log: NcclLog) -> tuple[int | None, bool]:
    """(rank, is it global): the ``[rank<G>]:`` prefix, the group's initialization line, the
    default group's own rank, else the rank within the group."""
    if w.global_rank is not None:
        return w.global_rank, True
    if w.pg is not None and w.pg_rank is not None:
        mapped = log.pg_global.get((w.pg.key, w.pg_rank))
        if mapped is not None:
            return mapped, True
        if w.pg.is_default:
            return w.pg_rank, True
    return w.pg_rank, False


def watchdog_timeouts(log: NcclLog, ranks: dict[Proc, int] | None = None) -> list[PgTimeout]:
    """Per process group, where its ranks are stuck: the lines of each rank merged per seq,
    lines that name no group joined to the group of their own rank (same seq) or to the one
    group whose seqs are near theirs, the rest grouped by seq."""
    return [t for t, _ in _watchdog_groups(log, ranks)]


def _watchdog_groups(
    log: NcclLog, ranks: dict[Proc, int] | None
) -> list[tuple[PgTimeout, tuple[str, ...]]]:
    reports: dict[tuple[int, bool, int, str | None], _Report] = {}
    for w in log.watchdog:
        if w.seq is None or w.kind in ("dump_signal", "stuck"):
            continue
        rank, is_global = _rank_of(w, log)
        if rank is None:
            continue
        key = (rank, is_global, w.seq, w.pg.key if w.pg else None)
        rep = reports.get(key)
        if rep is None:
            rep = reports[key] = _Report(rank, is_global, w.seq, w.pg, [])
        rep.records.append(w)
    # a rank's untagged line joins its own tagged line of the same seq
    tagged: dict[tuple[int, bool, int], _Report] = {}
    for (rank, is_global, seq, pg_key), rep in reports.items():
        if pg_key is not None:
            tagged.setdefault((rank, is_global, seq), rep)
    merged: list[_Report] = []
    for (rank, is_global, seq, pg_key), rep in reports.items():
        if pg_key is None and (rank, is_global, seq) in tagged:
            tagged[(rank, is_global, seq)].records.extend(rep.records)
        else:
            merged.append(rep)
    # untagged lines join the one known group whose seqs are near theirs (bisect over the
    # tagged seqs, runs of one group jumped: no quadratic work on a log of many timeouts)
    by_pg: dict[str, list[_Report]] = defaultdict(list)
    for rep in merged:
        if rep.pg is not None:
            by_pg[rep.pg.key].append(rep)
    points = sorted((rep.seq, rep.pg.key) for rep in merged if rep.pg is not None)
    seqs = [p[0] for p in points]
    keys = [p[1] for p in points]
    run_end = list(range(1, len(keys) + 1))
    for i in range(len(keys) - 2, -1, -1):
        if keys[i] == keys[i + 1]:
            run_end[i] = run_end[i + 1]
    loose: list[_Report] = []
    for rep in merged:
        if rep.pg is not None:
            continue
        window = _window(rep.seq)
        lo = bisect.bisect_left(seqs, rep.seq - window)
        hi = bisect.bisect_right(seqs, rep.seq + window)
        if lo < hi and run_end[lo] >= hi:  # exactly one group near
            rep.pg, rep.pg_inferred = by_pg[keys[lo]][0].pg, True
            by_pg[keys[lo]].append(rep)
        else:
            loose.append(rep)
    groups: list[tuple[PgRef | None, list[_Report]]] = [
        (reps[0].pg, reps) for _, reps in sorted(by_pg.items())
    ]
    cluster: list[_Report] = []
    for rep in sorted(loose, key=lambda r: r.seq):
        if cluster and not _near(cluster[-1].seq, rep.seq):
            groups.append((None, cluster))
            cluster = []
        cluster.append(rep)
    if cluster:
        groups.append((None, cluster))
    known = set(log.global_ranks_seen) | set((ranks or {}).values())
    unnamed = sum(1 for pg, _ in groups if pg is None)
    out = []
    n = 0
    for pg, reps in groups:
        if pg is None:
            n += 1
        out.append((_pg_timeout(pg, reps, known, n if unnamed > 1 else 0), _timeout_evidence(reps)))
    return out


def _timeout_evidence(reps: list[_Report]) -> tuple[str, ...]:
    """Each rank's line about its earliest stuck seq (the one naming the op when there is)."""
    lines: list[str] = []
    seen: set[int] = set()
    for rep in sorted(reps, key=lambda r: (r.rank, r.seq)):
        if rep.rank in seen:
            continue
        seen.add(rep.rank)
        line = next((w.line for w in rep.records if w.op_type), rep.records[0].line)
        if line not in lines:
            lines.append(line)
        if len(lines) == EVIDENCE_LINES:
            break
    return tuple(lines)


def _pg_timeout(pg: PgRef | None, reps: list[_Report], known: set[int], n: int) -> PgTimeout:
    reps = sorted(reps, key=lambda r: (r.rank, r.seq))
    earliest: dict[int, _Report] = {}
    for rep in reps:
        earliest.setdefault(rep.rank, rep)
    seq = min(r.seq for r in earliest.values())
    at = (
        next(r for r in reps if r.seq == seq and r.first("op_type"))
        if any(r.seq == seq and r.first("op_type") for r in reps)
        else next(r for r in reps if r.seq == seq)
    )
    is_global = all(r.rank_global for r in reps)
    timed_out = tuple(sorted(earliest))
    desync = len({r.seq for r in earliest.values()}) > 1
    never: set[int] = set()
    for rep in reps:
        for w in rep.records:
            never.update(w.missing_ranks)
    if pg is not None and pg.is_default and is_global:
        never |= known - set(timed_out)
    enqueued = [e for r in reps if isinstance(e := r.first("last_enqueued"), int)]
    completed = [c for r in reps if isinstance(c := r.first("last_completed"), int)]
    label = pg.label if pg is not None else "process group not named in the log"
    if pg is None and n:
        label += f" (#{n})"
    return PgTimeout(
        pg=label,
        pg_id=pg.id if pg else None,
        pg_guid=pg.guid if pg else None,
        pg_name=pg.name if pg else None,
        pg_desc=pg.desc if pg else None,
        seq=seq,
        op_type=_str(at.first("op_type")),
        numel_in=_int(at.first("numel_in")),
        numel_out=_int(at.first("numel_out")),
        timed_out_ranks=timed_out,
        ranks_are_global=is_global,
        ranks=tuple(
            RankTimeout(
                rank=r.rank,
                seq=r.seq,
                op_type=_str(r.first("op_type")),
                numel_in=_int(r.first("numel_in")),
                numel_out=_int(r.first("numel_out")),
                timeout_ms=_int(r.first("timeout_ms")),
                ran_ms=_int(r.first("ran_ms")),
                last_enqueued_seq=_int(r.first("last_enqueued")),
                last_started_seq=_int(r.first("last_started")),
                last_completed_seq=_int(r.first("last_completed")),
                pg_inferred=r.pg_inferred,
            )
            for r in reps
        ),
        last_enqueued_seq=max(enqueued) if enqueued else None,
        last_completed_seq=min(completed) if completed else None,
        desync=desync,
        never_joined=tuple(sorted(never - set(timed_out))),
    )


def _int(value: object) -> int | None:
    return value if isinstance(value, int) else None


def _str(value: object) -> str | None:
    return value if isinstance(value, str) else None


# ops whose element counts must agree on every rank of the group
_SAME_NUMEL = frozenset(
    {
        "ALLREDUCE",
        "BROADCAST",
        "REDUCE",
        "ALLGATHER",
        "_ALLGATHER_BASE",
        "REDUCE_SCATTER",
        "_REDUCE_SCATTER_BASE",
        "ALLTOALL_BASE",
    }
)


def _sizes(t: RankTimeout | PgTimeout) -> str:
    if t.numel_in is None:
        return ""
    if t.numel_in == t.numel_out:
        return f"numel {t.numel_in}"
    return f"numel in {t.numel_in} out {t.numel_out}"


def _timeout_findings(groups: list[tuple[PgTimeout, tuple[str, ...]]]) -> list[Diagnostic]:
    out = [_timeout_finding(t, evidence) for t, evidence in groups[:MAX_TIMEOUT_FINDINGS]]
    if len(groups) > MAX_TIMEOUT_FINDINGS:
        out.append(
            Diagnostic(
                "hang",
                "info",
                f"{len(groups) - MAX_TIMEOUT_FINDINGS:,} more process groups with watchdog "
                "timeouts (all of them under watchdog_timeouts)",
            )
        )
    return out


def _timeout_finding(t: PgTimeout, evidence: tuple[str, ...]) -> Diagnostic:
    who = "rank" if len(t.timed_out_ranks) == 1 else "ranks"
    scope = "" if t.ranks_are_global else " (ranks within the group)"
    first_per_rank: dict[int, RankTimeout] = {}
    for r in t.ranks:
        first_per_rank.setdefault(r.rank, r)
    inferred = sorted({r.rank for r in t.ranks if r.pg_inferred})
    tail = []
    status = {
        r.rank: (r.last_enqueued_seq, r.last_completed_seq)
        for r in first_per_rank.values()
        if r.last_enqueued_seq is not None or r.last_completed_seq is not None
    }
    for (enq, done), rs in sorted(_by_value(status).items(), key=lambda kv: kv[1])[:4]:
        whose = (
            ""
            if len(status) == len(first_per_rank) and len(set(status.values())) == 1
            else (f" ({'rank' if len(rs) == 1 else 'ranks'} {_ranges(rs)})")
        )
        tail.append(
            f"last enqueued {enq if enq is not None else '?'}, "
            f"last completed {done if done is not None else '?'}{whose}"
        )
    more = {
        rank: sorted({r.seq for r in t.ranks if r.rank == rank} - {first.seq})
        for rank, first in first_per_rank.items()
    }
    for rank, seqs in sorted(more.items()):
        if seqs:
            shown = ", ".join(map(str, seqs[:8])) + (", …" if len(seqs) > 8 else "")
            tail.append(f"rank {rank} also timed out at seq {shown}")
    if t.never_joined:
        tail.append(f"never joined: ranks {_ranges(t.never_joined)}")
    if inferred:
        tail.append(
            f"{'rank' if len(inferred) == 1 else 'ranks'} {_ranges(inferred)}: group inferred "
            "from the seq (the lines name none)"
        )
    if t.desync:
        by_seq: dict[int, list[RankTimeout]] = defaultdict(list)
        for r in first_per_rank.values():
            by_seq[r.seq].append(r)
        parts = []
        for seq, at_seq in sorted(by_seq.items())[:8]:
            what = ", ".join(x for x in (at_seq[0].op_type, _sizes(at_seq[0])) if x)
            ranks = _ranges(r.rank for r in at_seq)
            parts.append(
                f"{'rank' if len(at_seq) == 1 else 'ranks'} {ranks} at seq {seq}"
                + (f" ({what})" if what else "")
            )
        message = (
            f"{t.pg}: ranks stuck at different seqs{scope}: {', '.join(parts)}: the ranks "
            "issued different collectives (a desync)"
        )
        rule = "desync"
    else:
        sizes = _sizes(t)
        what = ", ".join(x for x in (t.op_type, sizes) if x) or "op not named"
        message = (
            f"{t.pg}: collective seq {t.seq} ({what}) timed out on {who} "
            f"{_ranges(t.timed_out_ranks)}{scope}"
        )
        mismatch = _numel_mismatch(t, first_per_rank)
        if mismatch:
            tail.insert(0, mismatch)
        rule = "hang"
    if tail:
        message += "; " + "; ".join(tail)
    return Diagnostic(
        rule,
        "error",
        message,
        t.never_joined or t.timed_out_ranks,  # the suspects first
        (),
        evidence,
        pg=t.pg,
        seq=t.seq,
        op=t.op_type,
    )


def _by_value(
    status: dict[int, tuple[int | None, int | None]],
) -> dict[tuple[int | None, int | None], list[int]]:
    out: dict[tuple[int | None, int | None], list[int]] = defaultdict(list)
    for rank, value in sorted(status.items()):
        out[value].append(rank)
    return out


def _numel_mismatch(t: PgTimeout, first: dict[int, RankTimeout]) -> str | None:
    if (t.op_type or "").upper() not in _SAME_NUMEL:
        return None
    sizes = {r.rank: (r.numel_in, r.numel_out) for r in first.values() if r.numel_in is not None}
    if len(set(sizes.values())) < 2:
        return None
    shown = ", ".join(f"rank {k}: {v[0]}" for k, v in sorted(sizes.items())[:8])
    return f"numel differs across ranks ({shown}): a size mismatch"


def watchdog_stuck(log: NcclLog) -> list[Diagnostic]:
    """``ProcessGroupNCCL's watchdog got stuck for N seconds``: the watchdog thread itself was
    blocked (a CUDA call, or the GIL held by another thread), so timeouts could not fire."""
    stuck = [w for w in log.watchdog if w.kind == "stuck"]
    if not stuck:
        return []
    who = sorted({r for w in stuck if (r := _rank_of(w, log)[0]) is not None})
    secs = max((w.ran_ms or 0) // 1000 for w in stuck)
    return [
        Diagnostic(
            "watchdog_stuck",
            "error",
            f"ProcessGroupNCCL's watchdog got stuck for {secs} s"
            + (f" on ranks {_ranges(who)}" if who else "")
            + ": a CUDA call or the GIL blocked it, so collective timeouts could not fire",
            tuple(who),
            evidence=(stuck[0].line,),
        )
    ]


def _fr_hang(d: Divergence) -> Diagnostic:
    parts = []
    if d.missing_ranks:
        parts.append(f"never joined: ranks {_ranges(d.missing_ranks)}")
    if d.stuck_ranks:
        parts.append(f"entered but did not complete: ranks {_ranges(d.stuck_ranks)}")
    if d.sizes_disagree:
        parts.append("sizes disagree across ranks")
    return Diagnostic(
        "hang",
        "error",
        f"Flight Recorder: process group {d.pg} diverged at seq {d.seq} ({d.op}, {d.sizes}): "
        + "; ".join(parts),
        tuple(sorted(set(d.missing_ranks) | set(d.stuck_ranks))),
        pg=d.pg,
        seq=d.seq,
        op=d.op,
    )
