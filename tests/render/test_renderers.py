"""Every renderer in ``render.tables``, driven from one Report of the sample run: it gives
bytes, the same bytes twice, and the figures it shows are the Report's own (a renderer
computes nothing: render/__init__.py).

The Report is analyzed once, with the projection and the export on so that the project and
export renderers have something to draw; the gate's check and the comparison are made from it
(the run against itself). The NCCL and crosscheck renderers take what no Report holds."""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Callable
from typing import Any

import msgspec
import pytest

from tests.conftest import SAMPLE_RUN
from tracecomm.analysis.build import Analysis
from tracecomm.analysis.compare import compare
from tracecomm.analysis.report import Report
from tracecomm.analysis.runrecord import record_of_report
from tracecomm.check.budgets import DEFAULT_BUDGETS
from tracecomm.check.figures import from_report
from tracecomm.check.verdicts import verdicts as check
from tracecomm.render import View, tables
from tracecomm.run.request import request_of
from tracecomm.run.session import analyze_run

VIEW = View(color=False)  # what a file or a pipe gets
DATA_BLOCK = re.compile(
    r'<script type="application/json" id="tracecomm-data">(.*?)</script>', re.DOTALL
)

# Each table's result, made from the one Report.
RESULTS: dict[str, Callable[[Report], Any]] = {
    "REPORT": lambda report: report,
    "PROJECTION": lambda report: report,
    "EXPORT": lambda report: report,
    "CHECK": lambda report: check(
        from_report(report, "before"), from_report(report, "after"), DEFAULT_BUDGETS
    ),
    "COMPARE": lambda report: compare(
        [record_of_report(report, label) for label in ("before", "after")],
        keep_order=True,
    ),
}
# Tables whose result no Report holds, and where their renderers are tested.
ELSEWHERE = {
    "NCCL": "NCCL logs and Flight Recorder dumps: tests/nccl/test_cli.py",
    "CROSSCHECK": "HTA's own figures beside tracecomm's: tests/compat/test_crosscheck.py",
}
TABLES: dict[str, dict[str, tables.Renderer]] = {
    name: value
    for name, value in vars(tables).items()
    if name.isupper() and isinstance(value, dict)
}
CASES = [(name, fmt) for name in RESULTS for fmt in TABLES.get(name, {})]


@pytest.fixture(scope="module")
def analysis() -> Analysis:
    return analyze_run(request_of(SAMPLE_RUN, project=True, export_ranks=""))


@pytest.fixture(scope="module")
def report(analysis: Analysis) -> Report:
    return analysis.report


@pytest.fixture(scope="module")
def results(report: Report) -> dict[str, Any]:
    return {name: make(report) for name, make in RESULTS.items()}


@pytest.fixture(scope="module")
def views(analysis: Analysis) -> dict[str, View]:
    """What each table is rendered with: the export's events are the run's, beside its
    Report (``View.side``)."""
    return {
        name: View(color=False, side=analysis.side) if name == "EXPORT" else VIEW
        for name in RESULTS
    }


@pytest.fixture(scope="module")
def rendered(results: dict[str, Any], views: dict[str, View]) -> dict[tuple[str, str], bytes]:
    """Each renderer's output, rendered once."""
    return {(name, fmt): TABLES[name][fmt](results[name], views[name]) for name, fmt in CASES}


def ms(ns: float) -> str:
    return f"{ns / 1e6:.3f} ms"


def plain(value: Any) -> Any:
    """As JSON has it: tuples as lists."""
    return json.loads(json.dumps(value))


def step_time(report: Report) -> int:
    assert report.throughput is not None and report.throughput.step_time_ns
    return report.throughput.step_time_ns


def ranks(report: Report) -> list[int]:
    return [r.rank for r in report.ranks]


def embedded(page: str) -> Any:
    match = DATA_BLOCK.search(page)
    assert match is not None
    return json.loads(match.group(1))


# --- what each renderer shows, against the Report ----------------------------------------------


def report_terminal(report: Report, text: str) -> None:
    world = report.summary.world_size
    assert f"{len(report.ranks)} ranks of {world}" in text.splitlines()[0]
    assert f"step time {ms(step_time(report))}" in text


def report_json(report: Report, text: str) -> None:
    doc = json.loads(text)
    assert report.step_parts is not None
    assert doc["step_parts"] == plain(msgspec.to_builtins(report.step_parts))
    assert doc["throughput"]["step_time_ns"] == step_time(report)
    assert [r["rank"] for r in doc["ranks"]] == ranks(report)


def report_csv(report: Report, text: str) -> None:
    rows = list(csv.DictReader(io.StringIO(text)))
    assert [int(row["rank"]) for row in rows] == ranks(report)
    for row, rank in zip(rows, report.ranks, strict=True):
        window = rank.window
        assert window is not None
        assert int(row["window_ns"]) == window.figures.window_ns
        assert int(row["exposed_comm_ns"]) == window.figures.exposed_comm_ns


def report_html(report: Report, text: str) -> None:
    doc = embedded(text)
    assert doc == json.loads(tables.REPORT["json"](report, VIEW))  # the JSON document, whole
    assert doc["throughput"]["step_time_ns"] == step_time(report)
    assert f"<title>tracecomm report: {len(report.ranks)} ranks" in text


def projection_terminal(report: Report, text: str) -> None:
    projection = report.projection
    assert projection is not None and projection.sizes is not None
    rows = {int(line.split("│")[1]): line for line in text.splitlines() if line.count("│") > 2}
    assert sorted(rows) == sorted(s.world_size for s in projection.sizes)
    for size in projection.sizes:
        assert f"{size.step_ns / 1e6:.2f}" in rows[size.world_size]


def projection_json(report: Report, text: str) -> None:
    projection = report.projection
    assert projection is not None and projection.sizes is not None
    sizes = json.loads(text)["projection"]["sizes"]
    assert [(s["world_size"], s["step_ns"]) for s in sizes] == [
        (s.world_size, s.step_ns) for s in projection.sizes
    ]


def export_chrome(report: Report, text: str) -> None:
    doc = json.loads(text)
    exported = [r["rank"] for r in doc["tracecomm"]["ranks"]]
    assert exported and set(exported) <= set(ranks(report))
    assert set(doc["tracecomm"]["steps"]) <= set(report.summary.steps)
    named = {e["pid"] for e in doc["traceEvents"] if e.get("name") == "process_name"}
    assert named == set(exported)


def check_shown(report: Report, text: str) -> None:
    """terminal, junit, markdown: the step time as analyze prints it, both sides."""
    assert text.count(ms(step_time(report))) >= 2


def check_json(report: Report, text: str) -> None:
    doc = json.loads(text)
    figure = next(f for f in doc["figures"] if f["figure"] == "step_time")
    assert figure["baseline"] == figure["current"] == step_time(report)
    assert doc["passed"] and doc["shared_ranks"] == ranks(report)


def check_github(report: Report, text: str) -> None:
    assert text.startswith("::notice ") and "no regression against before" in text


def compare_shown(report: Report, text: str) -> None:
    """terminal, markdown: the step time row, one cell per run."""
    (row,) = [line for line in text.splitlines() if "Step time ms" in line]
    assert row.count(f"{step_time(report) / 1e6:.3f}") == 2


def compare_json(report: Report, text: str) -> None:
    runs = json.loads(text)["runs"]
    assert [(r["label"], r["step_time_ns"]) for r in runs] == [
        ("before", step_time(report)),
        ("after", step_time(report)),
    ]


def compare_csv(report: Report, text: str) -> None:
    """--table kernel-changes: the run against itself, so the header alone (no kernel changed)."""
    header, *rows = text.splitlines()
    assert header.startswith("baseline,run,name,class,status,") and rows == []
    assert report.kernel_steps is not None and report.kernel_steps.kernels


def compare_html(report: Report, text: str) -> None:
    compare_json(report, json.dumps(embedded(text)))


SHOWS: dict[tuple[str, str], Callable[[Report, str], None]] = {
    ("REPORT", "terminal"): report_terminal,
    ("REPORT", "json"): report_json,
    ("REPORT", "csv"): report_csv,
    ("REPORT", "html"): report_html,
    ("PROJECTION", "terminal"): projection_terminal,
    ("PROJECTION", "json"): projection_json,
    ("EXPORT", "chrome"): export_chrome,
    ("CHECK", "terminal"): check_shown,
    ("CHECK", "json"): check_json,
    ("CHECK", "github"): check_github,
    ("CHECK", "junit"): check_shown,
    ("CHECK", "markdown"): check_shown,
    ("COMPARE", "terminal"): compare_shown,
    ("COMPARE", "json"): compare_json,
    ("COMPARE", "markdown"): compare_shown,
    ("COMPARE", "html"): compare_html,
    ("COMPARE", "csv"): compare_csv,
}


def test_every_table_and_format_is_covered() -> None:
    assert sorted(TABLES) == sorted([*RESULTS, *ELSEWHERE])
    assert sorted(SHOWS) == sorted(CASES)


@pytest.mark.parametrize(("table", "fmt"), CASES, ids=[f"{t.lower()}-{f}" for t, f in CASES])
def test_a_renderer_gives_the_same_bytes_twice(
    table: str,
    fmt: str,
    results: dict[str, Any],
    views: dict[str, View],
    rendered: dict[tuple[str, str], bytes],
) -> None:
    first = rendered[table, fmt]
    assert isinstance(first, bytes) and first.strip()
    first.decode()  # text: UTF-8 throughout
    assert TABLES[table][fmt](results[table], views[table]) == first


@pytest.mark.parametrize(("table", "fmt"), CASES, ids=[f"{t.lower()}-{f}" for t, f in CASES])
def test_a_renderer_shows_the_reports_own_figures(
    table: str, fmt: str, report: Report, rendered: dict[tuple[str, str], bytes]
) -> None:
    SHOWS[table, fmt](report, rendered[table, fmt].decode())
