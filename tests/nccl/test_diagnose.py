"""Diagnostics from generated multi-host logs, whose answer is known by construction."""

from __future__ import annotations

import io

from tracecomm.nccl.diagnose import NcclSummary, summarize
from tracecomm.nccl.model import NcclLog
from tracecomm.nccl.parse import parse_stream, parse_text
from tracecomm.synth.nccl_log import LogSpec, nccl_log


def diagnose(spec: LogSpec) -> NcclSummary:
    log = NcclLog()
    parse_stream(io.BytesIO(nccl_log(spec)), log)
    return summarize(log)


def rules(summary: NcclSummary) -> dict[str, tuple[int, ...]]:
    return {d.rule: d.ranks for d in summary.diagnostics if d.severity != "info"}


def test_the_generated_job_yields_exactly_its_faults() -> None:
    spec = LogSpec(
        hosts=("gpu-a01", "gpu-a02", "gpu-b07"),
        versions=("2.24.3", "2.23.4", "2.24.3"),
        socket_hosts=frozenset({"gpu-b07"}),
        warn_rank=5,
        timeout_seq=17,
        absent_rank=6,
        seed=3,
    )
    s = diagnose(spec)
    assert rules(s) == {
        "transport_fallback": (8, 9, 10, 11),  # the ranks of gpu-b07
        "version_mismatch": tuple(range(12)),
        "warn": (5,),
        "hang": (6,),
    }
    text = {d.rule: d.message for d in s.diagnostics}
    assert (
        "socket fallback" in text["transport_fallback"] and "gpu-b07" in text["transport_fallback"]
    )
    assert "2.23.4 on gpu-a02 (ranks 4–7)" in text["version_mismatch"]
    assert (
        "PG ID 0 PG GUID 0 (default_pg): collective seq 17 (ALLREDUCE, numel 4194304)"
        in (text["hang"])
    )
    assert "timed out on ranks 0–5, 7–11; last enqueued 17, last completed 16" in text["hang"]
    assert text["hang"].endswith("never joined: ranks 6")
    assert s.colls == 12 * spec.colls and s.unknown_lines == 0
    assert s.ranks["gpu-b07:41051"] == 11
    assert s.transports["NET/Socket"] == 2 and s.transports["NET/IB"] == 4


def test_a_healthy_job_has_no_findings() -> None:
    s = diagnose(LogSpec(versions=("2.18.5", "2.18.5"), noise=False, seed=1))
    assert rules(s) == {}
    # ≤2.21: one bare version line, from the process of rank 0 only
    (v,) = s.versions
    assert (v.version, v.sources, v.ranks, v.hosts) == (
        "2.18.5+cuda12.2",
        ("bare",),
        (0,),
        ("gpu-a01",),
    )


def test_no_infiniband_at_all() -> None:
    s = diagnose(LogSpec(socket_hosts=frozenset({"gpu-a01", "gpu-a02"})))
    (d,) = [d for d in s.diagnostics if d.rule == "transport_fallback"]
    assert d.message.startswith("inter-node traffic over TCP sockets") and d.severity == "error"
    assert d.ranks == tuple(range(8)) and "(NET/IB found no device)" in d.message
    assert any("nNodes 2" in line for line in d.evidence)


def test_a_single_node_on_sockets_is_fine() -> None:
    s = diagnose(
        LogSpec(hosts=("gpu-a01",), versions=("2.24.3",), socket_hosts=frozenset({"gpu-a01"}))
    )
    assert "transport_fallback" not in rules(s)


def test_fewer_channels_than_the_peers() -> None:
    s = diagnose(LogSpec(channels_short_rank=2))
    (d,) = [d for d in s.diagnostics if d.rule == "fewer_channels"]
    assert d.ranks == (2,) and "(16) than their peers (32)" in d.message


def test_nvls_availability() -> None:
    log = parse_text(
        "a:1:1 [0] NCCL INFO NVLS multicast support is available on dev 0\n"
        "b:2:2 [0] NCCL INFO NVLS multicast support is not available on dev 0\n"
        "a:1:1 [0] NCCL INFO 24 coll channels, 8 collnet channels, 16 nvls channels, "
        "32 p2p channels, 2 p2p channels per peer\n"
    )
    found = {d.rule: d for d in summarize(log).diagnostics}
    assert found["nvls"].severity == "warning" and found["nvls"].hosts == ("b",)
    assert found["collnet"].severity == "info"
