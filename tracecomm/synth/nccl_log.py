"""Generated NCCL debug logs (nccl-logs.md formats) with a known answer: several hosts and
NCCL versions, interleaved ranks, launcher prefixes, a socket fallback, a WARN and a watchdog
timeout, so the diagnostics can be asserted exactly. Records can be torn as processes sharing
one stdout tear them (``tear_rate``): the same spec without it is the torn log's truth."""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field

_OPS = ("AllGather", "ReduceScatter", "AllReduce")


@dataclass(frozen=True)
class LogSpec:
    hosts: tuple[str, ...] = ("gpu-a01", "gpu-a02")
    ranks_per_host: int = 4
    versions: tuple[str, ...] = ("2.24.3", "2.24.3")  # per host
    socket_hosts: frozenset[str] = frozenset()  # their inter-node traffic falls back to sockets
    warn_rank: int | None = None  # this rank logs a socket WARN with its unwinding lines
    timeout_seq: int | None = None  # every rank but absent_rank times out in this all-reduce
    absent_rank: int | None = None  # never enqueued timeout_seq (the hang's culprit)
    colls: int = 20  # COLL lines per rank
    seed: int = 0
    launcher_prefix: bool = True  # mpirun's [1,<rank>]<stdout>: on odd ranks
    noise: bool = True  # application output, CRLF, invalid UTF-8, an over-long line
    comm_id: str = "0x7c1f2e3d4a5b6978"
    channels_short_rank: int | None = None  # this rank builds fewer coll channels
    coll_only: bool = False  # NCCL_DEBUG_SUBSYS=COLL: nothing but the COLL lines
    # share of NCCL records torn by another process's write (seeded by ``seed``): the record is
    # cut at a random place, the next record written whole after its head, the tail on a line
    # of its own; truths["torn_records"] says how many
    tear_rate: float = 0.0
    truths: dict[str, object] = field(default_factory=dict, compare=False)

    @property
    def world(self) -> int:
        return len(self.hosts) * self.ranks_per_host


def _v(version: str) -> tuple[int, int]:
    major, minor = version.split(".")[:2]
    return int(major), int(minor)


def nccl_log(spec: LogSpec) -> bytes:
    """One combined log (as a job's stdout would be): every rank's lines, interleaved."""
    rng = random.Random(spec.seed)
    streams = [_rank_lines(spec, rank) for rank in range(spec.world)]
    out: list[str] = []
    while any(streams):
        pick = rng.choice([s for s in streams if s])
        out.append(pick.pop(0))
        if spec.noise and rng.random() < 0.05:
            out.append(f"step {len(out)}: loss {rng.uniform(1, 3):.4f} lr 3.0e-4")
    if spec.tear_rate > 0:
        # a generator of its own: the torn log interleaves exactly as its untorn truth does
        out, torn = tear(out, spec.tear_rate, random.Random(f"tear-{spec.seed}"))
        spec.truths["torn_records"] = torn
    text = "\n".join(out) + "\n"
    data = text.encode()
    if spec.noise:
        # CRLF on some lines, a stray invalid byte in application output, a line cut at 1023
        data = data.replace(b" lr 3.0e-4\n", b" lr 3.0e-4\r\n", 3)
        data += b"tokenizer warning: \xff\xfe unexpected byte\n"
        data += ("gpu-zz:1:1 [0] NCCL INFO Channel 00/0 : " + "x" * 1200)[:1023].encode() + b"\n"
    return data


_LAUNCHER_TAG = re.compile(r"\[\d+,\d+\]<stdout>:")


def _is_record(line: str) -> bool:
    return " NCCL INFO " in line or " NCCL WARN " in line


def tear(lines: list[str], rate: float, rng: random.Random) -> tuple[list[str], int]:
    """Lines as processes sharing one stream write them: with probability ``rate`` an NCCL
    record is cut at a random place of its own text (after any launcher tag: mpirun writes
    whole lines), the next record is written whole after its head, and the tail lands on the
    line after. Returns the lines and how many records were torn."""
    out: list[str] = []
    torn = i = 0
    while i < len(lines):
        if (
            i + 1 < len(lines)
            and _is_record(lines[i])
            and _is_record(lines[i + 1])
            and rng.random() < rate
        ):
            tag = _LAUNCHER_TAG.match(lines[i])
            cut = rng.randrange((tag.end() if tag else 0) + 1, len(lines[i]))
            out += [lines[i][:cut] + lines[i + 1], lines[i][cut:]]
            torn += 1
            i += 2
        else:
            out.append(lines[i])
            i += 1
    return out, torn


def _rank_lines(spec: LogSpec, rank: int) -> list[str]:
    h = rank // spec.ranks_per_host
    host, version = spec.hosts[h], spec.versions[h]
    local = rank % spec.ranks_per_host
    pid = 41000 + 17 * local
    ver = _v(version)
    pre = f"[1,{rank}]<stdout>:" if spec.launcher_prefix and rank % 2 else ""

    def info(msg: str, tid: int = pid) -> str:
        return f"{pre}{host}:{pid}:{tid} [{local}] NCCL INFO {msg}"

    lines = []
    if ver >= (2, 22):
        lines.append(info(f"NCCL version {version}+cuda12.4"))
    elif rank == 0:
        lines.append(f"NCCL version {version}+cuda12.2")
    lines.append(info("cudaDriverVersion 12040"))
    boot = "Bootstrap: Using" if ver >= (2, 24) else "Bootstrap : Using"
    lines.append(info(f"{boot} eth0:10.1.{h}.{10 + local}<0>"))
    socket = host in spec.socket_hosts
    if socket:
        lines.append(info("NET/IB : No device found."))
        lines.append(info(f"NET/Socket : Using [0]eth0:10.1.{h}.{10 + local}<0>"))
        lines.append(info("Using network Socket"))
    else:
        lines.append(
            info("NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB [RO]; OOB eth0:10.1.0.1<0>")
        )
        lines.append(info("Using network IB"))
    comm = f"0x55d0c8{rank:02x}1f60"
    lines.append(info(_init_line(spec, version, comm, rank, local, "START")))
    if ver >= (2, 20):
        lines.append(
            info(
                f"comm {comm} rank {rank} nRanks {spec.world} nNodes {len(spec.hosts)} "
                f"localRanks {spec.ranks_per_host} localRank {local} MNNVL 0"
            )
        )
    channels = 16 if rank == spec.channels_short_rank else 32
    lines.append(info(_channels_line(ver, channels)))
    nxt = (rank + 1) % spec.world
    bus = f"{0x1B + local:x}000"
    me = f"{rank}[{_id(ver, local, bus)}]"
    for ch in range(2):
        if nxt // spec.ranks_per_host == h:
            peer = f"{nxt}[{_id(ver, (local + 1) % spec.ranks_per_host, bus)}]"
            lines.append(info(f"Channel {ch:02d}/0 : {me} -> {peer} via P2P/CUMEM/read"))
        else:
            # the sender's own network: a node without an IB device sends over sockets
            net = "NET/Socket/0" if socket else "NET/IB/0/GDRDMA"
            peer = f"{nxt}[{_id(ver, 0, bus)}]"
            lines.append(info(f"Channel {ch:02d}/0 : {me} -> {peer} [send] via {net}", pid + 60))
    lines.append(info("Connected all rings"))
    lines.append(info(_init_line(spec, version, comm, rank, local, "COMPLETE")))
    for i in range(spec.colls):
        op = _OPS[i % 3]
        lines.append(
            info(
                f"{op}: opCount {i:x} sendbuff 0x7f2a40000000 recvbuff 0x7f2a48000000 count "
                f"{4096 * (1 + i % 4)} datatype 9 op 0 root 0 comm {comm} [nranks={spec.world}] "
                "stream 0x55d0c7e01230",
                pid + 3,
            )
        )
    if rank == spec.warn_rank:
        peer = spec.hosts[(h + 1) % len(spec.hosts)]
        stamp = "[2026-11-29 09:00:01] " if ver >= (2, 26) else ""
        lines.append("")
        lines.append(
            f"{pre}{stamp}{host}:{pid}:{pid + 60} [{local}] misc/socket.cc:63 NCCL WARN "
            f"socketProgress: Connection closed by remote peer {peer}<51502>"
        )
        lines.append(info("misc/socket.cc:752 -> 6", pid + 60))
        lines.append(info("transport/net_socket.cc:474 -> 6 [Proxy Thread]", pid + 60))
    if spec.timeout_seq is not None:
        lines.extend(_watchdog(spec, rank))
    if spec.coll_only:
        return [line for line in lines if ": opCount " in line]
    return lines


def _id(ver: tuple[int, int], local: int, bus: str) -> str:
    return str(local) if ver >= (2, 18) else bus


def _init_line(spec: LogSpec, version: str, comm: str, rank: int, local: int, state: str) -> str:
    ver = _v(version)
    bus = f"{0x1B + local:x}000"
    base = f"comm {comm} rank {rank} nranks {spec.world} cudaDev {local}"
    if ver < (2, 16):
        return f"{base} busId {bus} - Init {state}"
    if ver < (2, 18):
        return f"{base} busId {bus} commId {spec.comm_id} - Init {state}"
    text = f"{base} nvmlDev {local} busId {bus} commId {spec.comm_id} - Init {state}"
    if ver >= (2, 21):
        text = f"ncclCommInitRank {text}"
    if ver >= (2, 29) and state == "START":
        text = f"[Rank {rank}] {text}"
    return text


def _channels_line(ver: tuple[int, int], coll: int) -> str:
    tail = "32 p2p channels, 2 p2p channels per peer"
    if ver >= (2, 20):
        return f"{coll} coll channels, 0 collnet channels, 0 nvls channels, {tail}"
    if ver >= (2, 17):
        return f"{coll} coll channels, 0 nvls channels, {tail}"
    return f"{coll} coll channels, {tail}"


def _watchdog(spec: LogSpec, rank: int) -> list[str]:
    seq = spec.timeout_seq
    assert seq is not None
    prefix = f"[rank{rank}]:[E1129 09:10:{rank:02d}.123456789 ProcessGroupNCCL.cpp:1483] "
    tag = f"[PG ID 0 PG GUID 0(default_pg) Rank {rank}]"
    if rank == spec.absent_rank:
        return []  # it never enqueued the collective: its watchdog has nothing to report
    return [
        f"{prefix}{tag} Watchdog caught collective operation timeout: WorkNCCL(SeqNum={seq}, "
        f"OpType=ALLREDUCE, NumelIn=4194304, NumelOut=4194304, Timeout(ms)=600000) ran for "
        "600021 milliseconds before timing out.",
        f"{prefix}{tag} failure detected by watchdog at work sequence id: {seq} PG status: "
        f"last enqueued work: {seq}, last completed work: {seq - 1}",
    ]
