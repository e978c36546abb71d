"""Streaming parser of NCCL debug output and PyTorch watchdog lines (nccl-logs.md §2–11).

A log is read in blocks cut at line ends (a 5 GB log never loads whole) and each block is
scanned by a few compiled patterns in C (``findall``), so Python only touches matched lines.
Lines may carry launcher prefixes (``[1,0]<stdout>:``, ``host: ``, ``[123] ``), timestamps,
CRLF ends, invalid UTF-8 bytes (replaced) and be cut at 1023 bytes (then they match no family
and are counted as unknown or dropped).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import BinaryIO

import polars as pl

from tracecomm.nccl.model import (
    COLL_SCHEMA,
    ChannelSummary,
    CommInit,
    NcclLog,
    Transport,
    WarnRecord,
    WatchdogRecord,
)

BLOCK = 8 << 20
OPS = (
    "AllGather|AllReduce|Broadcast|ReduceScatter|Reduce|Send|Recv|AlltoAll|Gather|Scatter|"
    "PutSignal|WaitSignal|Signal"
)
_HOST = r"(?P<host>[^\s:\[\]]+):(?P<pid>\d+):(?P<tid>\d+) (?:\[\d+\] )?"
# A host starts a token: after a blank, ':', ']' or '>' (launcher prefixes), or a line start.
# The look-behind lets the scan skip the inside of every other token at C speed.
_TOKEN = r"(?<![^\s:\]>])"
_HEAD = r"(?P<host>[^\s:\[\]]+):(?P<pid>\d+):\d+(?: \[\d+\])?$"  # Rust regex (polars)
_LINE = re.compile(
    _TOKEN + r"([^\s:\[\]]+):(\d+):(\d+) (?:\[\d+\] )?(?:[\d.]+ )?(?:(\S+:\d+)(?: \([^)]*\))? )?"
    r"NCCL (INFO|WARN|CALL|TRACE)(?: (.*))?$"
)
_BARE_VERSION = re.compile(r"^(?:.*?[\s:>\]])?NCCL version (\S+)\s*$")
# Lines worth a look besides the NCCL-prefixed ones (Rust regex, run by polars on every line).
_RARE = r"NCCL version|WorkNCCL|watchdog|Timeout at (?:NCCL work|collective)"
_STAMP = re.compile(r"\[(\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d[^\]]*)\]")

_INIT = re.compile(
    r"^(?:\[Rank \d+\] )?(?:(?P<api>nccl\w+) )?comm (?P<comm>0x[0-9a-f]+|\(nil\)) "
    r"rank (?P<rank>\d+) nranks (?P<nranks>\d+) cudaDev (?P<cuda>\d+)(?: nvmlDev (?P<nvml>\d+))? "
    r"busId (?P<bus>[0-9a-fA-F]+)(?: parent (?P<parent>\S+) color (?P<color>-?\d+) key -?\d+"
    r"(?: (?:splitCount|childCount) \d+)?)?(?: commId (?P<commid>0x[0-9a-fA-F]+))? ?"
    r"- Init (?P<state>START|COMPLETE)"
)
_NODES = re.compile(r"^comm \S+ rank \d+ nRanks \d+ nNodes (\d+) localRanks (\d+)")
_CHANNELS = re.compile(
    r"^(\d+) coll channels, (?:(\d+) collnet channels, )?(?:(\d+) nvls channels, )?"
    r"(\d+) p2p channels, (\d+) p2p channels per peer"
)
_TRANSPORT = re.compile(
    r"^Channel (\d+)(?:/\d+)? : (\d+)\[[0-9a-fA-F]+\] -> (\d+)\[[0-9a-fA-F]+\] "
    r"(?:\[(send|receive)\] )?via (\S.*?)\s*$"
)
_COLLNET = re.compile(r"^CollNet (\d+)(?:/\d+)? : (\d+) \[?(send|receive)\]? via (\S.*?)\s*$")
_GRAPH = re.compile(
    r"^(?:Channel \d+/\d+ :|Ring \d+ :|Trees? |NVLS Trees|(?:Connected )?Collnet Chains)"
)
_UNWIND = re.compile(r"^\S+:\d+(?: \([^)]*\))? -> \d+")
_TUNING = re.compile(
    rf"^(?:({OPS})(?: \[[^\]]+\])?: )?(\d+) Bytes -> (?:Algo (\S+) proto (\S+)|Kernel (\S+))"
)
_KNOWN = re.compile(
    r"^(?:NCCL version|cudaDriverVersion|NCCL_\w+ set by|Init timings|Setting affinity|"
    r"P2P Chunksize|Comm config|CC |RAS |threadThresholds|Pattern |=== System|\s*\+ |\s+\d+ : |"
    r"=+|NVLS comm|Connected |Bootstrap ?:|NET/Plugin ?:|\w+/Plugin:|Plugin load|"
    r"GPU Direct RDMA|comm \S+ rank \d+ nranks \d+ cudaDev \d+ busId \S+ - (?:Destroy|Abort)|"
    r"NCCL git version|NET/Socket ?:|Using network|NET/IB ?:|NVLS multicast|Channel |Ring |"
    r"Trees|Tree |NVLS Trees|(?:Connected )?Collnet|CollNet )"
)

# PyTorch ProcessGroupNCCL watchdog (nccl-logs.md §11)
_WD_LINE = re.compile(
    r"^(?:.*?\[rank(?P<grank>\d+)\]:)?.*?(?P<body>(?:\[(?:PG [^\]]*?)?Rank \d+\] ?)?"
    r"(?:Watchdog caught collective operation timeout|Exception \(either an error or timeout\)"
    r"|\S* ?failure detected by watchdog|Timeout at NCCL work|Timeout at collective).*)$"
)
_WD_TAG = re.compile(
    r"\[(?:PG ID (?P<id>\S+) PG GUID (?P<guid>[^\s(\]]+)(?:\([^)]*\))?|PG (?P<name>[^\s(\]]+)"
    r"(?: \([^)]*\))?)? ?Rank (?P<rank>\d+)\]"
)
_WD_WORK = re.compile(
    r"WorkNCCL\((?:SeqNum=(?P<seq>\d+), )?OpType=(?P<op>\w+)"
    r"(?:, NumelIn=(?P<nin>\d+), NumelOut=(?P<nout>\d+))?(?:, TensorShape=\[[^\]]*\])?"
    r"(?:, Timeout\(ms\)=(?P<timeout>\d+))?\)(?: ran for (?P<ran>\d+) milliseconds)?"
)
_WD_WORK_AT = re.compile(
    r"(?:at work(?: sequence id)?|NCCL work): (?P<seq>\d+)"
    r"|last enqueued (?:NCCL )?work: (?P<enq>-?\d+)"
    r"|last started (?:NCCL )?work: (?P<start>-?\d+)|last completed (?:NCCL )?work: (?P<done>-?\d+)"
    r"|Timeout at collective: (?P<cop>\w+), #(?P<cseq>\d+)"
)

_WARN_KINDS = (
    ("size_mismatch", re.compile(r"collective mismatch error")),
    ("ib_completion", re.compile(r"NET/IB ?: ?Got completion")),
    ("ib_verbs", re.compile(r"NET/IB ?: ?Got async event|Call to ibv_")),
    ("socket", re.compile(r"socketProgress|Connection closed|Net : |message truncated")),
    ("cuda", re.compile(r"Cuda failure|CUDA error")),
    ("bootstrap", re.compile(r"Bootstrap")),
    ("version_mismatch", re.compile(r"Mismatched NCCL version")),
    ("proxy", re.compile(r"Proxy Call|\[Service thread\]|\[Proxy Thread\]")),
)


def read_logs(paths: Iterable[Path | str]) -> NcclLog:
    log = NcclLog()
    for path in paths:
        with open(path, "rb") as handle:
            parse_stream(handle, log)
        log.paths.append(str(path))
    return log


def parse_text(text: str, log: NcclLog | None = None) -> NcclLog:
    log = log or NcclLog()
    _parse_block(text.replace("\r", ""), log, {})
    return log


def parse_stream(handle: BinaryIO, log: NcclLog) -> None:
    open_warns: dict[tuple[str, int, int], int] = {}  # thread -> index of its latest WARN
    for block in blocks(handle):
        _parse_block(block, log, open_warns)


def blocks(handle: BinaryIO, size: int = BLOCK) -> Iterator[str]:
    """Text blocks cut after a line end; invalid UTF-8 replaced, CR dropped."""
    rest = b""
    while chunk := handle.read(size):
        chunk = rest + chunk
        cut = chunk.rfind(b"\n") + 1
        if cut == 0:
            rest = chunk
            continue
        rest = chunk[cut:]
        yield chunk[:cut].decode("utf-8", "replace").replace("\r", "")
    if rest:
        yield rest.decode("utf-8", "replace").replace("\r", "")


def _parse_block(text: str, log: NcclLog, open_warns: dict[tuple[str, int, int], int]) -> None:
    lines = pl.Series("line", text.split("\n"), dtype=pl.String)
    log.lines += len(lines) - (1 if text.endswith("\n") else 0)
    nccl = lines.filter(lines.str.contains("NCCL ", literal=True))
    is_coll = nccl.str.contains(": opCount ", literal=True)
    colls = _coll_frame(nccl.filter(is_coll))
    log.coll_frames.append(colls)
    others = nccl.filter(~is_coll).to_list()
    log.nccl_lines += colls.height
    for line in others:
        m = _LINE.search(line)
        if m is None:
            continue
        log.nccl_lines += 1
        host, pid, tid, src, level, msg = m.groups()
        _dispatch(log, host, int(pid), int(tid), src, level, msg or "", open_warns)
    rare = lines.filter(lines.str.contains(_RARE)).to_list()
    for line in rare:
        if (m := _BARE_VERSION.match(line)) is not None and "NCCL INFO" not in line:
            log.bare_versions.append(m.group(1))
        elif (m := _WD_LINE.match(line)) is not None:
            log.watchdog.append(_watchdog(m.group("body"), _int_or_none(m.group("grank"))))


# COLL line tokens after "NCCL INFO ": Op: opCount X sendbuff X recvbuff X count N datatype N
# op N root N comm X [nranks=N] stream X
_COLL_FIELDS = {1: "opCount", 3: "sendbuff", 5: "recvbuff", 7: "count", 9: "datatype"}


def _coll_frame(lines: pl.Series) -> pl.DataFrame:
    """COLL lines as columns, split in Rust (they can be millions): lines cut short or of
    another shape are dropped."""
    parts = lines.str.split_exact(" NCCL INFO ", 1).struct.unnest()
    head = parts["field_0"].str.extract_groups(_HEAD).struct.unnest()
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
    return frame.filter(shape.fill_null(False) & pl.all_horizontal(pl.all().is_not_null()))


def _int_or_none(text: str | None) -> int | None:
    return int(text) if text else None


def _dispatch(
    log: NcclLog,
    host: str,
    pid: int,
    tid: int,
    src: str,
    level: str,
    msg: str,
    open_warns: dict[tuple[str, int, int], int],
) -> None:
    proc = (host, pid)
    if level == "WARN":
        stamp = None
        log.warns.append(WarnRecord(host, pid, tid, src or None, msg, _warn_kind(msg), stamp))
        open_warns[(host, pid, tid)] = len(log.warns) - 1
        return
    if level != "INFO":
        return  # CALL / TRACE lines: known, not used
    if _UNWIND.match(msg):
        at = open_warns.get((host, pid, tid))
        if at is not None:
            w = log.warns[at]
            log.warns[at] = WarnRecord(
                w.host, w.pid, w.tid, w.source, w.message, w.kind, w.stamp, (*w.unwinding, msg)
            )
        return
    first = msg[:1]
    if first == "C" and msg.startswith("Channel "):
        if (t := _TRANSPORT.match(msg)) is not None:
            log.transports.append(_transport(host, pid, t))
        else:
            log.rings += 1
        return
    if (m := _INIT.match(msg)) is not None:
        log.inits.append(_init(host, pid, m))
        return
    if (m := _CHANNELS.match(msg)) is not None:
        coll, collnet, nvls, p2p, per_peer = m.groups()
        last = next((i for i in reversed(log.inits) if (i.host, i.pid) == proc), None)
        log.channels.append(
            ChannelSummary(
                host,
                pid,
                (last.comm_id or f"{last.nranks} ranks") if last else None,
                int(coll),
                int(collnet) if collnet else None,
                int(nvls) if nvls else None,
                int(p2p),
                int(per_peer),
            )
        )
        return
    if msg.startswith("NCCL version "):
        log.versions[proc] = msg.split()[2]
        return
    if (m := _NODES.match(msg)) is not None:
        log.nodes[proc] = (int(m.group(1)), int(m.group(2)))
        return
    if msg.startswith("Using network "):
        log.networks[proc] = msg[len("Using network ") :].strip()
        return
    if msg.startswith(("NET/IB : Using", "NET/IB: Using")):
        log.ib_devices[proc] = msg.split("Using", 1)[1].strip()
        return
    if msg.startswith(("NET/IB : No device found", "NET/IB: No device found")):
        log.no_ib_device.add(proc)
        return
    if msg.startswith("NVLS multicast support is "):
        log.nvls_support[host] = " not " not in msg
        return
    if (m := _COLLNET.match(msg)) is not None:
        via = m.group(4)
        log.transports.append(
            Transport(
                host,
                pid,
                int(m.group(1)),
                int(m.group(2)),
                -1,
                m.group(3),
                via,
                "COLLNET",
                _net_name(via.removeprefix("COLLNET/")),
                "GDRDMA" in via,
            )
        )
        return
    if (m := _TUNING.match(msg)) is not None:
        op, nbytes, algo, proto, kernel = m.groups()
        log.tunings.append((host, op or "", int(nbytes), algo or kernel or "", proto or ""))
        return
    if _GRAPH.match(msg):
        log.rings += 1
        return
    if not _KNOWN.match(msg):
        log.unknown += 1


def _init(host: str, pid: int, m: re.Match[str]) -> CommInit:
    g = m.groupdict()
    return CommInit(
        host=host,
        pid=pid,
        comm=g["comm"],
        rank=int(g["rank"]),
        nranks=int(g["nranks"]),
        cuda_dev=int(g["cuda"]),
        nvml_dev=int(g["nvml"]) if g["nvml"] else None,
        bus_id=g["bus"],
        comm_id=g["commid"],
        api=g["api"],
        parent=g["parent"],
        color=int(g["color"]) if g["color"] else None,
        complete=g["state"] == "COMPLETE",
    )


def _transport(host: str, pid: int, m: re.Match[str]) -> Transport:
    channel, src, dst, direction, via = m.groups()
    kind = "SHM" if via.startswith("direct shared memory") else via.split("/", 1)[0]  # ≤2.12
    net = _net_name(via[4:]) if kind == "NET" else None
    return Transport(
        host, pid, int(channel), int(src), int(dst), direction, via, kind, net, "GDRDMA" in via
    )


_NET = re.compile(r"^(.+?)/\d+(?:\(\d+\))?(?:/|$)")


def _net_name(rest: str) -> str:
    """``IB/3(12)/GDRDMA`` -> IB; plugin names may hold spaces and slashes: everything before
    the ``/<dev>`` part."""
    m = _NET.match(rest)
    return m.group(1) if m else rest.split("/", 1)[0]


def _warn_kind(message: str) -> str:
    for kind, pattern in _WARN_KINDS:
        if pattern.search(message):
            return kind
    return "other"


def _watchdog(body: str, global_rank: int | None) -> WatchdogRecord:
    tag = _WD_TAG.search(body)
    work = _WD_WORK.search(body)
    fields: dict[str, int] = {}
    cop = None
    for m in _WD_WORK_AT.finditer(body):
        for key, value in m.groupdict().items():
            if value is not None and key != "cop":
                fields[key] = int(value)
        cop = cop or m.group("cop")
    if "Watchdog caught" in body:
        kind = "timeout"
    elif "failure detected by watchdog" in body:
        kind = "failure"
    elif "Exception (either" in body:
        kind = "exception"
    elif "Timeout at collective" in body:
        kind = "desync"
    else:
        kind = "timeout_at"
    seq = int(work.group("seq")) if work and work.group("seq") else fields.get("seq")
    if seq is None:
        seq = fields.get("cseq")
    return WatchdogRecord(
        kind=kind,
        global_rank=global_rank,
        pg=(tag.group("name") or tag.group("guid") or tag.group("id")) if tag else None,
        pg_rank=int(tag.group("rank")) if tag else None,
        seq=seq,
        op_type=work.group("op") if work else cop,
        numel_in=int(work.group("nin")) if work and work.group("nin") else None,
        numel_out=int(work.group("nout")) if work and work.group("nout") else None,
        timeout_ms=int(work.group("timeout")) if work and work.group("timeout") else None,
        ran_ms=int(work.group("ran")) if work and work.group("ran") else None,
        last_enqueued=fields.get("enq"),
        last_started=fields.get("start"),
        last_completed=fields.get("done"),
        line=body.strip(),
    )
