"""`tracecomm ingest RUN --out DIR` then `analyze DIR`: the figures of `analyze RUN`, read from
a few KB of Parquet per rank."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from msgspec import structs
from polars.testing import assert_frame_equal
from typer.testing import CliRunner

from tests.conftest import SAMPLE_RUN, analyze_json
from tracecomm.analysis.model import FileFailure, RankResult
from tracecomm.cli import EXIT_NO_INPUT, EXIT_OK, EXIT_PARTIAL, EXIT_USAGE, app
from tracecomm.engine import BreakdownOptions
from tracecomm.ingest.discover import json_size
from tracecomm.ingest.model import ReadOptions
from tracecomm.run.discover import SUFFIX
from tracecomm.run.summaries import FORMAT, SummaryError, read_summary, write_summary
from tracecomm.run.worker import RankWork, analyze_file
from tracecomm.synth import fsdp_run, write_run

SETTINGS = "[model]\nflops-per-step = 32000000000000\n[device]\npeak-tflops = 989\n"
NCCL_LOG = (
    "host0:100:100 [0] NCCL INFO NCCL version 2.21.5+cuda12.4\n"
    "host0:100:100 [0] NCCL INFO Channel 00/02 :    0   1\n"
)


def cli(*args: str) -> Any:
    return CliRunner().invoke(app, list(args))


def comparable(doc: dict[str, Any]) -> dict[str, Any]:
    """Everything but the inputs given on the command line, what the ranks were read from, and
    the NCCL logs' paths (the analysis of the summaries reads the copies ingest made)."""
    out = {k: v for k, v in doc.items() if k not in ("inputs", "read_from")}
    if out.get("nccl"):
        out["nccl"] = {k: v for k, v in out["nccl"].items() if k != "files"}
        out["nccl"]["versions"] = [
            {k: v for k, v in version.items() if k != "files"}
            for version in out["nccl"].get("versions", [])
        ]
    return out


@pytest.fixture
def run(tmp_path: Path) -> Path:
    """Eight ranks with a straggler, a settings file (MFU), an NCCL log, and one file cut to
    garbage: the summaries must carry all of it."""
    path = tmp_path / "run"
    write_run(fsdp_run(world_size=8, steps=3, layers=2, seed=5, slow_rank=2), path)
    (path / "tracecomm.toml").write_text(SETTINGS)
    (path / "nccl-rank0.log").write_text(NCCL_LOG)
    broken = path / "rank5.pt.trace.json.gz"
    broken.write_bytes(broken.read_bytes()[:300])
    return path


def test_ingest_then_analyze_gives_the_figures_of_the_traces(run: Path, tmp_path: Path) -> None:
    out = tmp_path / "summaries"
    direct = analyze_json(str(run), "-q", "--detail", "instances", code=EXIT_PARTIAL)
    result = cli("ingest", str(run), "--out", str(out), "-j", "1")
    assert result.exit_code == EXIT_PARTIAL, result.stderr  # rank 5 produced nothing
    assert "rank5.pt.trace.json.gz" in result.stderr and "7 rank summaries" in result.stderr
    assert len(list(out.glob(f"*{SUFFIX}"))) == 8  # the failure is stored too
    summary_bytes = sum(p.stat().st_size for p in out.glob(f"*{SUFFIX}"))
    trace_bytes = sum(json_size(p) for p in run.glob("*.json.gz"))
    assert summary_bytes < trace_bytes / 10
    again = analyze_json(str(out), "-q", "--detail", "instances", code=EXIT_PARTIAL)
    assert comparable(again) == comparable(direct)
    assert again["throughput"]["mfu"] is not None  # the settings file came along
    assert again["nccl"] is not None  # and the NCCL log
    assert [m["rank"] for m in again["missing_ranks"]] == [5]


def test_summaries_written_by_a_dask_cluster(run: Path, tmp_path: Path, dask_executor: Any) -> None:
    from tracecomm.analysis.report import report_document
    from tracecomm.run.request import request_of
    from tracecomm.run.session import ingest
    from tracecomm.run.session import run_analysis as analyze

    out = tmp_path / "summaries"
    done = ingest(request_of(run), out, executor=dask_executor)
    assert (done.summaries, done.ranks, len(done.failures)) == (8, 7, 1)
    direct = report_document(analyze(request_of(run, jobs=1)))
    again = report_document(analyze(request_of(out, jobs=1)))
    assert comparable(again) == comparable(direct)


def test_a_summary_round_trips_exactly(tmp_path: Path) -> None:
    """Every field of the result, energy and observed FLOPs included, comes back equal; the
    collectives come back as the same frame, dtypes included."""
    path = SAMPLE_RUN / "rank3.pt.trace.json.gz"
    opts = BreakdownOptions(first_step=2, comm_patterns=("^my_comm=AllReduce",))
    (result,) = analyze_file(str(path), RankWork(opts, ReadOptions()))
    assert isinstance(result, RankResult) and result.breakdown.collectives is not None
    back, stored = read_summary(str(write_summary(tmp_path, result, opts)))
    assert stored == opts
    assert isinstance(back, RankResult)
    # a summary stands in for its trace: it does not say where the trace is to read again
    assert back == replace(result, origin=None)
    assert back.views is not None and result.views is not None
    assert back.views.typical_step == result.views.typical_step
    assert back.views.replay is not None and result.views.replay is not None
    assert back.views.replay.equals(result.views.replay)
    assert back.breakdown.collectives is not None
    assert_frame_equal(back.breakdown.collectives, result.breakdown.collectives)
    failure = FileFailure("/x/rank9.json", "truncated gzip file: no complete data")
    assert read_summary(str(write_summary(tmp_path, failure, opts)))[0] == failure


def test_impossible_kernel_figures_are_refused(tmp_path: Path) -> None:
    """A stored kernel view whose order statistics are out of order is damaged (§15)."""
    (result,) = analyze_file(
        str(SAMPLE_RUN / "rank0.pt.trace.json.gz"), RankWork(BreakdownOptions(), ReadOptions())
    )
    assert isinstance(result, RankResult) and result.breakdown.kernels is not None
    kernels = result.breakdown.kernels
    group = kernels.groups[0]
    bad_row = structs.replace(group.top[0], median_ns=group.top[0].max_ns + 1)
    bad = structs.replace(
        kernels, groups=(structs.replace(group, top=(bad_row,)), *kernels.groups[1:])
    )
    damaged = replace(result, breakdown=replace(result.breakdown, kernels=bad))
    with pytest.raises(SummaryError, match=r"kernel view, compute: .* out of order"):
        read_summary(str(write_summary(tmp_path, damaged, BreakdownOptions())))


def test_a_rank_without_collectives_keeps_none(tmp_path: Path) -> None:
    (result,) = analyze_file(
        str(SAMPLE_RUN / "rank0.pt.trace.json.gz"), RankWork(BreakdownOptions(), ReadOptions())
    )
    assert isinstance(result, RankResult)
    bare = replace(result, breakdown=replace(result.breakdown, collectives=None))
    back, _ = read_summary(str(write_summary(tmp_path, bare, BreakdownOptions())))
    assert isinstance(back, RankResult) and back.breakdown.collectives is None


def test_summaries_of_other_versions_or_damaged_ones_are_named(tmp_path: Path) -> None:
    other = tmp_path / f"x{SUFFIX}"
    pl.DataFrame({"a": [1]}).write_parquet(other, metadata={"tracecomm.summary.format": "99"})
    with pytest.raises(SummaryError, match=rf"format 99; this tracecomm .* reads format {FORMAT}"):
        read_summary(str(other))
    junk = tmp_path / f"y{SUFFIX}"
    junk.write_bytes(b"not parquet")
    with pytest.raises(SummaryError, match="not a readable Parquet summary"):
        read_summary(str(junk))


def test_one_damaged_summary_loses_only_its_rank(run: Path, tmp_path: Path) -> None:
    out = tmp_path / "summaries"
    assert cli("ingest", str(run), "-o", str(out), "-q", "-j", "1").exit_code == EXIT_PARTIAL
    victim = next(out.glob(f"rank3-*{SUFFIX}"))
    victim.write_bytes(b"PAR1 garbage")
    doc, stderr = analyze_json(str(out), code=EXIT_PARTIAL, with_stderr=True)
    assert victim.name in stderr and "not a readable Parquet summary" in stderr
    assert len(doc["ranks"]) == 6 and "Traceback" not in stderr


def test_steps_are_fixed_at_ingest(run: Path, tmp_path: Path) -> None:
    out = tmp_path / "summaries"
    # steps the traces have (12-14; a range outside them is an error of its own, exit 3)
    assert cli("ingest", str(run), "-o", str(out), "--steps", "13:14", "-q").exit_code == (
        EXIT_PARTIAL
    )
    same = analyze_json(str(out), "-q", code=EXIT_PARTIAL)  # no options: the stored ones
    assert same["options"]["breakdown"]["first_step"] == 13
    assert [s["step"] for s in same["ranks"][0]["steps"] if s["included"]] == [13, 14]
    assert comparable(same) == comparable(analyze_json(str(run), "-q", "--steps", "13:14", code=4))
    result = cli("analyze", str(out), "--steps", "1:2")
    assert result.exit_code == EXIT_USAGE
    assert "steps and rules are fixed at ingest" in result.stderr


def test_ingest_never_writes_into_the_run(run: Path) -> None:
    before = sorted(p.name for p in run.rglob("*"))
    result = cli("ingest", str(run), "-o", str(run / "summaries"))
    assert result.exit_code == EXIT_USAGE
    assert "inside the input folder" in result.stderr
    assert sorted(p.name for p in run.rglob("*")) == before


def test_summaries_and_traces_do_not_mix(run: Path, tmp_path: Path) -> None:
    out = tmp_path / "summaries"
    cli("ingest", str(run), "-o", str(out), "-q")
    result = cli("analyze", str(out), str(run))
    assert result.exit_code == EXIT_USAGE and "mixing ingested summaries" in result.stderr


def test_ingest_of_nothing(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    result = cli("ingest", str(empty), "-o", str(tmp_path / "out"))
    assert result.exit_code == EXIT_NO_INPUT and "no trace files" in result.stderr


def test_nodes_ingesting_into_one_folder_do_not_collide(tmp_path: Path) -> None:
    """Two nodes, each with its own half of the ranks under the same local path name."""
    out = tmp_path / "shared"
    whole = tmp_path / "whole"
    write_run(fsdp_run(world_size=4, steps=3, layers=2, seed=2), whole)
    for node, ranks in (("node0", (0, 1)), ("node1", (2, 3))):
        local = tmp_path / node / "traces"
        local.mkdir(parents=True)
        for r in ranks:
            shutil.copy(whole / f"rank{r}.pt.trace.json.gz", local / f"rank{r}.pt.trace.json.gz")
        assert cli("ingest", str(local), "-o", str(out), "-q").exit_code == EXIT_OK
    assert len(list(out.glob(f"*{SUFFIX}"))) == 4
    doc = analyze_json(str(out), "-q")
    figures = {r["rank"]: r["window"] for r in analyze_json(str(whole), "-q")["ranks"]}
    assert {r["rank"]: r["window"] for r in doc["ranks"]} == figures
