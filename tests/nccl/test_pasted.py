"""Logs as users paste them: every launcher prefix and terminal / chat artefact the parser
handles, each message format of nccl-logs.md and PyTorch's ProcessGroupNCCL it reads, and real
excerpts from public issue threads (source in a comment; hosts as pasted)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from tracecomm.cli import EXIT_OK, app
from tracecomm.nccl.diagnose import Diagnostic, NcclSummary, summarize
from tracecomm.nccl.parse import parse_text, split_launcher
from tracecomm.nccl.quote import quote

LINE = "gpu-a01:4242:4242 [3] NCCL INFO Using network Socket"


def summary(text: str) -> NcclSummary:
    return summarize(parse_text(text))


def found(s: NcclSummary, rule: str) -> Diagnostic:
    (d,) = [d for d in s.diagnostics if d.rule == rule]
    return d


@pytest.mark.parametrize(
    ("prefix", "tag", "rank"),
    [
        ("[1,3]<stdout>:", "mpirun rank 3", 3),  # mpirun --tag-output
        ("[1,3]<stderr>:", "mpirun rank 3", 3),
        ("10.0.0.7: ", "10.0.0.7", None),  # pdsh (DeepSpeed's multi-node launcher)
        ("node-b07: ", "node-b07", None),
        ("(RayWorkerVllm pid=5235) ", "pid 5235", None),  # Ray
        ("(RayWorker pid=12, ip=10.0.0.7) ", "pid 12", None),
        ("[default0]:", "local rank 0", None),  # torchrun --tee 3
        ("0: ", "task 0", 0),  # srun --label
        ("12: [default3]:", "task 12, local rank 3", 12),  # stacked
        ("[2026-02-11 08:15:02] ", None, None),  # a collector's timestamp
        ("2026-02-11T08:15:02.123Z ", None, None),
        ("> ", None, None),  # markdown quote
    ],
)
def test_launcher_prefixes(prefix: str, tag: str | None, rank: int | None) -> None:
    assert split_launcher(prefix + "rest of line") == (tag, "rest of line", rank)
    log = parse_text(prefix + LINE + "\n")
    assert log.networks == {("gpu-a01", 4242): "Socket"} and log.unknown == 0


@pytest.mark.parametrize(
    "line",
    [
        "\x1b[36m(RayWorkerVllm pid=5235)\x1b[0m " + LINE,  # colour codes kept
        " [36m(RayWorkerVllm pid=5235) [0m " + LINE,  # the ESC byte lost in a paste
        LINE + " [32m [repeated 6x across cluster] [0m",  # Ray's de-duplication
        "**" + LINE + "**",  # markdown emphasis
        "`" + LINE + "`",
        "  2%|▏         | 13/620 [01:07<50:20,  4.98s/it]" + LINE,  # a progress bar glued on
        LINE + "\r",  # CRLF
    ],
)
def test_terminal_and_chat_artefacts(line: str) -> None:
    log = parse_text(line + "\n")
    assert log.networks == {("gpu-a01", 4242): "Socket"}


@pytest.mark.parametrize("host", ["[pod-name]", "<cluster_name>", "ip-172-31-0-11", "z292"])
def test_redacted_and_plain_hosts(host: str) -> None:
    log = parse_text(
        f"{host}:919:1150 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [receive] via NET/Socket/0\n"
    )
    (t,) = log.transports
    assert (t.host, t.pid, t.net, t.direction) == (host, 919, "Socket", "receive")


def test_records_glued_into_one_line_and_an_empty_host() -> None:
    # https://github.com/deepseek-ai/DeepEP/issues/106 (lines joined by spaces in the paste)
    # https://github.com/autoscriptlabs/nccl-mesh-plugin/issues/56 (host name removed)
    log = parse_text(
        "NCCL INFO Channel 12/0 : 13[5] -> 5[5] [receive] via NET/IBext/5/GDRDMA          "
        "VM-17-82-centos:11980:12549 [2] NCCL INFO Channel 03/0 : 2[2] -> 10[2] [send] via "
        "NET/IBext/2/GDRDMA                    VM-17-82-centos:11978:12548 [0] NCCL INFO "
        "Channel 12/0 : 8[0] -> 0[0] [receive] via NET/IBext/0/GDRDMA\n"
        ":22901:22901 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/IB/4\n"
    )
    assert [(t.host, t.pid, t.src, t.dst, t.net) for t in log.transports] == [
        ("?", -1, 13, 5, "IBext"),
        ("VM-17-82-centos", 11980, 2, 10, "IBext"),
        ("VM-17-82-centos", 11978, 8, 0, "IBext"),
        ("?", 22901, 0, 1, "IB"),
    ]
    assert log.nccl_lines == 4 and log.unknown == 0


def test_prefixless_nccl_lines_still_count() -> None:
    log = parse_text("NCCL INFO Using network Socket\nNCCL INFO NET/IB : No device found.\n")
    assert log.nccl_lines == 2 and log.unknown == 0
    assert summary("NCCL INFO Using network Socket\n").processes == 0


# --- socket transport: every signal, and where it is not one ----------------------------------


def test_socket_channel_lines_prove_inter_node_sockets_with_redacted_hosts() -> None:
    # https://github.com/NVIDIA/nccl/issues/952 (hosts redacted as <cluster_name>)
    s = summary(
        "<cluster_name>:920:1145 [1] NCCL INFO Channel 04/0 : 9[1] -> 10[2] via P2P/IPC/read\n"
        "<cluster_name>:919:1150 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [receive] via "
        "NET/Socket/0\n"
        "<cluster_name>:919:1150 [0] NCCL INFO Channel 00/0 : 8[0] -> 0[0] [send] via "
        "NET/Socket/0\n"
    )
    d = found(s, "transport_fallback")
    assert d.severity == "error" and d.hosts == ("<cluster_name>",)
    assert d.evidence == (
        "<cluster_name>:919:1150 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [receive] via "
        "NET/Socket/0",
    )


def test_libibverbs_warn_then_socket_one_host_pasted() -> None:
    # https://github.com/facebookresearch/detectron2/issues/4730 (a multi-node job, one host)
    s = summary(
        "cvlab189-System-Product-Name:1379562:1379562 [0] NCCL INFO Bootstrap : Using "
        "enp36s0f1:168.188.129.189<0>\n\n"
        "cvlab189-System-Product-Name:1379562:1379562 [0] misc/ibvwrap.cc:63 NCCL WARN Failed to "
        "open libibverbs.so[.1]\n"
        "cvlab189-System-Product-Name:1379562:1379562 [0] NCCL INFO NET/Socket : Using "
        "[0]enp36s0f1:168.188.129.189<0>\n"
        "cvlab189-System-Product-Name:1379562:1379562 [0] NCCL INFO Using network Socket\n"
        "NCCL version 2.10.3+cuda11.3\n"
    )
    d = found(s, "transport_fallback")
    assert d.severity == "warning" and "libibverbs" in d.message
    assert found(s, "warn").severity == "info"  # the WARN itself is a notice
    assert [v.version for v in s.versions] == ["2.10.3+cuda11.3"]


def test_no_ib_device_on_many_hosts() -> None:
    # https://github.com/NVIDIA/nccl/issues/226 (NCCL 2.4.7, eight AWS hosts)
    s = summary(
        "ip-172-31-0-11:45384:45384 [0] NCCL INFO NET/IB : No device found.\n"
        "NCCL version 2.4.7+cuda9.2\n"
        "ip-172-31-10-182:45407:45407 [0] NCCL INFO NET/Socket : Using [0]ens3:172.31.10.182<0>\n"
        "ip-172-31-10-182:45407:45407 [0] NCCL INFO NET/Plugin : No plugin found "
        "(libnccl-net.so).\n"
        "ip-172-31-10-182:45407:45407 [0] NCCL INFO NET/IB : No device found.\n"
    )
    d = found(s, "transport_fallback")
    assert d.severity == "error" and d.hosts == ("ip-172-31-0-11", "ip-172-31-10-182")
    assert "NET/IB found no device" in d.message


def test_two_hosts_on_sockets() -> None:
    # https://github.com/NVIDIA/nccl/issues/447 (NCCL 2.7.8, slurm on GCP)
    s = summary(
        "slurm-train-compute-0-0:2139:2139 [0] NCCL INFO NET/IB : No device found.\n"
        "slurm-train-compute-0-0:2139:2139 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.34<0>\n"
        "slurm-train-compute-0-0:2139:2139 [0] NCCL INFO Using network Socket\n"
        "NCCL version 2.7.8+cuda10.2\n"
        "slurm-train-compute-0-1:2119:2119 [1] NCCL INFO NET/IB : No device found.\n"
        "slurm-train-compute-0-1:2119:2119 [1] NCCL INFO Using network Socket\n"
        "slurm-train-compute-0-0:2139:2250 [0] NCCL INFO Channel 00/02 :    0   1\n"
    )
    d = found(s, "transport_fallback")
    assert d.severity == "error"
    assert d.hosts == ("slurm-train-compute-0-0", "slurm-train-compute-0-1")


def test_old_channel_lines_via_socket_with_mpirun_prefixes() -> None:
    # https://github.com/horovod/horovod/issues/3658 (NCCL 2.4-era lines, two hosts)
    s = summary(
        "[1,1]<stdout>:ip-172-31-0-63:2121:2136 [1] NCCL INFO NET/Socket: Using 2 threads and 8 "
        "sockets per thread\n"
        "[1,1]<stdout>:ip-172-31-0-63:2121:2136 [1] NCCL INFO Channel 01 : 1[1c0] -> 2[1d0] "
        "[send] via NET/Socket/0\n"
        "[1,4]<stdout>:ip-172-31-12-129:1759:1773 [0] NCCL INFO Channel 00 : 0[1b0] -> 4[1b0] "
        "[receive] via NET/Socket/0\n"
    )
    d = found(s, "transport_fallback")
    assert d.severity == "error" and d.hosts == ("ip-172-31-0-63", "ip-172-31-12-129")
    assert s.transports == {"NET/Socket": 2} and s.unknown_lines == 0


def test_forced_sockets_and_nnodes() -> None:
    # https://github.com/NVIDIA/nccl-tests/issues/188 (NCCL_IB_DISABLE=1), with 2.20+ nNodes
    s = summary(
        "user:852750:852802 [0] NCCL INFO NCCL_IB_DISABLE set by environment to 1.\n"
        "user:852750:852802 [0] NCCL INFO NET/Socket : Using [0]ibs85f0:192.168.1.14<0> "
        "[1]ib0:192.168.1.15<0>\n"
        "user:852750:852802 [0] NCCL INFO Using network Socket\n"
        "user:852750:852802 [0] NCCL INFO comm 0x1 rank 0 nRanks 16 nNodes 2 localRanks 8 "
        "localRank 0 MNNVL 0\n"
    )
    d = found(s, "transport_fallback")
    assert d.severity == "error" and "forced: NCCL_IB_DISABLE=1" in d.message
    assert any("nNodes 2" in line for line in d.evidence)


def test_single_node_by_its_connections_is_info() -> None:
    # every rank of a 2-rank job printed its connections, none over the network
    s = summary(
        "a:1:1 [0] NCCL INFO NET/IB : No device found.\n"
        "a:1:1 [0] NCCL INFO Using network Socket\n"
        "a:1:1 [0] NCCL INFO comm 0x1 rank 0 nranks 2 cudaDev 0 busId 1b000 - Init COMPLETE\n"
        "a:2:2 [1] NCCL INFO comm 0x2 rank 1 nranks 2 cudaDev 1 busId 1c000 - Init COMPLETE\n"
        "a:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC\n"
        "a:2:2 [1] NCCL INFO Channel 00/0 : 1[1] -> 0[0] via P2P/IPC\n"
    )
    assert found(s, "transport_fallback").severity == "info"
    # one rank's connections alone prove nothing: the boundary ranks hold the NET links
    s = summary(
        "a:1:1 [0] NCCL INFO Using network Socket\n"
        "a:1:1 [0] NCCL INFO comm 0x1 rank 0 nranks 16 cudaDev 0 busId 1b000 - Init COMPLETE\n"
        "a:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC\n"
    )
    assert found(s, "transport_fallback").severity == "warning"


def test_single_node_by_nnodes_is_info() -> None:
    s = summary(
        "a:1:1 [0] NCCL INFO NET/IB : No device found.\n"
        "a:1:1 [0] NCCL INFO Using network Socket\n"
        "a:1:1 [0] NCCL INFO comm 0x1 rank 0 nRanks 8 nNodes 1 localRanks 8 localRank 0 MNNVL 0\n"
    )
    assert found(s, "transport_fallback").severity == "info"


@pytest.mark.parametrize(
    "lines",
    [
        # NET/Socket names the bootstrap / OOB interface on every job: not a transport choice
        [
            "a:1:1 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.5<0>",
            "b:2:2 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.6<0>",
        ],
        [
            "a:1:1 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.5<0>",
            "b:2:2 [0] NCCL INFO Bootstrap: Using eth0:10.0.0.6<0>",
        ],
        [
            "a:1:1 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB eth0:10.0.0.5<0>",
            "a:1:1 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.5<0>",
            "b:2:2 [0] NCCL INFO Using network IB",
        ],
        [
            "a:1:1 [0] NCCL INFO Using network AWS Libfabric",
            "b:2:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/AWS Libfabric/0/GDRDMA",
        ],
    ],
)
def test_no_socket_finding(lines: list[str]) -> None:
    s = summary("\n".join(lines) + "\n")
    assert not [d for d in s.diagnostics if d.rule == "transport_fallback"]


def test_one_node_falls_back_while_the_others_use_ib() -> None:
    s = summary(
        "a:1:1 [0] NCCL INFO Using network IB\n"
        "b:2:2 [0] NCCL INFO NET/IB : No device found.\n"
        "b:2:2 [0] NCCL INFO Using network Socket\n"
    )
    d = found(s, "transport_fallback")
    assert d.severity == "error" and d.message.startswith("socket fallback: 1 process on b")


# --- versions --------------------------------------------------------------------------------


def test_versions_per_host_and_rank_and_their_mismatch() -> None:
    s = summary(
        "[1,0]<stdout>:NCCL version 2.18.5+cuda12.2\n"
        "a:1:1 [0] NCCL INFO comm 0x1 rank 0 nranks 16 cudaDev 0 busId 1b000 - Init COMPLETE\n"
        "b:2:2 [0] NCCL INFO NCCL version 2.24.3+cuda12.4\n"
        "b:2:2 [0] NCCL INFO comm 0x2 rank 8 nranks 16 cudaDev 0 busId 1b000 - Init COMPLETE\n"
        "[rank9]:[I1209 23:39:42.495654 ProcessGroupNCCL.cpp:914] [PG ID 0 PG GUID 0 Rank 9] "
        "ProcessGroupNCCL environments: NCCL version: 2.24.3, TORCH_NCCL_DUMP_ON_TIMEOUT: 0\n"
    )
    got = {(v.version, v.ranks, v.hosts, v.sources) for v in s.versions}
    assert got == {
        ("2.18.5+cuda12.2", (0,), (), ("bare",)),
        ("2.24.3+cuda12.4", (8,), ("b",), ("info",)),
        ("2.24.3", (9,), (), ("torch",)),
    }
    d = found(s, "version_mismatch")
    assert d.severity == "error" and d.ranks == (0, 8, 9)
    assert "2.18.5 (ranks 0); 2.24.3 on b (ranks 8–9)" in d.message


def test_same_version_in_every_form_is_no_mismatch() -> None:
    s = summary(
        "NCCL version 2.19.3+cuda12.3\n"
        "[rank1]:[I1209 ProcessGroupNCCL.cpp:914] [PG 0 Rank 1] ProcessGroupNCCL environments: "
        "NCCL version: 2.19.3, TORCH_NCCL_ASYNC_ERROR_HANDLING: 1\n"
    )
    assert not [d for d in s.diagnostics if d.rule == "version_mismatch"]


# --- watchdog formats ------------------------------------------------------------------------


def test_current_format_pairs_untagged_timeouts_with_their_group() -> None:
    # issue 20: "[PG 1 Rank 0] Exception …" (no op) with "[Rank 0] Watchdog caught …" (no group)
    s = summary(
        "[rank0]:[E1123 00:52:57.66 ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught collective "
        "operation timeout: WorkNCCL(SeqNum=1580, OpType=ALLREDUCE, NumelIn=8, NumelOut=8, "
        "Timeout(ms)=600000) ran for 600017 milliseconds before timing out.\n"
        "[rank0]:[E1123 00:52:57.66 ProcessGroupNCCL.cpp:1664] [PG 1 Rank 0] Exception (either an "
        "error or timeout) detected by watchdog at work: 1580, last enqueued NCCL work: 1582, last "
        "completed NCCL work: 1579.\n"
    )
    d = found(s, "hang")
    assert (d.pg, d.seq, d.op, d.ranks) == ("PG 1", 1580, "ALLREDUCE", (0,))
    assert "last enqueued 1582, last completed 1579" in d.message
    (t,) = s.watchdog_timeouts
    assert t.ranks[0].timeout_ms == 600000 and t.ranks[0].last_enqueued_seq == 1582


def test_issue_example_with_line_number_prefixes() -> None:
    # https://github.com/hiyouga/LlamaFactory/issues/7396 (the "[80746] " prefixes as pasted)
    s = summary(
        "[80746] [rank0]:[E321 02:07:08.408271257 ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog "
        "caught collective operation timeout: WorkNCCL(SeqNum=1580, OpType=ALLREDUCE, "
        "NumelIn=466119168, NumelOut=466119168, Timeout(ms)=600000) ran for 600060 milliseconds "
        "before timing out.\n"
        "[80747] [rank4]:[E321 02:07:08.414640780 ProcessGroupNCCL.cpp:607] [Rank 4] Watchdog "
        "caught collective operation timeout: WorkNCCL(SeqNum=1580, OpType=ALLREDUCE, "
        "NumelIn=466119168, NumelOut=466119168, Timeout(ms)=600000) ran for 600067 milliseconds "
        "before timing out.\n"
        "[80748] [rank0]:[E321 02:07:08.465150152 ProcessGroupNCCL.cpp:1664] [PG 1 Rank 0] "
        "Exception (either an error or timeout) detected by watchdog at work: 1580, last enqueued "
        "NCCL work: 1582, last completed NCCL work: 1579.\n"
        "[80749] [rank3]:[E321 02:07:08.465224069 ProcessGroupNCCL.cpp:1664] [PG 1 Rank 3] "
        "Exception (either an error or timeout) detected by watchdog at work: 1580, last enqueued "
        "NCCL work: 1582, last completed NCCL work: 1579.\n"
    )
    d = found(s, "hang")
    assert (d.pg, d.seq, d.op, d.ranks) == ("PG 1", 1580, "ALLREDUCE", (0, 3, 4))
    assert s.processes == 3


def test_the_pg_named_in_the_exception_text() -> None:
    # https://github.com/sgl-project/sglang/issues/1693 ("process group ?" on main)
    s = summary(
        "terminate called after throwing an instance of 'c10::DistBackendError'\n"
        "  what():  [PG 3 Rank 5] Process group watchdog thread terminated with exception: [Rank "
        "5] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9141, "
        "OpType=_ALLGATHER_BASE, NumelIn=19008, NumelOut=152064, Timeout(ms)=600000) ran for "
        "600020 milliseconds before timing out.\n"
    )
    d = found(s, "hang")
    assert (d.pg, d.seq, d.op, d.ranks) == ("PG 3", 9141, "_ALLGATHER_BASE", (5,))


def test_wrapped_mid_word_in_the_op_type() -> None:
    # https://github.com/huggingface/open-r1/issues/620 (hard wraps inside OpType / NumelOut)
    s = summary(
        "` ProcessGroupNCCL.cpp:629] [Rank 1] Watchdog caught collective operation timeout: "
        "WorkNCCL(SeqNum=4, OpType=BROADCAST, NumelIn=112, Numel\n"
        "Out=112, Timeout(ms)=1800000) ran for 1800010 milliseconds before timing out.\n"
        "[rank2]:[E424 01:11:21.160832730 ProcessGroupNCCL.cpp:629] [Rank 2] Watchdog caught "
        "collective operation timeout: WorkNCCL(SeqNum=4, OpTy\n"
        "pe=BROADCAST, NumelIn=112, NumelOut=112, Timeout(ms)=1800000) ran for 1800010 "
        "milliseconds before timing out.\n"
    )
    d = found(s, "hang")
    assert (d.seq, d.op, d.ranks) == (4, "BROADCAST", (1, 2)) and "numel 112" in d.message
    assert s.watchdog_events == 2


def test_old_format_counts_every_rank() -> None:
    # torch ≤2.1: no [rank<G>]: prefix, no group; four ranks time out at one seq
    text = "".join(
        f"[E ProcessGroupNCCL.cpp:475] [Rank {r}] Watchdog caught collective operation timeout: "
        f"WorkNCCL(SeqNum=5, OpType=ALLREDUCE, NumelIn=1024, NumelOut=1024, Timeout(ms)=1800000) "
        "ran for 1800483 milliseconds before timing out.\n"
        for r in range(4)
    )
    d = found(summary(text), "hang")
    assert (
        d.ranks == (0, 1, 2, 3) and "timed out on ranks 0–3 (ranks within the group)" in d.message
    )


def test_groups_are_kept_apart() -> None:
    text = "".join(
        f"[rank{r}]:[E1129 09:00:01.1 ProcessGroupNCCL.cpp:616] [PG {pg} Rank {r % 2}] Watchdog "
        f"caught collective operation timeout: WorkNCCL(SeqNum={seq}, OpType={op}, NumelIn=4, "
        "NumelOut=4, Timeout(ms)=600000) ran for 600042 milliseconds before timing out.\n"
        for r, pg, seq, op in [
            (0, 3, 900, "ALLREDUCE"),
            (1, 3, 900, "ALLREDUCE"),
            (2, 5, 17, "BROADCAST"),
        ]
    )
    s = summary(text)
    got = sorted((d.pg, d.seq, d.op, d.ranks) for d in s.diagnostics if d.rule == "hang")
    assert got == [("PG 3", 900, "ALLREDUCE", (0, 1)), ("PG 5", 17, "BROADCAST", (2,))]


def test_failure_line_with_guid_desc_and_double_space() -> None:
    # PyTorch ≈2.7 (two spaces after the tag), NumelIn=8388608, last enqueued far ahead
    s = summary(
        "[rank3]:[E710 18:00:32.426182607 ProcessGroupNCCL.cpp:757] [Rank 3] Watchdog caught "
        "collective operation timeout: WorkNCCL(SeqNum=59958, OpType=ALLREDUCE, NumelIn=8388608, "
        "NumelOut=8388608, Timeout(ms)=1800000) ran for 1800077 milliseconds before timing out.\n"
        "[rank3]:[E710 18:00:32.426302794 ProcessGroupNCCL.cpp:2395] [PG ID 0 PG GUID "
        "0(default_pg) Rank 3]  failure detected by watchdog at work sequence id: 59958 PG "
        "status: last enqueued work: 59998, last completed work: 59957\n"
        "[rank7]:[E710 18:00:32.686716232 ProcessGroupNCCL.cpp:1987] [PG ID 0 PG GUID "
        "0(default_pg) Rank 7] Received a dump signal due to a collective timeout from  rank 3 and "
        "we will try our best to dump the debug info. Last enqueued NCCL work: 59957, last "
        "completed NCCL work: 59957.This is most likely caused by incorrect usages\n"
    )
    d = found(s, "hang")
    assert d.pg == "PG ID 0 PG GUID 0 (default_pg)" and d.seq == 59958
    # rank 7 is a rank of the job (default group) that reported no timeout for seq 59958
    assert d.ranks == (7,) and "never joined: ranks 7" in d.message
    assert s.watchdog_events == 3


def test_desync_report_and_stuck_watchdog() -> None:
    s = summary(
        "[E ProcessGroupNCCL.cpp:900] [Rank 0] Timeout at collective: ALLREDUCE, #17\n"
        "[E ProcessGroupNCCL.cpp:900] [Rank 0] [0, 1, 3] joined but didn't finish collective "
        "#17\n"
        "[E ProcessGroupNCCL.cpp:900] [Rank 0] [2] didn't join collective #17\n"
        "[rank0]:[E ProcessGroupNCCL.cpp:1200] [PG ID 0 PG GUID 0(default_pg) Rank 0] "
        "ProcessGroupNCCL's watchdog got stuck for 480 seconds without making progress in "
        "monitoring enqueued collectives.\n"
    )
    d = found(s, "hang")
    assert d.seq == 17 and "never joined: ranks 2" in d.message
    assert "480 s" in found(s, "watchdog_stuck").message


def test_hard_wrapped_watchdog_line_across_blocks() -> None:
    from io import BytesIO

    from tracecomm.nccl.model import NcclLog
    from tracecomm.nccl.parse import blocks, parse_stream

    head = (
        "[rank4]:[E304 12:54:52.1 ProcessGroupNCCL.cpp:616] [Rank 4] **Watchdog caught "
        "collective operation timeout:** WorkNCCL(SeqNum=151721, OpType=_ALLGATHER_BASE, "
        "NumelIn=8080, NumelOut=1\n"
    )
    tail = "29280, Timeout(ms)=600000) ran for 600049 milliseconds before timing out.\n"
    data = (head + tail).encode()
    assert len(list(blocks(BytesIO(data), size=len(head)))) == 2  # the wrap falls on the cut
    log = NcclLog()
    parse_stream(BytesIO(data), log, block_size=len(head))
    (w,) = log.watchdog
    assert (w.seq, w.numel_in, w.numel_out, w.timeout_ms) == (151721, 8080, 129280, 600000)


# --- severity and the header -----------------------------------------------------------------


@pytest.mark.parametrize(
    "warn",
    [
        "init.cc:540 NCCL WARN CollNet is not supported or fails to initialize, ignoring "
        "NCCL_ALGO=COLLNET",
        "net.cc:100 NCCL WARN NET/Plugin : No plugin found (libnccl-net.so).",
        "misc/ibvwrap.cc:63 NCCL WARN Failed to open libibverbs.so[.1]",
    ],
)
def test_notices_are_info(warn: str) -> None:
    s = summary(f"a:1:7 [0] {warn}\n")
    assert found(s, "warn").severity == "info"


def test_header_counts_every_process() -> None:
    text = "".join(
        f"gpu-{h}:{100 + p}:{100 + p} [{p}] NCCL INFO cudaDriverVersion 12040\n"
        for h in range(2)
        for p in range(4)
    )
    s = summary(text)
    assert (s.processes, s.hosts) == (8, ("gpu-0", "gpu-1"))


def test_nothing_from_a_log_reaches_the_terminal_unescaped(tmp_path: Path) -> None:
    log = tmp_path / "job.log"
    log.write_text(
        "a:1:1 [0] misc/socket.cc:63 NCCL WARN socketProgress: Connection closed \x1b]0;pwned\x07"
        "\x1b[2J\u202e by peer\n"
        "[rank0]:[E1 ProcessGroupNCCL.cpp:1] [PG \x1b[31mX Rank 0] Watchdog caught collective "
        "operation timeout: WorkNCCL(SeqNum=1, OpType=ALL\x1bREDUCE) ran for 5 milliseconds "
        "before timing out.\n"
    )
    result = CliRunner().invoke(app, ["nccl", str(log)])
    assert result.exit_code == EXIT_OK
    assert (
        "\x1b" not in result.stdout
        and "\u202e" not in result.stdout
        and "\x07" not in result.stdout
    )
    assert "\\x1b]0;pwned\\x07" in result.stdout


def test_quote() -> None:
    assert quote("a\x1b[31mb\x00c\u202ed\te") == "a\\x1b[31mb\\x00c\\u202ed\\x09e"
    assert quote("x" * 10, 4) == "xxxx…"
