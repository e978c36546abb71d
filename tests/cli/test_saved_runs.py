"""A saved run is the run (issue 44): ``analyze --format json`` writes the Report's own types,
the one loader reads them back into an equal Report, and every view draws it as it drew the
run — the terminal at 140 columns, the JSON bytes, every CSV table the document holds, the
HTML page, the gate's figures and compare's record — on the sample, the shared SE and AR jobs,
a single-rank trace and a generated DLRM run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tests.conftest import SAMPLE_RUN, SHARED_TRACES
from tracecomm.analysis.runrecord import record_of_report
from tracecomm.check.figures import from_report
from tracecomm.cli import EXIT_OK, EXIT_PARTIAL, app
from tracecomm.render import View
from tracecomm.render.tables import CSV_TABLES, REPORT
from tracecomm.run.request import request_of
from tracecomm.run.saved import load_saved_report
from tracecomm.run.session import analyze_run
from tracecomm.synth.__main__ import _parser, _spec
from tracecomm.synth.writer import write_run

WIDE = View(width=140, color=False)
SHARED = ("bytedance-straggler-SE", "bytedance-straggler-AR", "hta-mtia_trace_single_rank")


def _dlrm(tmp: Path) -> Path:
    out = tmp / "dlrm"
    write_run(_spec(_parser().parse_args([str(out), "--layout", "dlrm", "--ranks", "4"])), out)
    return out


def _run(name: str, tmp: Path) -> Path:
    if name == "sample":
        return SAMPLE_RUN
    if name == "dlrm":
        return _dlrm(tmp)
    if not SHARED_TRACES.is_dir():
        pytest.skip("../shared/data/traces is not present")
    return SHARED_TRACES / name


@pytest.mark.parametrize("name", ["sample", "dlrm", *SHARED])
def test_a_saved_run_draws_as_the_run(name: str, tmp_path: Path) -> None:
    report = analyze_run(request_of(_run(name, tmp_path))).report
    saved = tmp_path / "saved.json"
    saved.write_bytes(REPORT["json"](report, WIDE))
    back = load_saved_report(saved).report
    assert back == report  # the document is the whole Report
    for fmt in ("terminal", "json", "html"):
        assert REPORT[fmt](back, WIDE) == REPORT[fmt](report, WIDE), fmt
    for table in (t for t in CSV_TABLES if t != "instances"):  # instances: the run's alone
        view = View(width=140, color=False, table=table)
        assert REPORT["csv"](back, view) == REPORT["csv"](report, view), table
    assert from_report(back, "run") == from_report(report, "run")
    live, read = (record_of_report(r, "run") for r in (report, back))
    assert live == read


def test_analyze_takes_a_saved_document_as_its_run(tmp_path: Path) -> None:
    runner = CliRunner(env={"COLUMNS": "140"})
    analyzed = runner.invoke(app, ["analyze", str(SAMPLE_RUN), "-f", "json"])
    saved = tmp_path / "run.json"
    saved.write_text(analyzed.stdout)
    again = runner.invoke(app, ["analyze", str(saved), "-f", "json"])
    assert again.exit_code == analyzed.exit_code == 0 and again.stdout == analyzed.stdout
    shown, drawn = (runner.invoke(app, ["analyze", str(p)]) for p in (SAMPLE_RUN, saved))
    assert drawn.exit_code == 0 and drawn.stdout == shown.stdout
    assert "rank 3" in drawn.stdout  # the straggler, from the saved document
    refused = runner.invoke(app, ["analyze", str(saved), "-f", "csv", "--table", "instances"])
    assert refused.exit_code == 2 and "holds no per-rank instances" in refused.stderr


def test_project_and_export_take_what_a_saved_document_holds(tmp_path: Path) -> None:
    """project draws a saved projection as it drew it, and projects a plain saved document
    from its projection basis as the run projects (to any size); export, whose events no
    document holds, says so in one line and exits 2."""
    runner = CliRunner(env={"COLUMNS": "140"})
    projected = runner.invoke(app, ["project", str(SAMPLE_RUN), "-f", "json"])
    assert projected.exit_code == 0, projected.stderr
    saved = tmp_path / "projected.json"
    saved.write_text(projected.stdout)
    again = runner.invoke(app, ["project", str(saved), "-f", "json"])
    assert again.exit_code == 0 and again.stdout == projected.stdout
    plain = tmp_path / "plain.json"
    plain.write_text(runner.invoke(app, ["analyze", str(SAMPLE_RUN), "-f", "json"]).stdout)
    for flags in ([], ["--to", "3,512"], ["--to", "64", "--weak"]):
        of_run = runner.invoke(app, ["project", str(SAMPLE_RUN), *flags])
        of_plain = runner.invoke(app, ["project", str(plain), *flags])
        assert of_plain.exit_code == of_run.exit_code == 0, of_plain.stderr
        assert (
            of_plain.stdout == of_run.stdout
            and "512" in runner.invoke(app, ["project", str(plain), "--to", "3,512"]).stdout
        )
    exported = runner.invoke(app, ["export", str(plain), "-o", str(tmp_path / "t.json")])
    assert exported.exit_code == 2 and "holds no events to export" in exported.stderr
    assert not (tmp_path / "t.json").exists()


@pytest.mark.parametrize("where", ["options", "tool"])
def test_a_document_nested_past_any_report_is_one_line_not_a_bug(
    where: str, tmp_path: Path
) -> None:
    """The options are free JSON in the document (and the envelope is read to say what a bad
    document is): nesting past the interpreter's recursion limit is a refused document, exit 2,
    for every command that reads one, never exit 70."""
    runner = CliRunner()
    text = runner.invoke(app, ["analyze", str(SAMPLE_RUN), "-f", "json"]).stdout
    deep = "[" * 100_000 + "]" * 100_000
    bad = tmp_path / "deep.json"
    bad.write_text(text.replace(f'"{where}": {{', f'"{where}": {{"x": {deep}, ', 1))
    page = str(tmp_path / "p.html")
    for argv in (
        ["analyze", str(bad)],
        ["report", str(bad), "-o", page],
        ["check", str(bad), "--baseline", str(bad)],
    ):
        result = runner.invoke(app, argv)
        assert result.exit_code == 2, (argv, result.stderr)
        assert "not an analyze JSON document" in result.stderr


def _compared(*inputs: Path) -> dict[str, Any]:
    result = CliRunner().invoke(app, ["compare", *map(str, inputs), "-f", "json", "-q"])
    assert result.exit_code in (EXIT_OK, EXIT_PARTIAL), result.stderr
    doc: dict[str, Any] = json.loads(result.stdout)
    return doc


def _saved(run: Path, out: Path) -> Path:
    result = CliRunner().invoke(app, ["analyze", str(run), "-f", "json", "-q"])
    assert result.exit_code in (EXIT_OK, EXIT_PARTIAL), result.stderr
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(result.stdout)
    return out


@pytest.mark.parametrize(
    ("first", "second"),
    [("sample", "bytedance-straggler-AR"), ("bytedance-straggler-SE", "tbplugin-distributed_nccl")],
)
def test_compare_of_saved_runs_is_compare_of_the_runs(
    first: str, second: str, tmp_path: Path
) -> None:
    """The same JSON from the two run folders and from their saved documents: the labels (the
    runs the documents analyzed), the sources, the collectives by instance, and the first
    run's projection to the other's size (from the projection basis the document holds)."""
    if not SHARED_TRACES.is_dir():
        pytest.skip("../shared/data/traces is not present")
    runs = [_run(name, tmp_path) for name in (first, second)]
    documents = [_saved(run, tmp_path / f"{i}.json") for i, run in enumerate(runs)]
    live, read = _compared(*runs), _compared(*documents)
    assert all(p["collectives"]["level"] == "instance" for p in read["pairs"])
    assert read == live
    if first == "sample":  # the sample's collectives carry sizes: a projection to 64 GPUs
        assert [r["world_size"] for r in read["projection"]["rows"]] == [64]


def test_documents_of_one_recorded_run_are_labelled_by_their_files(tmp_path: Path) -> None:
    """Two documents that both analyzed the same path (``run/`` from two folders): labelled by
    their own file paths, so that the labels stay apart."""
    first = _saved(SAMPLE_RUN, tmp_path / "exp-8" / "run.json")
    second = tmp_path / "exp-64" / "run.json"
    second.parent.mkdir()
    second.write_bytes(first.read_bytes())
    doc = _compared(first, second)
    assert [r["label"] for r in doc["runs"]] == ["exp-8", "exp-64"]
