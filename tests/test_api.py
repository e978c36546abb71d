"""``tracecomm.analyze``: the CLI's figures for notebooks, with the tables as polars frames."""

from __future__ import annotations

import json
import subprocess
import sys

import polars as pl
import pytest
from typer.testing import CliRunner

import tracecomm
from tests.conftest import REPO, SAMPLE_RUN
from tracecomm.cli import app
from tracecomm.errors import NoUsableInput, UsageError


@pytest.fixture(scope="module")
def report() -> tracecomm.Report:
    return tracecomm.analyze(SAMPLE_RUN)


@pytest.fixture(scope="module")
def document() -> dict:
    result = CliRunner().invoke(app, ["analyze", str(SAMPLE_RUN), "-f", "json"])
    return json.loads(result.stdout)


def test_the_readme_line_prints_the_per_rank_frame() -> None:
    code = "import tracecomm; r = tracecomm.analyze('fixtures/sample-run'); print(r.ranks)"
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout
    assert "shape: (8, " in out and "rank" in out and "node0" in out


def test_the_readme_example_runs() -> None:
    readme = (REPO / "README.md").read_text()
    section = readme[readme.index("## Python API") :]
    code = section[
        section.index("```python") + 9 : section.index("```", section.index("```python") + 9)
    ]
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout
    frame, last = out.rsplit("\n", 2)[0], out.rsplit("\n", 2)[1]
    assert "shape: (8, " in frame
    mfu, step_ns, costliest = last.split(" ", 2)
    assert 0.3 < float(mfu) < 0.5 and 19e6 < int(step_ns) < 21e6 and costliest == "AllGather"


def test_the_frames_hold_the_cli_figures(report: tracecomm.Report, document: dict) -> None:
    ranks = report.ranks
    assert isinstance(ranks, pl.DataFrame) and ranks["rank"].to_list() == list(range(8))
    want = {r["rank"]: r["window"]["figures"]["exposed_comm_ns"] for r in document["ranks"]}
    assert dict(zip(ranks["rank"], ranks["exposed_comm_ns"], strict=True)) == want
    medians = {r["rank"]: r["step_median"]["window_ns"] for r in document["ranks"]}
    assert dict(zip(ranks["rank"], ranks["step_median_window_ns"], strict=True)) == medians
    steps = report.steps
    assert steps.height == sum(len(r["steps"]) for r in document["ranks"])
    included = steps.filter(pl.col("included"))
    assert included.group_by("rank").len()["len"].to_list() == [4] * 8
    by_type = report.by_type
    assert by_type.to_dicts() == document["by_type"]
    stragglers = report.straggler_ranks
    assert stragglers["rank"].to_list() == [r["rank"] for r in document["stragglers"]["ranks"]]
    assert report.cross_rank is not None  # 8 ranks, one group: each instance on every rank
    assert report.collectives.height == 8 * report.cross_rank.matched


def test_options_are_the_cli_options_as_keywords(report: tracecomm.Report) -> None:
    two = tracecomm.analyze(SAMPLE_RUN, steps="13:14", model_flops_per_step="3.2e15")
    assert two.summary.steps == (13, 14)
    assert two.throughput is not None and two.throughput.mfu is not None
    assert tracecomm.analyze(SAMPLE_RUN, steps=(13, 14)).summary.steps == (13, 14)


def test_bad_options_and_inputs_raise_the_errors_the_cli_maps(tmp_path: object) -> None:
    with pytest.raises(UsageError, match="--steps"):
        tracecomm.analyze(SAMPLE_RUN, steps="7:3")
    with pytest.raises(UsageError, match="unknown option 'step'"):
        tracecomm.analyze(SAMPLE_RUN, step="3")
    with pytest.raises(NoUsableInput):
        tracecomm.analyze(str(tmp_path))
