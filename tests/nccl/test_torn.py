"""Records torn by processes that share one stream (issue 48): a record cut by another
process's whole record, its tail on the next line. The untorn log the generator writes from
the same spec is the truth: the torn one must name no host, process, rank, size or operation it
does not, and lose at most the records that were torn."""

from __future__ import annotations

import dataclasses
import io
import json
import random
from pathlib import Path

import jsonschema
import polars as pl
import pytest
from typer.testing import CliRunner

from tracecomm.cli import EXIT_OK, app
from tracecomm.nccl.diagnose import NcclSummary, summarize
from tracecomm.nccl.discover import NcclInputs, analyze_nccl
from tracecomm.nccl.model import NcclLog
from tracecomm.nccl.parse import parse_stream, parse_text
from tracecomm.synth.nccl_log import LogSpec, nccl_log, tear

NCCL_SCHEMA = Path(__file__).parents[2] / "tracecomm" / "schema" / "nccl.schema.json"
HOST = "n136-081-017"
# the log: 16 ranks on one host, NCCL_DEBUG_SUBSYS=COLL, 200 collectives each
COLL_ONLY = LogSpec(
    hosts=(HOST,),
    ranks_per_host=16,
    versions=("2.21.5",),
    colls=200,
    coll_only=True,
    noise=False,
    launcher_prefix=False,
)
# every family the generator writes, mpirun tags on odd ranks, application output between
MIXED = LogSpec(
    hosts=("gpu-a01", "gpu-a02", "gpu-b01"),
    versions=("2.24.3", "2.24.3", "2.19.3"),
    socket_hosts=frozenset({"gpu-b01"}),
    warn_rank=3,
    timeout_seq=77,
    absent_rank=5,
    colls=400,
)
RATES = (0.001, 0.01, 0.05)


def read(spec: LogSpec) -> tuple[NcclLog, NcclSummary]:
    log = parse_text(nccl_log(spec).decode("utf-8", "replace"))
    return log, summarize(log)


def coll_rows(log: NcclLog) -> set[tuple[object, ...]]:
    return set(log.colls.rows())


def test_the_untorn_coll_only_log_has_its_16_processes_and_no_tears() -> None:
    log, s = read(COLL_ONLY)
    assert (s.processes, s.hosts, s.colls) == (16, (HOST,), 3200)
    assert s.torn_records == s.torn_recovered == s.damaged_records == 0 and log.tears == {}


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("rate", RATES)
@pytest.mark.parametrize("base", [COLL_ONLY, MIXED], ids=["coll-only", "mixed"])
def test_a_torn_log_invents_nothing_the_untorn_log_lacks(
    base: LogSpec, rate: float, seed: int
) -> None:
    truth_log, truth = read(dataclasses.replace(base, seed=seed))
    spec = dataclasses.replace(base, seed=seed, tear_rate=rate, truths={})
    log, s = read(spec)
    torn = spec.truths["torn_records"]
    assert isinstance(torn, int) and torn > 0
    assert (s.hosts, s.processes, s.ranks) == (truth.hosts, truth.processes, truth.ranks)
    assert (s.versions, s.networks) == (truth.versions, truth.networks)
    assert {d.rule for d in s.diagnostics} == {d.rule for d in truth.diagnostics}
    # every COLL record read is one of the truth's (host, pid, op, opCount, count, type, …)
    assert coll_rows(log) <= coll_rows(truth_log)
    assert truth.colls - torn <= s.colls <= truth.colls
    # a tear the parser cannot see (a non-COLL record cut after a space) leaves a record
    # short of its tail, read as it stands or unknown: never more found than torn
    assert 0 < s.torn_records <= torn and s.torn_recovered <= s.torn_records
    if base is COLL_ONLY:  # every COLL tear is seen and joined back
        assert (s.torn_records, s.torn_recovered, s.colls) == (torn, torn, truth.colls)


@pytest.mark.parametrize("rate", RATES)
def test_one_warning_per_torn_file_names_the_count_and_the_fix(tmp_path: Path, rate: float) -> None:
    clean, torn = tmp_path / "clean.log", tmp_path / "torn.log"
    clean.write_bytes(nccl_log(COLL_ONLY))
    spec = dataclasses.replace(COLL_ONLY, tear_rate=rate, truths={})
    torn.write_bytes(nccl_log(spec))
    summary, warnings = analyze_nccl(NcclInputs((clean, torn), ()))
    assert summary is not None and summary.torn_records == spec.truths["torn_records"]
    (line,) = warnings  # the untorn file has none
    n = spec.truths["torn_records"]
    assert line.startswith(f"{torn}: {n:,} NCCL record") and f"({n:,} joined back" in line
    assert "NCCL_DEBUG_FILE=" in line and "%h.%p.log" in line and "\n" not in line


def test_block_ends_between_a_cut_record_and_its_tail() -> None:
    spec = dataclasses.replace(COLL_ONLY, tear_rate=0.05, truths={})
    data = nccl_log(spec)
    whole = parse_text(data.decode())
    for size in (4096, 10_007):  # small blocks: many cut records end one
        log = NcclLog()
        parse_stream(io.BytesIO(data), log, block_size=size)
        assert log.colls.sort(pl.all()).equals(whole.colls.sort(pl.all()))
        assert log.tears == whole.tears
        assert log.tears[0].recovered == spec.truths["torn_records"]


P = f"{HOST}:4123:4123 [3] NCCL INFO "
Q = f"{HOST}:4124:4124 [4] NCCL INFO "
COLL_A = (
    "AllGather: opCount 3f sendbuff 0x7f33f4030000 recvbuff 0x7f33f8000000 count 4096 datatype "
    "9 op 0 root 0 comm 0x55d0c83a1f60 [nranks=16] stream 0x55d0c7e01230"
)
COLL_B = COLL_A.replace("opCount 3f", "opCount 40").replace("0x55d0c83a", "0x55d0c84b")
# the process lines, so that the host is known as the real one
BACKGROUND = "".join(f"{HOST}:{4100 + r}:{4100 + r} [{r}] NCCL INFO {COLL_A}\n" for r in range(8))


@pytest.mark.parametrize(
    "cut",
    [
        P.index("n136") + 6,  # inside the host: the tail starts with "81-017:4123"
        P.index(":4123"),  # right after the host: the tail has an empty host
        P.index(":4123") + 3,  # inside the pid
        P.index("[3]"),  # before the device: "[3]" then runs into the next host
        P.index("NCCL") + 2,
        len(P) - 1,  # "NCCL INFO" runs into the next host
        len(P) + COLL_A.index("0x7f33f4030") + 11,  # the 0x7f33f4030n136-081-017
        len(P) + COLL_A.index("datatype") + 4,  # "datatyn136-081-017"
        len(P) + COLL_A.index(" count"),  # after a space: the head's message is cut short
        len(P) + COLL_A.index("[nranks") + 3,  # a bracket before the next host
        len(P) + len(COLL_A) - 2,  # inside the stream pointer
    ],
)
def test_a_record_cut_anywhere_is_joined_with_its_tail(cut: int) -> None:
    record = P + COLL_A
    log = parse_text(BACKGROUND + record[:cut] + Q + COLL_B + "\n" + record[cut:] + "\n")
    got = log.colls.filter(pl.col("pid").is_in([4123, 4124]))
    assert got.select("pid", "op_count", "count", "comm").sort("pid").rows() == [
        (4123, 0x3F, 4096, "0x55d0c83a1f60"),
        (4124, 0x40, 4096, "0x55d0c84b1f60"),
    ]
    assert {h for h, _ in log.procs} == {HOST} and log.unknown == 0
    assert (log.tears[0].torn, log.tears[0].recovered) == (1, 1)


def test_a_cut_record_without_its_tail_is_dropped() -> None:
    cut = len(P) + COLL_A.index("0x7f33f4030") + 11
    log = parse_text(BACKGROUND + (P + COLL_A)[:cut] + Q + COLL_B + "\n")
    assert log.colls.filter(pl.col("pid").is_in([4123, 4124]))["pid"].to_list() == [4124]
    assert {h for h, _ in log.procs} == {HOST} and (4123 not in {p for _, p in log.procs})
    assert (log.tears[0].torn, log.tears[0].recovered) == (1, 0)


def test_a_tail_whose_head_is_lost_names_no_host() -> None:
    # "81-017:4123:…" is the end of n136-081-017's name, cut off from its head
    log = parse_text(BACKGROUND + P[P.index("n136") + 6 :] + COLL_A + "\n")
    assert {h for h, _ in log.procs} == {HOST} and log.colls.height == 8


def test_whole_records_a_paste_joined_by_spaces_are_still_read() -> None:
    line = f"{P}Using network Socket    {Q}Using network IB\n"
    log = parse_text(BACKGROUND + line)
    assert log.networks == {(HOST, 4123): "Socket", (HOST, 4124): "IB"} and log.tears == {}


def test_the_generator_tears_at_the_rate_asked_and_keeps_every_character() -> None:
    lines = [P + COLL_A.replace("opCount 3f", f"opCount {i:x}") for i in range(1000)]
    out, torn = tear(lines, 0.05, random.Random(1))
    assert 25 <= torn <= 75 and len(out) == 1000
    whole = set(lines)
    assert sum(line not in whole for line in out) == 2 * torn  # a head + record, a tail
    assert sorted("".join(out)) == sorted("".join(lines))  # the same characters, moved


def test_impossible_sizes_are_damaged_records_not_collectives() -> None:
    ranks = [f"{HOST}:{4100 + r}:{4100 + r} [{r}] NCCL INFO " for r in range(4)]
    lines = [p + COLL_A for p in ranks]
    lines[2] = lines[2].replace("count 4096", "count 4097")  # no other rank has it
    # 2**37 bf16 elements per rank × 16 ranks: a 4 TiB all-gather buffer
    lines.append(ranks[3] + COLL_B.replace("count 4096", f"count {2**37}"))
    s = summarize(parse_text("\n".join(lines) + "\n"))
    assert (s.colls, s.damaged_records) == (3, 2)
    # two ranks disagreeing: either could be the damaged one, so neither is called damaged
    s = summarize(parse_text("\n".join(lines[1:3]) + "\n"))
    assert (s.colls, s.damaged_records) == (2, 0)


def test_every_record_torn_still_names_only_the_real_host() -> None:
    # no line is whole: the host is told from fragments by the cut records' own prefixes
    # ("nn136-081-017", a cut after the host's first letter, is frequent here, yet glued)
    spec = dataclasses.replace(COLL_ONLY, tear_rate=1.0, truths={})
    _, s = read(spec)
    _, truth = read(COLL_ONLY)
    assert spec.truths["torn_records"] == 1600
    assert (s.hosts, s.processes, s.ranks) == (truth.hosts, truth.processes, truth.ranks)
    assert (s.torn_records, s.torn_recovered, s.colls) == (1600, 1600, 3200)


def test_the_command_warns_once_and_writes_the_counts(tmp_path: Path) -> None:
    spec = dataclasses.replace(COLL_ONLY, tear_rate=0.01, truths={})
    log = tmp_path / "job.out"
    log.write_bytes(nccl_log(spec))
    result = CliRunner().invoke(app, ["nccl", str(log), "--format", "json"])
    assert result.exit_code == EXIT_OK, result.stderr
    n = spec.truths["torn_records"]
    (warning,) = [line for line in result.stderr.splitlines() if "warning" in line]
    assert f"{log}: {n} NCCL records torn" in warning and "NCCL_DEBUG_FILE=" in warning
    doc = json.loads(result.stdout)
    jsonschema.validate(doc, json.loads(NCCL_SCHEMA.read_text()))
    s = doc["nccl"]
    assert (s["processes"], s["hosts"], s["colls"]) == (16, [HOST], 3200)
    assert (s["torn_records"], s["torn_recovered"], s["damaged_records"]) == (n, n, 0)
    assert doc["warnings"] == [warning.split("warning: ", 1)[1]]


@pytest.mark.parametrize(("frequent", "rare"), [("node1", "gpunode1"), ("gpunode1", "node1")])
def test_a_host_named_like_the_end_of_another_is_a_host(frequent: str, rare: str) -> None:
    # a far rarer name that ends with a frequent one, or that a frequent one ends with, is a
    # host of its own when it has processes of its own (its pid is not the frequent host's)
    lines = [f"{frequent}:{100 + r % 4}:{100 + r % 4} [0] NCCL INFO {COLL_A}" for r in range(40)]
    lines += [f"{rare}:200:200 [0] NCCL INFO {COLL_A}" for _ in range(8)]
    log = parse_text("\n".join(lines) + "\n")
    assert log.procs == {
        (frequent, 100): 10,
        (frequent, 101): 10,
        (frequent, 102): 10,
        (frequent, 103): 10,
        (rare, 200): 8,
    }
    assert log.colls.height == 48 and log.tears == {}


def test_coll_records_past_the_kept_ones_are_counted_and_checked_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Memory stays bounded: past KEPT_COLLS the records are counted, not kept, and checked
    for their size alone (a buffer past any device is damaged wherever it is); the summary
    says how many were compared across processes."""
    text = nccl_log(COLL_ONLY).decode()
    huge = (
        f"{HOST}:4123:4123 [0] NCCL INFO AllReduce: opCount 9999 sendbuff 0x1 recvbuff 0x2 "
        "count 99999999999999 datatype 7 op 0 root 0 comm 0x3 [nranks=16] stream 0x4\n"
    )
    whole = summarize(parse_text(text + huge))
    monkeypatch.setattr("tracecomm.nccl.parse.KEPT_COLLS", 1_000)
    log = parse_text(text + huge)
    capped = summarize(log)
    assert log.colls.height == capped.colls_compared == 1_000 < whole.colls_compared
    assert (capped.colls, capped.damaged_records) == (whole.colls, whole.damaged_records)
    assert (capped.colls, capped.damaged_records) == (3_200, 1)
