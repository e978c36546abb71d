"""`tracecomm nccl` and the NCCL section of `tracecomm analyze`."""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

import jsonschema
from typer.testing import CliRunner

from tests.conftest import SAMPLE_RUN
from tracecomm.cli import EXIT_NO_INPUT, EXIT_OK, EXIT_USAGE, app
from tracecomm.synth.nccl_log import LogSpec, nccl_log

SCHEMA = Path(__file__).parents[2] / "tracecomm" / "schema" / "report.schema.json"
NCCL_SCHEMA = SCHEMA.with_name("nccl.schema.json")
SPEC = LogSpec(
    hosts=("gpu-a01", "gpu-a02"),
    versions=("2.24.3", "2.24.3"),
    socket_hosts=frozenset({"gpu-a02"}),
    warn_rank=1,
)


def schema(path: Path = SCHEMA) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(path.read_text())
    return doc


def test_nccl_command_json(tmp_path: Path) -> None:
    (tmp_path / "train.err").write_bytes(nccl_log(SPEC))
    (tmp_path / "notes.txt").write_text("nothing about NCCL here\n")
    result = CliRunner().invoke(app, ["nccl", str(tmp_path), "--format", "json"])
    assert result.exit_code == EXIT_OK, result.stderr
    doc = json.loads(result.stdout)
    jsonschema.validate(doc, schema(NCCL_SCHEMA))
    assert doc["nccl"]["files"] == [str(tmp_path / "train.err")]
    assert {d["rule"] for d in doc["nccl"]["diagnostics"]} == {"transport_fallback", "warn"}


def test_nccl_command_terminal_and_errors(tmp_path: Path) -> None:
    log = tmp_path / "stdout"  # no log suffix: named on the command line, read anyway
    log.write_bytes(nccl_log(SPEC))
    result = CliRunner().invoke(app, ["nccl", str(log)])
    assert result.exit_code == EXIT_OK
    assert "✗ transport_fallback: socket fallback" in result.stdout
    result = CliRunner().invoke(app, ["nccl", str(tmp_path / "missing.log")])
    assert result.exit_code == EXIT_USAGE and "no such file" in result.stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    result = CliRunner().invoke(app, ["nccl", str(empty)])
    assert result.exit_code == EXIT_NO_INPUT and "no NCCL log" in result.stderr


def test_a_bad_dump_is_a_warning_not_a_failure(tmp_path: Path) -> None:
    (tmp_path / "job.log").write_bytes(nccl_log(SPEC))
    (tmp_path / "nccl_trace_rank_0").write_bytes(pickle.dumps({"version": "9.0", "entries": []}))
    result = CliRunner().invoke(app, ["nccl", str(tmp_path), "-f", "json"])
    assert result.exit_code == EXIT_OK
    assert (
        "Flight Recorder dump skipped" in result.stderr
        and "schema 9.0 is not read" in result.stderr
    )


def test_analyze_reads_the_logs_of_the_run_folder(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    for f in SAMPLE_RUN.iterdir():
        (run / f.name).write_bytes(f.read_bytes())
    (run / "rank0.log").write_bytes(nccl_log(SPEC))
    outside = tmp_path / "other.txt"
    outside.write_bytes(
        nccl_log(LogSpec(hosts=("gpu-c01", "gpu-c02"), versions=("2.23.4", "2.23.4")))
    )
    result = CliRunner().invoke(
        app, ["analyze", str(run), "-f", "json", "--nccl-log", str(outside)]
    )
    assert result.exit_code == EXIT_OK, result.stderr
    doc = json.loads(result.stdout)
    jsonschema.validate(doc, schema())
    nccl = doc["nccl"]
    assert nccl["files"] == [str(run / "rank0.log"), str(outside)]
    assert "version_mismatch" in {d["rule"] for d in nccl["diagnostics"]}
    text = CliRunner().invoke(app, ["analyze", str(run)]).stdout
    assert "NCCL logs · 1 file(s)" in text
    # no logs: no section
    plain = json.loads(CliRunner().invoke(app, ["analyze", str(SAMPLE_RUN), "-f", "json"]).stdout)
    assert plain["nccl"] is None


def test_the_published_nccl_schema_is_the_reports_nccl_part() -> None:
    """``tracecomm/schema/nccl.schema.json`` and the ``nccl`` definitions of the report schema
    are one shape: the report embeds what ``tracecomm nccl --format json`` publishes."""
    published = schema(NCCL_SCHEMA)
    report = schema()
    jsonschema.Draft202012Validator.check_schema(published)
    assert report["$defs"]["Report"]["properties"]["nccl"]["anyOf"][0] == {
        "$ref": "#/$defs/NcclSummary"
    }
    for name, definition in published["$defs"].items():
        if name != "NcclDocument":
            assert report["$defs"][name] == definition, name
