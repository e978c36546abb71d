"""Diagnostics from NCCL logs and Flight Recorder dumps: each a rule with its own test."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from tracecomm.nccl.flight import Divergence, FrDump, divergences
from tracecomm.nccl.model import NcclLog, Proc
from tracecomm.text import compact_ranges

Severity = Literal["error", "warning", "info"]


@dataclass(frozen=True)
class Diagnostic:
    rule: str  # transport_fallback, version_mismatch, fewer_channels, nvls, collnet, warn, hang
    severity: Severity
    message: str
    ranks: tuple[int, ...] = ()
    hosts: tuple[str, ...] = ()


@dataclass(frozen=True)
class NcclSummary:
    """What the logs say about the job, and the diagnostics."""

    files: tuple[str, ...]
    lines: int
    nccl_lines: int
    unknown_lines: int
    processes: int
    ranks: dict[str, int]  # "host:pid" -> global rank (the largest communicator's rank)
    versions: dict[str, list[str]]  # NCCL version -> "host:pid" of the processes that ran it
    networks: dict[str, list[str]]  # net name -> hosts
    transports: dict[str, int]  # P2P / SHM / NET/IB / NET/Socket / COLLNET … -> connections
    colls: int  # COLL lines
    warns: dict[str, int]  # kind -> count
    watchdog_events: int
    flight_recorder_dumps: int
    diagnostics: tuple[Diagnostic, ...]
    hang: tuple[Divergence, ...] = field(default=())  # from Flight Recorder dumps


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
    diagnostics = [
        *transport_fallback(log, ranks),
        *version_mismatch(log, ranks, dumps),
        *fewer_channels(log, ranks),
        *nvls_and_collnet(log),
        *warn_summary(log, ranks),
        *watchdog_hang(log, ranks),
        *(_fr_hang(d) for d in hang),
    ]
    versions: dict[str, list[str]] = defaultdict(list)
    for (host, pid), version in sorted(log.versions.items()):
        versions[version].append(f"{host}:{pid}")
    networks: dict[str, set[str]] = defaultdict(set)
    for (host, _), net in log.networks.items():
        networks[net].add(host)
    transports = Counter(_transport_key(t.kind, t.net) for t in log.transports)
    return NcclSummary(
        files=tuple(log.paths),
        lines=log.lines,
        nccl_lines=log.nccl_lines,
        unknown_lines=log.unknown,
        processes=len({(i.host, i.pid) for i in log.inits} | set(log.versions)),
        ranks={f"{h}:{p}": r for (h, p), r in sorted(ranks.items(), key=lambda x: x[1])},
        versions=dict(versions),
        networks={k: sorted(v) for k, v in sorted(networks.items())},
        transports=dict(transports.most_common()),
        colls=sum(f.height for f in log.coll_frames),
        warns=dict(Counter(w.kind for w in log.warns).most_common()),
        watchdog_events=len(log.watchdog),
        flight_recorder_dumps=len(dumps),
        diagnostics=tuple(diagnostics),
        hang=tuple(hang),
    )


def _transport_key(kind: str, net: str | None) -> str:
    return f"{kind}/{net}" if net else kind


def _who(procs: Sequence[Proc], ranks: dict[Proc, int]) -> tuple[tuple[int, ...], tuple[str, ...]]:
    return (
        tuple(sorted({ranks[p] for p in procs if p in ranks})),
        tuple(sorted({h for h, _ in procs})),
    )


def transport_fallback(log: NcclLog, ranks: dict[Proc, int]) -> list[Diagnostic]:
    """Inter-node connections over TCP sockets while others use InfiniBand (or no IB at all on
    a multi-node job): a node that silently fell back."""
    nets: dict[Proc, set[str]] = defaultdict(set)
    for t in log.transports:
        if t.kind == "NET" and t.net:
            nets[(t.host, t.pid)].add(t.net)
    for proc, net in log.networks.items():
        nets[proc].add(net)
    hosts = {h for h, _ in nets} | {h for h, _ in log.versions} | {i.host for i in log.inits}
    multi_node = len(hosts) > 1 or any(n > 1 for n, _ in log.nodes.values())
    if not multi_node:
        return []
    socket = sorted(p for p, n in nets.items() if "Socket" in n)
    fast = sorted(p for p, n in nets.items() if n - {"Socket"})
    if not socket:
        return []
    r, h = _who(socket, ranks)
    evidence = sorted({host for host, _ in log.no_ib_device})
    why = f" (NET/IB found no device on {', '.join(evidence)})" if evidence else ""
    if fast:
        others = sorted({n for p in fast for n in nets[p] - {"Socket"}})
        message = (
            f"socket fallback: {len(socket)} process(es) on {', '.join(h)} send inter-node "
            f"traffic over NET/Socket while the others use {'/'.join(others)}{why}"
        )
    else:
        message = (
            "no InfiniBand: every inter-node connection of this multi-node job uses TCP "
            f"sockets{why}"
        )
    return [Diagnostic("transport_fallback", "error", message, r, h)]


def version_mismatch(
    log: NcclLog, ranks: dict[Proc, int], dumps: Sequence[FrDump] = ()
) -> list[Diagnostic]:
    """Processes of one job running different NCCL versions (log lines, or the
    ``comm_lib_version`` of Flight Recorder dumps)."""
    procs: dict[str, list[Proc]] = defaultdict(list)
    fr_ranks: dict[str, list[int]] = defaultdict(list)
    for proc, version in log.versions.items():
        procs[version.split("+")[0]].append(proc)
    for dump in dumps:
        if dump.nccl_version:
            fr_ranks[dump.nccl_version.split("+")[0]].append(dump.rank)
    versions = sorted(set(procs) | set(fr_ranks))
    if len(versions) < 2:
        return []
    parts: list[str] = []
    every_rank: set[int] = set()
    every_host: set[str] = set()
    for version in versions:
        r, h = _who(procs[version], ranks)
        r = tuple(sorted(set(r) | set(fr_ranks[version])))
        every_rank.update(r)
        every_host.update(h)
        where = f" on {', '.join(h)}" if h else ""
        parts.append(f"{version}{where}" + (f" (ranks {_ranges(r)})" if r else ""))
    return [
        Diagnostic(
            "version_mismatch",
            "error",
            "NCCL versions differ across processes: " + "; ".join(parts),
            tuple(sorted(every_rank)),
            tuple(sorted(every_host)),
        )
    ]


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
            detail = ", ".join(f"{counts[p]}" for p in low)
            out.append(
                Diagnostic(
                    "fewer_channels",
                    "warning",
                    f"communicator {comm}: {len(low)} process(es) built fewer coll channels "
                    f"({detail}) than their peers ({top})",
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
                f"CollNet (SHARP) channels built by {len({(c.host, c.pid) for c in collnet})} "
                "process(es)",
                hosts=tuple(sorted({c.host for c in collnet})),
            )
        )
    return out


def warn_summary(log: NcclLog, ranks: dict[Proc, int]) -> list[Diagnostic]:
    out = []
    by_kind: dict[str, list[Proc]] = defaultdict(list)
    for w in log.warns:
        by_kind[w.kind].append((w.host, w.pid))
    for kind, procs in sorted(by_kind.items(), key=lambda kv: -len(kv[1])):
        first = next(w for w in log.warns if w.kind == kind)
        r, h = _who(procs, ranks)
        out.append(
            Diagnostic(
                "warn",
                "error",
                f"{len(procs)} NCCL WARN ({kind}), first on {first.host}: {first.message}",
                r,
                h,
            )
        )
    return out


def watchdog_hang(log: NcclLog, ranks: dict[Proc, int] | None = None) -> list[Diagnostic]:
    """From watchdog lines: per process group, the earliest timed-out collective and which
    ranks never got to it: their last enqueued work is older, or — for the default group —
    they are ranks of the job (Init lines, watchdog prefixes) that reported no timeout."""
    out = []
    by_pg: dict[str, list] = defaultdict(list)
    for w in log.watchdog:
        if w.seq is not None:
            by_pg[w.pg or "?"].append(w)
    known = {w.global_rank for w in log.watchdog if w.global_rank is not None}
    known |= set((ranks or {}).values())
    for pg, records in sorted(by_pg.items()):
        seq = min(w.seq for w in records if w.seq is not None)
        at = next(w for w in records if w.seq == seq and w.op_type)  # the op of that seq
        timed_out = {w.global_rank for w in records if w.seq == seq and w.kind == "timeout"}
        behind = {
            w.global_rank
            for w in log.watchdog
            if w.last_enqueued is not None and w.last_enqueued < seq
        }
        never = sorted(
            r for r in (behind | (known - timed_out)) if r is not None and r not in timed_out
        )
        sizes = f", numel in {at.numel_in} out {at.numel_out}" if at.numel_in is not None else ""
        out.append(
            Diagnostic(
                "hang",
                "error",
                f"process group {pg}: collective seq {seq} ({at.op_type}{sizes}) timed out on "
                f"{len(timed_out)} rank(s)"
                + (f"; never joined: ranks {_ranges(never)}" if never else ""),
                tuple(never),
            )
        )
    return out


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
    )


def _ranges(numbers: Sequence[int]) -> str:
    return compact_ranges(numbers)
