"""The report's formats: JSON (schema-valid, jq-readable), CSV, terminal, --version, --help."""

from __future__ import annotations

import csv
import io
import json
import shutil
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
from typer.testing import CliRunner

from tests.conftest import REPO, SAMPLE_RUN, analyze_json
from tracecomm import __version__
from tracecomm.cli import EXIT_OK, app
from tracecomm.run.options import parse_steps

runner = CliRunner()
SCHEMA = json.loads((REPO / "tracecomm/schema/report.schema.json").read_text())


@pytest.fixture(scope="module")
def sample_json() -> dict:
    return analyze_json(SAMPLE_RUN)


def test_json_validates_against_the_shipped_schema(sample_json: dict) -> None:
    jsonschema.validate(sample_json, SCHEMA)
    assert sample_json["schema_version"] == 3
    assert sample_json["tool"] == {"name": "tracecomm", "version": __version__}
    assert sample_json["summary"]["ranks_analyzed"] == 8
    assert sample_json["summary"]["steps"] == [12, 13, 14, 15]


def test_schema_rejects_a_document_missing_figures(sample_json: dict) -> None:
    broken = json.loads(json.dumps(sample_json))
    del broken["ranks"][0]["window"]["figures"]["idle_ns"]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, SCHEMA)


def test_stdout_is_exactly_one_json_document_that_jq_reads(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "tracecomm", "analyze", str(SAMPLE_RUN), "--format", "json"],
        capture_output=True,
        check=True,
        text=True,
    )
    doc = json.loads(proc.stdout)  # fails on anything else on stdout
    if shutil.which("jq") is None:
        pytest.skip("jq is not installed")
    jq = subprocess.run(
        ["jq", "-r", ".ranks[] | [.rank, .window.figures.exposed_comm_ns] | @tsv"],
        input=proc.stdout,
        capture_output=True,
        check=True,
        text=True,
    )
    rows = [line.split("\t") for line in jq.stdout.splitlines()]
    assert rows == [
        [str(r["rank"]), str(r["window"]["figures"]["exposed_comm_ns"])] for r in doc["ranks"]
    ]


def test_csv_rows_carry_the_json_figures(sample_json: dict) -> None:
    result = runner.invoke(app, ["analyze", str(SAMPLE_RUN), "--format", "csv"])
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    assert len(rows) == 8
    for row, rank in zip(rows, sample_json["ranks"], strict=True):
        figures = rank["window"]["figures"]
        assert int(row["rank"]) == rank["rank"]
        assert int(row["exposed_comm_ns"]) == figures["exposed_comm_ns"]
        assert int(row["idle_ns"]) == figures["idle_ns"]
        assert int(row["step_median_window_ns"]) == rank["step_median"]["window_ns"]
        assert float(row["overlap_pct"]) == pytest.approx(figures["overlap_pct"], abs=0.005)


def test_terminal_report_shows_ranks_types_and_summary(sample_json: dict) -> None:
    result = runner.invoke(app, ["analyze", str(SAMPLE_RUN)])
    out = result.stdout
    assert result.exit_code == EXIT_OK
    assert "8 ranks of 8" in out and "steps 12–15 (4)" in out
    worst = sample_json["summary"]["worst_rank"]
    assert f"worst rank {worst}" in out
    for coll in ("AllGather", "ReduceScatter", "AllReduce"):
        assert coll in out
    # the per-rank table shows each rank's mean step (issue 34: whole-window totals did not fit)
    exposed_ms = sample_json["ranks"][0]["step_mean"]["exposed_comm_ns"] / 1e6
    assert f"{exposed_ms:,.3f}" in out


def test_version_and_help_on_every_command() -> None:
    assert runner.invoke(app, ["--version"]).stdout.strip() == f"tracecomm {__version__}"
    top = runner.invoke(app, ["--help"])
    assert top.exit_code == 0 and "analyze" in top.stdout
    sub = runner.invoke(app, ["analyze", "--help"])
    assert sub.exit_code == 0
    for option in ("--format", "--steps", "--all-steps", "--comm-pattern", "--jobs"):
        assert option in sub.stdout


@pytest.mark.parametrize(
    ("text", "want"),
    [("3:7", (3, 7)), ("3:", (3, None)), (":7", (None, 7)), ("5", (5, 5)), (None, (None, None))],
)
def test_parse_steps(text: str | None, want: tuple[int | None, int | None]) -> None:
    assert parse_steps(text) == want
