"""Every line family of nccl-logs.md, in each version variant it lists (invented hosts)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tracecomm.nccl.model import NcclLog, PgRef
from tracecomm.nccl.parse import parse_text

P = "nodeA-03:40211:40211 [1] NCCL INFO "


def one(line: str) -> NcclLog:
    return parse_text(line + "\n")


@pytest.mark.parametrize(
    ("line", "version"),
    [
        (P + "NCCL version 2.24.3+cuda12.4", "2.24.3+cuda12.4"),  # 2.22+: one per process
        ("nodeA-03:40211:40211 [0] NCCL INFO NCCL version 2.30.7+cuda13.0", "2.30.7+cuda13.0"),
    ],
)
def test_prefixed_version(line: str, version: str) -> None:
    (v,) = one(line).versions
    assert (v.version, v.source, v.host, v.pid) == (version, "info", "nodeA-03", 40211)


@pytest.mark.parametrize(
    ("line", "version", "library", "source", "rank"),
    [
        ("NCCL version 2.18.5+cuda12.2", "2.18.5+cuda12.2", "NCCL", "bare", None),  # ≤2.21
        ("[1,0]<stdout>:NCCL version 2.12.12+cuda11.7", "2.12.12+cuda11.7", "NCCL", "bare", 0),
        ("3: NCCL version 2.19.3+cuda12.3", "2.19.3+cuda12.3", "NCCL", "bare", 3),  # srun -l
        ("[default0]:NCCL version 2.19.3+cuda12.3", "2.19.3+cuda12.3", "NCCL", "bare", None),
        ("gpu-a01: NCCL version 2.10.3+cuda11.3", "2.10.3+cuda11.3", "NCCL", "bare", None),
        (
            "\x1b[36m(RayWorker pid=12) \x1b[0mNCCL version 2.21.5+cuda12.4",
            "2.21.5+cuda12.4",
            "NCCL",
            "bare",
            None,
        ),
        ("RCCL version : 2.21.5-HEAD:9a0e6a1", "2.21.5-HEAD:9a0e6a1", "RCCL", "banner", None),
        ("NCCL version 2.3.7+cuda9.0", "2.3.7+cuda9.0", "NCCL", "bare", None),
        (  # PyTorch's environment dump (glog prefix, PG 0 is the world: its rank is global)
            "I0527 15:16:51.665462 58626 ProcessGroupNCCL.cpp:878] [PG 0 Rank 2] ProcessGroupNCCL "
            "environments: NCCL version: 2.18.3, TORCH_NCCL_ASYNC_ERROR_HANDLING: 1",
            "2.18.3",
            "NCCL",
            "torch",
            2,
        ),
        (
            "[rank5]:[I1209 23:39:42.495654 ProcessGroupNCCL.cpp:914] [PG ID 0 PG GUID 0 Rank 5] "
            "ProcessGroupNCCL environments: NCCL version: 2.20.5, TORCH_NCCL_DUMP_ON_TIMEOUT: 0",
            "2.20.5",
            "NCCL",
            "torch",
            5,
        ),
    ],
)
def test_versions_without_an_nccl_prefix(
    line: str, version: str, library: str, source: str, rank: int | None
) -> None:
    (v,) = one(line).versions
    assert (v.version, v.library, v.source, v.rank) == (version, library, source, rank)
    assert v.base == version.split("+")[0].split("-")[0]


INITS = [
    # 2.10–2.15
    (
        "comm 0x55d0c83a1f60 rank 13 nranks 16 cudaDev 5 busId 9c000 - Init COMPLETE",
        dict(rank=13, nranks=16, cuda_dev=5, nvml_dev=None, comm_id=None, api=None),
    ),
    # 2.16–2.18.1: commId
    (
        "comm 0x55d0c83a1f60 rank 13 nranks 16 cudaDev 5 busId 9c000 commId 0x6a1b2c3d4e5f7081"
        " - Init COMPLETE",
        dict(rank=13, comm_id="0x6a1b2c3d4e5f7081", nvml_dev=None),
    ),
    # 2.18.3–2.20: nvmlDev, START and COMPLETE
    (
        "comm 0x55d0c83a1f60 rank 13 nranks 16 cudaDev 5 nvmlDev 5 busId 9c000 commId 0x6a1b2c3d"
        " - Init START",
        dict(nvml_dev=5, comm_id="0x6a1b2c3d", complete=False),
    ),
    # 2.21–2.22: API prefix; splits with parent / color / key
    (
        "ncclCommInitRank comm 0x55d0c83a1f60 rank 13 nranks 16 cudaDev 5 nvmlDev 5 busId 9c000"
        " commId 0x6a1b2c3d4e5f7081 - Init COMPLETE",
        dict(api="ncclCommInitRank", complete=True),
    ),
    (
        "ncclCommSplit comm 0x55d0c9000000 rank 1 nranks 4 cudaDev 5 nvmlDev 5 busId 9c000 "
        "parent 0x55d0c83a1f60 color 2 key 1 commId 0x11aa22bb - Init COMPLETE",
        dict(api="ncclCommSplit", parent="0x55d0c83a1f60", color=2, comm_id="0x11aa22bb"),
    ),
    # 2.23–2.28: any API name; splits gain splitCount, lose commId, no space before the dash
    (
        "ncclCommInitRankConfig comm 0x55d0c83a1f60 rank 13 nranks 16 cudaDev 5 nvmlDev 5 "
        "busId 9c000 commId 0x6a1b2c3d4e5f7081 - Init COMPLETE",
        dict(api="ncclCommInitRankConfig"),
    ),
    (
        "ncclCommSplit comm 0x55d0c9000000 rank 1 nranks 4 cudaDev 5 nvmlDev 5 busId 9c000 "
        "parent 0x55d0c83a1f60 color 2 key 1 splitCount 3- Init START",
        dict(api="ncclCommSplit", comm_id=None, color=2, complete=False),
    ),
    # 2.29+: [Rank r] before START, childCount
    (
        "[Rank 1] ncclCommSplit comm 0x55d0c9000000 rank 1 nranks 4 cudaDev 5 nvmlDev 5 "
        "busId 9c000 parent 0x55d0c83a1f60 color 2 key 1 childCount 3- Init START",
        dict(api="ncclCommSplit", rank=1, nranks=4, complete=False),
    ),
]


@pytest.mark.parametrize(("message", "fields"), INITS)
def test_init_lines(message: str, fields: dict[str, object]) -> None:
    log = one(P + message)
    assert len(log.inits) == 1 and log.unknown == 0
    init = log.inits[0]
    for name, value in fields.items():
        assert getattr(init, name) == value, name


@pytest.mark.parametrize(
    ("message", "counts"),
    [
        ("24 coll channels, 32 p2p channels, 2 p2p channels per peer", (24, None, None, 32, 2)),
        (
            "24 coll channels, 16 nvls channels, 32 p2p channels, 2 p2p channels per peer",
            (24, None, 16, 32, 2),
        ),
        (
            "24 coll channels, 8 collnet channels, 16 nvls channels, 32 p2p channels, "
            "32 p2p channels per peer",
            (24, 8, 16, 32, 32),
        ),
    ],
)
def test_channel_summaries(message: str, counts: tuple[int | None, ...]) -> None:
    c = one(P + message).channels[0]
    assert (c.coll, c.collnet, c.nvls, c.p2p, c.per_peer) == counts


def test_nodes_line() -> None:
    log = one(P + "comm 0x55d0c83a1f60 rank 3 nRanks 16 nNodes 2 localRanks 8 localRank 3 MNNVL 0")
    assert log.nodes == {("nodeA-03", 40211): (2, 8)}


@pytest.mark.parametrize(
    ("message", "kind", "net", "gdr", "direction"),
    [
        ("Channel 00 : 0[1b000] -> 1[1c000] via P2P/IPC", "P2P", None, False, None),  # 2.10
        ("Channel 00 : 2[1b000] -> 3[1c000] via direct shared memory", "SHM", None, False, None),
        ("Channel 01/0 : 3[3] -> 11[3] [send] via NET/IB/0", "NET", "IB", False, "send"),  # 2.12
        (
            "Channel 00/1 : 0[1b000] -> 1[1c000] via P2P/direct pointer/read",
            "P2P",
            None,
            False,
            None,
        ),
        ("Channel 02/0 : 1[1] -> 2[2] via P2P/indirect/3[3]", "P2P", None, False, None),
        ("Channel 02/0 : 1[1] -> 2[2] via P2P/CUMEM/read", "P2P", None, False, None),
        ("Channel 02/0 : 1[1] -> 9[1] via P2P/MNNVL", "P2P", None, False, None),  # 2.20+
        ("Channel 02/1 : 1[1] -> 2[2] via P2P/CUMEM/CE", "P2P", None, False, None),
        ("Channel 03 : 4[4] -> 5[5] via SHM/direct/direct", "SHM", None, False, None),
        ("Channel 03 : 4[4] -> 5[5] via SHM/direct", "SHM", None, False, None),  # 2.30
        ("Channel 03/0 : 14[6] -> 22[6] [send] via NET/IB/3(12)/GDRDMA", "NET", "IB", True, "send"),
        (
            "Channel 03/0 : 22[6] -> 14[6] [receive] via NET/IB/0/GDRDMA(PCI)",
            "NET",
            "IB",
            True,
            "receive",
        ),
        ("Channel 00/0 : 7[7] -> 8[0] [send] via NET/Socket/1", "NET", "Socket", False, "send"),
        (
            "Channel 05/0 : 7[7] -> 8[0] [send] via NET/IBext_v8/2/GDRDMA",
            "NET",
            "IBext_v8",
            True,
            "send",
        ),
        (
            "Channel 05/0 : 7[7] -> 8[0] [send] via NET/AWS Libfabric/0/GDRDMA/Shared",
            "NET",
            "AWS Libfabric",
            True,
            "send",
        ),
    ],
)
def test_transport_lines(
    message: str, kind: str, net: str | None, gdr: bool, direction: str | None
) -> None:
    t = one(P + message).transports[0]
    assert (t.kind, t.net, t.gdr, t.direction) == (kind, net, gdr, direction)


def test_collnet_transport() -> None:
    t = one(P + "CollNet 00/0 : 3 [send] via COLLNET/IB/0/GDRDMA").transports[0]
    assert (t.kind, t.net, t.gdr) == ("COLLNET", "IB", True)


@pytest.mark.parametrize(
    "message",
    [
        "Channel 00/32 :    0   1   2   3   4   5   6   7",  # ≤2.22 ring order
        "Channel 00/32 : 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 ...",  # 2.23+ compact
        "Ring 00 : 7 -> 0 -> 1",
        "Trees [0] 1/-1/-1->0->-1 [1] -1/-1/-1->0->1",
        "Tree 0 : -1 -> 0 -> 1/-1/-1",
        "NVLS Trees : 0/1/2",
        "Collnet Chains 0 -> 1",
        "Connected Collnet Chains",
    ],
)
def test_graph_lines_are_counted(message: str) -> None:
    log = one(P + message)
    assert log.rings == 1 and log.unknown == 0 and not log.transports


@pytest.mark.parametrize(
    "message",
    [
        "cudaDriverVersion 12040",
        "NCCL_IB_HCA set by environment to mlx5",
        "Init timings: rank 0 nranks 16 total 1.02 (kernels 0.20, bootstrap 0.30, allgathers "
        "0.01, topo 0.20, graphs 0.01, connections 0.25, rest 0.05)",
        "Init timings - ncclCommInitRankConfig: rank 0 nranks 16 total 1.02 (kernels 0.20, "
        "alloc 0.01, bootstrap 0.30, allgathers 0.01, topo 0.20, graphs 0.01, connections 0.25, "
        "rest 0.04)",
        "comm 0x55d0c83a1f60 rank 13 nranks 16 cudaDev 5 busId 9c000 - Destroy COMPLETE",
        "comm 0x55d0c83a1f60 rank 13 nranks 16 cudaDev 5 busId 9c000 - Abort COMPLETE",
        "threadThresholds 8/8/64 | 128/8/64 | 512 | 512",
        "threadThresholds 8/8/64 | 128/8/64 | 8/8/512",  # ≤2.13
        "  + PCI[24.0] - NIC/1c000",  # topology dump
        "=====",
        " 1 : NET/0 GPU/0-1b000 GPU/0-1c000 NET/0",  # 2.21+ ids
        "NET/Plugin : dlerror=libnccl-net.so: cannot open shared object file",
        "Setting affinity for GPU 5 to ffff,ffffffff",
        "P2P Chunksize set to 524288",
        "Comm config Blocking set to 1",
        "CC Off, workFifoBytes 1048576",
        "RAS client listening socket at ::1<28028>",
        "Pattern 4, crossNic 0, nChannels 16, bw 40.0/40.0, type NVL/PIX, sameChannels 1",
        "Pattern 4, crossNic 0, nChannels 16, speed 40.0/40.0, type NVL/PIX, sameChannels 1",
        " 0 : NET/0 GPU/0 GPU/1 NET/0",
        "=== System : maxBw 24.0 totalBw 240.0 ===",
        "=== System : maxWidth 24.0 totalWidth 240.0 ===",
        "NVLS comm 0x55d0c83a1f60 headRank 0 nHeads 1 nvlsRanks 8 buffSize 1048576 nvlsTotalSize 1",
        "Connected all rings, use ring PXN 0 GDR 1",
        "Connected all trees",
        "Connected NVLS tree",
        "Connected binomial trees",
        "NET/Plugin : No plugin found (libnccl-net.so), using internal implementation",
        "NET/Plugin: Loaded net plugin IBext_v8 (v8)",
        "TUNER/Plugin: Could not find: libnccl-tuner.so",
        "Plugin load returned 2 : libnccl-net.so: cannot open shared object file",
        "Bootstrap : Using eth0:10.0.0.5<0>",
        "Bootstrap: Using ib0:10.0.0.5<0>",
        "GPU Direct RDMA Enabled for GPU 5 / HCA 3 (distance 4 <= 5), read 1 mode Default",
        "NCCL git version master a1b2c3d",
    ],
)
def test_known_lines_are_not_unknown(message: str) -> None:
    assert one(P + message).unknown == 0


def test_network_selection() -> None:
    log = parse_text(
        "\n".join(
            [
                P + "NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/RoCE [RO]; OOB ib0:10.0.0.5<0>",
                "nodeB-07:9:9 [0] NCCL INFO NET/IB: Using [0]mlx5_0+mlx5_1:1/IB/SHARP ; OOB e<0>",
                "nodeC-01:7:7 [0] NCCL INFO NET/IB : No device found.",
                "nodeC-01:7:7 [0] NCCL INFO NET/Socket : Using [0]eth0:fe80::1%eth0<0>",
                P + "Using network IB",
                "nodeC-01:7:7 [0] NCCL INFO Using network Socket",
                "nodeD-01:5:5 [0] NCCL INFO Using network AWS Libfabric",
                P + "NVLS multicast support is available on dev 1",
                "nodeC-01:7:7 [0] NCCL INFO NVLS multicast support is not available on dev 0",
            ]
        )
    )
    signals = {(proc, name) for proc, name in log.signals}
    assert (("nodeA-03", 40211), "ib_device") in signals
    assert (("nodeB-07", 9), "ib_device") in signals
    assert (("nodeC-01", 7), "no_ib_device") in signals
    assert (("nodeC-01", 7), "socket_selected") in signals
    assert (("nodeD-01", 5), "fast_selected") in signals
    assert log.networks == {
        ("nodeA-03", 40211): "IB",
        ("nodeC-01", 7): "Socket",
        ("nodeD-01", 5): "AWS Libfabric",
    }
    assert log.nvls_support == {"nodeA-03": True, "nodeC-01": False}
    assert log.unknown == 0


@pytest.mark.parametrize(
    ("message", "row"),
    [
        (
            "ReduceScatter: opCount 3f sendbuff 0x7f2a40000000 recvbuff 0x7f2a48000000 count "
            "4194304 datatype 9 op 0 root 0 comm 0x55d0c83a1f60 [nranks=16] stream 0x55d0c7e01230",
            ("ReduceScatter", 0x3F, 4194304, 9, 0, 0, "0x55d0c83a1f60", 16),
        ),
        (
            "Send: opCount 12 sendbuff (nil) recvbuff 0x7f2a48000000 count 1024 datatype 7 op 0 "
            "root 5 comm 0x55d0c83a1f60 [nranks=16] stream 0x55d0c7e01230",
            ("Send", 0x12, 1024, 7, 0, 5, "0x55d0c83a1f60", 16),
        ),
        (
            "AlltoAll: opCount 0 sendbuff 0x7f2a40000000 recvbuff 0x7f2a48000000 count 512 "
            "datatype 10 op 0 root 0 comm 0x55d0c83a1f60 [nranks=8] stream 0x55d0c7e01230",
            ("AlltoAll", 0, 512, 10, 0, 0, "0x55d0c83a1f60", 8),
        ),
        (
            "AllReduce: opCount a sendbuff 0x1 recvbuff 0x1 count 8 datatype 9 op 6 root 0 "
            "comm 0x55d0c83a1f60 [nranks=2] stream 0x2",
            ("AllReduce", 10, 8, 9, 6, 0, "0x55d0c83a1f60", 2),
        ),
        (  # 2.29+ one-sided ops
            "PutSignal: opCount 2 sendbuff 0x1 recvbuff (nil) count 64 datatype 0 op 0 root 3 "
            "comm 0x55d0c83a1f60 [nranks=4] stream 0x2",
            ("PutSignal", 2, 64, 0, 0, 3, "0x55d0c83a1f60", 4),
        ),
    ],
)
def test_coll_lines(message: str, row: tuple[object, ...]) -> None:
    colls = one("[1,3]<stdout>:" + P + message).colls
    assert colls.height == 1
    got = colls.select("op", "op_count", "count", "datatype", "redop", "root", "comm", "nranks")
    assert got.row(0) == row
    assert colls["host"][0] == "nodeA-03" and colls["pid"][0] == 40211


def test_coll_line_cut_at_1023_bytes_is_dropped() -> None:
    line = (P + "AllGather: opCount 1 sendbuff 0x1 recvbuff 0x1 count 4 datatype 9 op 0 ")[:60]
    assert one(line).colls.height == 0


@pytest.mark.parametrize(
    ("message", "tuning"),
    [
        ("1048576 Bytes -> Algo 1 proto 2 time 34.5", ("", 1048576, "1", "2")),  # 2.20–2.22
        ("AllReduce: 1048576 Bytes -> Algo 1 proto 2 time 34.5", ("AllReduce", 1048576, "1", "2")),
        (
            "AllReduce: 1048576 Bytes -> Algo RING proto SIMPLE channel{Lo..Hi}={0..31}",
            ("AllReduce", 1048576, "RING", "SIMPLE"),
        ),
        (
            "AllReduce [Symmetric]: 4096 Bytes -> Kernel AllReduce_Sum_bf16_LL nchannels 8",
            ("AllReduce", 4096, "AllReduce_Sum_bf16_LL", ""),
        ),
        (
            "AllGather [Copy Engine]: 8388608 Bytes -> Algo RING proto SIMPLE "
            "channel{Lo..Hi}={0..0}",
            ("AllGather", 8388608, "RING", "SIMPLE"),
        ),
    ],
)
def test_tuning_lines(message: str, tuning: tuple[object, ...]) -> None:
    assert one(P + message).tunings[0][1:] == tuning


def test_call_and_trace_lines_are_read() -> None:
    log = parse_text(
        "nodeA-03:40211:40211 NCCL CALL ncclAllReduce(0x1,0x2,8,9,0,0,0x3,0x4)\n"
        "nodeA-03:40211:40211 NCCL CALL ncclGroupStart()\n"
        "nodeA-03:40211:40211 [1] 12.345 ncclGroupEnd:100 NCCL TRACE group end\n"
    )
    assert log.nccl_lines == 3 and log.unknown == 0


@pytest.mark.parametrize(
    ("warn", "kind"),
    [
        (
            "transport/net_ib.cc:1732 NCCL WARN NET/IB : Got completion from peer 10.0.0.7<1> "
            "with error 12, opcode 0, len 0, vendor err 129",
            "ib_completion",
        ),
        (
            "transport/net_ib.cc:1732 NCCL WARN NET/IB: Got completion from peer 10.0.0.7<1> with "
            "status=IBV_WC_RETRY_EXC_ERR(12) opcode 0 len 0 vendor err 129 (Send) hca mlx5_0",
            "ib_completion",
        ),
        ("transport/net_ib.cc:140 NCCL WARN NET/IB : Got async event : port error", "ib_verbs"),
        (
            "transport/net_ib.cc:1046 NCCL WARN NET/IB : req 0/1 tag 7 peer 10.0.0.7<1> "
            "collective mismatch error, local size 1024 remote size 2048",
            "size_mismatch",
        ),
        (
            "misc/socket.cc:63 NCCL WARN socketProgress: Connection closed by remote peer h<51502>",
            "socket",
        ),
        ("enqueue.cc:1200 NCCL WARN Cuda failure 'out of memory'", "cuda"),
        ("bootstrap.cc:99 NCCL WARN Bootstrap : no socket interface found", "bootstrap"),
        (
            "init.cc:88 NCCL WARN Mismatched NCCL version detected : rank 3 version 22403",
            "version_mismatch",
        ),
        (
            "proxy.cc:1000 (proxyProgress) NCCL WARN [Service thread] Error encountered "
            "progressing operation=Connect",  # 2.30.7 adds (func)
            "proxy",
        ),
    ],
)
def test_warn_kinds(warn: str, kind: str) -> None:
    log = one("nodeA-03:40211:40377 [1] " + warn)
    assert [w.kind for w in log.warns] == [kind]


def test_warn_folds_its_unwinding_lines() -> None:
    log = parse_text(
        "\n"  # WARN's leading empty line is no record separator
        "[2026-02-11 08:15:02] nodeA-03:40211:40377 [1] misc/socket.cc:63 NCCL WARN "
        "socketProgress: Connection closed by remote peer nodeB-07<51502>\n"
        "nodeA-03:40211:40211 [1] NCCL INFO Using network IB\n"
        "nodeA-03:40211:40377 [1] NCCL INFO misc/socket.cc:752 -> 6\n"
        "nodeA-03:40211:40377 [1] NCCL INFO transport/net.cc:123 (netProgress) -> 6 "
        "[Proxy Thread]\n"
    )
    (warn,) = log.warns
    assert warn.source == "misc/socket.cc:63" and warn.kind == "socket"
    assert warn.unwinding == (
        "misc/socket.cc:752 -> 6",
        "transport/net.cc:123 (netProgress) -> 6 [Proxy Thread]",
    )
    assert log.unknown == 0


WATCHDOG = [
    # torch ≤2.1
    (
        "[E ProcessGroupNCCL.cpp:475] [Rank 3] Watchdog caught collective operation timeout: "
        "WorkNCCL(SeqNum=5, OpType=ALLREDUCE, NumelIn=1024, NumelOut=1024, Timeout(ms)=1800000) "
        "ran for 1800483 milliseconds before timing out.",
        dict(
            kind="timeout", global_rank=None, pg_rank=3, seq=5, op_type="ALLREDUCE", ran_ms=1800483
        ),
    ),
    # ≤≈1.9 descriptor
    (
        "[E ProcessGroupNCCL.cpp:566] [Rank 0] Watchdog caught collective operation timeout: "
        "WorkNCCL(OpType=BROADCAST, TensorShape=[1024], Timeout(ms)=60000) ran for 60110 "
        "milliseconds before timing out.",
        dict(seq=None, op_type="BROADCAST", timeout_ms=60000, numel_in=None),
    ),
    # ≈2.2 PG tag
    (
        "[rank5]:[E1129 09:00:01.123456789 ProcessGroupNCCL.cpp:616] [PG 3 Rank 1] Watchdog "
        "caught collective operation timeout: WorkNCCL(SeqNum=17, OpType=_ALLGATHER_BASE, "
        "NumelIn=512, NumelOut=4096, Timeout(ms)=600000) ran for 600042 milliseconds before "
        "timing out.",
        dict(global_rank=5, pg=PgRef(name="3"), pg_rank=1, seq=17, numel_in=512, numel_out=4096),
    ),
    # ≈2.4: name (desc), and the Exception line
    (
        "[rank0]:[E1129 09:00:01.1 ProcessGroupNCCL.cpp:1537] [PG 0 (default_pg) Rank 0] "
        "Exception (either an error or timeout) detected by watchdog at work: 17, last enqueued "
        "NCCL work: 17, last completed NCCL work: 16.",
        dict(
            kind="exception",
            pg=PgRef(name="0", desc="default_pg"),
            seq=17,
            last_enqueued=17,
            last_completed=16,
        ),
    ),
    # ≈2.6+: PG ID / GUID
    (
        "[rank2]:[E1129 09:00:01.1 ProcessGroupNCCL.cpp:1483] [PG ID 1 PG GUID 3(dp_group) Rank 2]"
        " failure detected by watchdog at work sequence id: 42 PG status: last enqueued work: 42, "
        "last started work: 42, last completed work: 41",
        dict(
            kind="failure",
            pg=PgRef(id="1", guid="3", desc="dp_group"),
            pg_rank=2,
            seq=42,
            last_started=42,
            last_completed=41,
        ),
    ),
    (
        "[rank1]:[E1129 09:00:01.1 ProcessGroupNCCL.cpp:1200] [PG ID 0 PG GUID 0 Rank 1] Timeout "
        "at NCCL work: 9, last enqueued NCCL work: 9, last completed NCCL work: 8.",
        dict(kind="timeout_at", seq=9, last_enqueued=9),
    ),
    (
        "[E ProcessGroupNCCL.cpp:900] Timeout at collective: ALLREDUCE, #17 [0, 1, 3] joined but "
        "didn't finish collective #17",
        dict(kind="desync", seq=17, op_type="ALLREDUCE"),
    ),
]


@pytest.mark.parametrize(("line", "fields"), WATCHDOG)
def test_watchdog_lines(line: str, fields: dict[str, object]) -> None:
    (record,) = one(line).watchdog
    for name, value in fields.items():
        assert getattr(record, name) == value, name


def test_unknown_nccl_lines_are_counted() -> None:
    log = one(P + "Something NCCL 2.40 will print")
    assert log.unknown == 1 and log.nccl_lines == 1


def test_prefixes_crlf_and_bad_bytes(tmp_path: Path) -> None:
    from tracecomm.nccl.parse import read_logs

    path = tmp_path / "job.out"
    path.write_bytes(
        b"10.0.0.7: nodeA-03:1:1 [0] NCCL INFO Using network IB\r\n"
        b"(Worker pid=9) nodeB-01:2:2 [0] NCCL INFO Using network Socket\n"
        b"> nodeC-01:3:3 [0] NCCL INFO Using network IB\n"
        b"app: \xff\xfe garbage\n"
        b"nodeD-01:4:4 [0] NCCL INFO Using network IB"  # no final newline
    )
    log = read_logs([path])
    assert log.networks == {
        ("nodeA-03", 1): "IB",
        ("nodeB-01", 2): "Socket",
        ("nodeC-01", 3): "IB",
        ("nodeD-01", 4): "IB",
    }
    assert log.lines == 5
