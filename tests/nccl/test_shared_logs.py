"""The real log excerpts of ../shared/data/nccl-logs: each gives exit 0 and the finding its
INDEX.tsv reading names (socket or not, the timed-out op and seq, the ranks, the version), and
no false alarm. Skipped when ../shared is absent."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from typer.testing import CliRunner

from tracecomm.cli import EXIT_OK, app
from tracecomm.nccl.diagnose import Diagnostic, NcclSummary, summarize
from tracecomm.nccl.parse import read_logs

LOGS = Path(__file__).resolve().parents[3] / "shared" / "data" / "nccl-logs"
SCHEMA = Path(__file__).parents[2] / "tracecomm" / "schema" / "nccl.schema.json"

pytestmark = pytest.mark.skipif(not LOGS.is_dir(), reason="../shared is not present")


def index() -> dict[str, str]:
    if not LOGS.is_dir():
        return {}
    with (LOGS / "INDEX.tsv").open() as handle:
        return {row["file"]: row["human_reading"] for row in csv.DictReader(handle, delimiter="\t")}


def summary(name: str) -> NcclSummary:
    return summarize(read_logs([LOGS / name]))


def alarms(s: NcclSummary) -> list[Diagnostic]:
    return [d for d in s.diagnostics if d.severity != "info"]


def only(s: NcclSummary, rule: str) -> Diagnostic:
    (d,) = [d for d in alarms(s) if d.rule == rule]
    return d


def versions(s: NcclSummary) -> dict[str, tuple[int, ...]]:
    return {v.version: v.ranks for v in s.versions}


def test_every_log_is_indexed() -> None:
    assert sorted(index()) == sorted(p.name for p in LOGS.glob("*.log"))


@pytest.mark.parametrize("name", sorted(index()))
def test_every_log_exits_0_with_a_valid_document(name: str) -> None:
    result = CliRunner().invoke(app, ["nccl", str(LOGS / name), "--format", "json"])
    assert result.exit_code == EXIT_OK, result.output
    doc: dict[str, Any] = json.loads(result.stdout)
    jsonschema.validate(doc, json.loads(SCHEMA.read_text()))
    text = CliRunner().invoke(app, ["nccl", str(LOGS / name)])
    assert text.exit_code == EXIT_OK
    assert "\x1b" not in text.stdout  # the log's lost colour codes are not replayed


def test_nvidia_nccl_179_ib_old_format_no_fallback() -> None:
    # IB: NCCL 2.3.7 'Using internal Network IB' with 4 mlx5 HCAs; NET/Socket is bootstrap only
    s = summary("NVIDIA_nccl_179.log")
    assert alarms(s) == [] and s.networks == {"IB": ["learnfair0536"]}
    assert versions(s) == {"2.3.7+cuda9.0": (0,)}
    assert s.processes == 3 and s.unknown_lines == 0


def test_nvidia_nccl_224_roce_with_socket_interface_lines() -> None:
    # RoCE chosen; NET/Socket interface lines at init are not a fallback; mpirun prefixes
    s = summary("NVIDIA_nccl_224.log")
    assert alarms(s) == [] and not any(d.rule == "transport_fallback" for d in s.diagnostics)
    assert versions(s) == {"2.4.2+cuda10.0": (0,)}  # printed by mpirun rank 0
    assert s.processes == 4 and s.hosts == ("gpu6", "gpu7")


def test_rccl_single_node_socket_is_not_flagged() -> None:
    # RCCL 2.21.5 single node z292, no libibverbs -> NET/Socket, no inter-node traffic
    s = summary("ROCm_rccl-tests_163.log")
    assert alarms(s) == []
    (note,) = [d for d in s.diagnostics if d.rule == "transport_fallback"]
    assert note.severity == "info" and "one node" in note.message
    (v,) = s.versions
    assert (v.library, v.version) == ("RCCL", "2.21.5-HEAD:9a0e6a1")


def test_llamafactory_ranks_at_different_seqs_are_a_desync() -> None:
    # rank 0 at SeqNum 1516 (numel 25427968) but rank 1 at SeqNum 1517 (numel 1): diverged
    s = summary("hiyouga_LlamaFactory_2902.log")
    d = only(s, "desync")
    assert d.pg == "PG 1" and d.seq == 1516 and d.op == "ALLREDUCE" and d.ranks == (0, 1)
    assert "rank 0 at seq 1516 (ALLREDUCE, numel 25427968)" in d.message
    assert "rank 1 at seq 1517 (ALLREDUCE, numel 1)" in d.message
    (t,) = s.watchdog_timeouts
    assert t.desync and t.timed_out_ranks == (0, 1) and t.ranks_are_global
    assert len(alarms(s)) == 1


def test_accelerate_socket_over_docker_bridges() -> None:
    # 'Using network Socket' over 14 interfaces incl. docker bridges / veth; pdsh prefix
    s = summary("huggingface_accelerate_1317.log")
    d = only(s, "transport_fallback")
    assert d.severity == "warning" and d.hosts == ("lambda-scalar03",)
    assert "14 interface(s)" not in d.message and "14 interfaces" in d.message
    assert "NCCL_SOCKET_IFNAME" in d.message
    assert any("Using network Socket" in line for line in d.evidence)


def test_diffsynth_coalesced_timeout_on_two_ranks_of_one_group() -> None:
    # COALESCED SeqNum 610 on ranks 4, 6 (PG ID 2 PG GUID 9), last enqueued 616 / completed 609
    s = summary("modelscope_DiffSynth-Studio_458.log")
    d = only(s, "hang")
    assert (d.pg, d.seq, d.op, d.ranks) == ("PG ID 2 PG GUID 9", 610, "COALESCED", (4, 6))
    assert "last enqueued 616, last completed 609" in d.message
    (t,) = s.watchdog_timeouts
    assert (t.pg_id, t.pg_guid, t.last_enqueued_seq, t.last_completed_seq) == ("2", "9", 616, 609)
    assert len(alarms(s)) == 1


def test_pytorch_118369_old_format_two_groups() -> None:
    # ALLREDUCE, no Numel: rank 0 at SeqNum 96117-96125, rank 7 at SeqNum 64088 (other PG)
    s = summary("pytorch_pytorch_118369.log")
    hangs = sorted((d for d in alarms(s) if d.rule == "hang"), key=lambda d: d.seq or 0)
    assert [(d.seq, d.op, d.ranks) for d in hangs] == [
        (64088, "ALLREDUCE", (7,)),
        (96117, "ALLREDUCE", (0,)),
    ]
    assert "rank 0 also timed out at seq 96120, 96125" in hangs[1].message
    assert len(alarms(s)) == 2 and s.processes == 2


def test_pytorch_22531_socket_ring_between_two_machines() -> None:
    # NCCL 2.4.2, WARN failed to open libibverbs, ring via NET/Socket/0 between 2 machines
    s = summary("pytorch_pytorch_22531.log")
    d = only(s, "transport_fallback")
    assert d.severity == "error" and d.ranks == (0,)
    assert any("via NET/Socket/0" in line for line in d.evidence)
    assert any("libibverbs" in line for line in d.evidence)
    assert versions(s) == {"2.4.2+cuda10.0": (0,)}
    assert [d.rule for d in alarms(s)] == ["transport_fallback"]  # the WARN is a notice


def test_pytorch_54232_no_ib_device_then_socket() -> None:
    # NCCL 2.7.8, 'NET/IB : No device found' -> 'Using network Socket' on host emu
    s = summary("pytorch_pytorch_54232.log")
    d = only(s, "transport_fallback")
    assert d.severity == "warning" and d.hosts == ("emu",)
    assert "NET/IB found no device" in d.message
    assert any("No device found" in line for line in d.evidence)
    assert versions(s) == {"2.7.8+cuda10.2": (0,)}
    assert s.processes == 2


def test_sglang_wrapped_markdown_allgather_timeout() -> None:
    # _ALLGATHER_BASE SeqNum 151721 on rank 4 (PG ID 2 GUID 3); markdown ** and hard wraps
    s = summary("sgl-project_sglang_3932.log")
    d = only(s, "hang")
    assert (d.pg, d.seq, d.op, d.ranks) == ("PG ID 2 PG GUID 3", 151721, "_ALLGATHER_BASE", (4,))
    (t,) = s.watchdog_timeouts
    assert (t.numel_in, t.numel_out) == (8080, 129280)  # "NumelOut=1" + "29280" re-joined
    assert (t.last_enqueued_seq, t.last_completed_seq) == (151721, 151720)


def test_vllm_ray_prefix_and_lost_colour_codes() -> None:
    # ALLREDUCE SeqNum 20518 on [Rank 4]; Ray prefix, ' [36m'; single-node TP=8 P2P/IPC init
    s = summary("vllm-project_vllm_2734.log")
    d = only(s, "hang")
    assert (d.seq, d.op, d.ranks) == (20518, "ALLREDUCE", (4,))
    assert "numel 106496" in d.message
    assert len(alarms(s)) == 1
    assert s.transports == {"P2P": 1} and s.hosts == ("[pod-name]",) and s.processes == 4
    assert s.ranks == {"[pod-name]:5310": 7}


def test_several_files_keep_each_line_to_its_own_file_and_process(tmp_path: Path) -> None:
    # three jobs' logs in one folder, each printing the bare (≤2.21, rank 0) version line; only
    # pytorch_22531 names its process (ZBOX-EN1080K:10379): the other two versions are not it
    names = {
        "NVIDIA_nccl_179.log": "2.3.7+cuda9.0",
        "NVIDIA_nccl_224.log": "2.4.2+cuda10.0",
        "pytorch_pytorch_22531.log": "2.4.2+cuda10.0",
        "pytorch_pytorch_54232.log": "2.7.8+cuda10.2",
    }
    for name in names:
        (tmp_path / name).write_bytes((LOGS / name).read_bytes())
    result = CliRunner().invoke(app, ["nccl", str(tmp_path), "-f", "json"])
    assert result.exit_code == EXIT_OK, result.stderr
    doc = json.loads(result.stdout)
    jsonschema.validate(doc, json.loads(SCHEMA.read_text()))
    seen = {v["version"]: v for v in doc["nccl"]["versions"]}
    for version in set(names.values()):
        files = sorted(Path(f).name for f in seen[version]["files"])
        assert files == sorted(n for n, v in names.items() if v == version)
    assert seen["2.4.2+cuda10.0"]["processes"] == ["ZBOX-EN1080K:10379"]
    assert seen["2.3.7+cuda9.0"]["processes"] == seen["2.7.8+cuda10.2"]["processes"] == []
    text = CliRunner().invoke(app, ["nccl", str(tmp_path)], env={"COLUMNS": "200"}).stdout
    flat = " ".join(text.split())
    assert "in NVIDIA_nccl_179.log" in flat and "in pytorch_pytorch_54232.log" in flat
