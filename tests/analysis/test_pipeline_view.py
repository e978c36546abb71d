"""Pipeline view (metrics.md §10): stages, micro-batches and the bubble per stage of generated
1F1B schedules, against the same figures computed from the schedule alone."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from typer.testing import CliRunner

from tests.conftest import REPO
from tracecomm import analyze
from tracecomm.cli import EXIT_OK, app
from tracecomm.synth.expected import intersect, length, union
from tracecomm.synth.pp import dp_pp_run
from tracecomm.synth.schedule import RunSpec
from tracecomm.synth.writer import write_run

runner = CliRunner()
SCHEMA = json.loads((REPO / "tracecomm/schema/report.schema.json").read_text())


def expected_bubbles(spec: RunSpec, pipeline: list[int], step_index: int) -> list[float]:
    """Per stage: the share of the pipeline's compute span without compute on that stage, from
    the ops launched in the step (true clock: one host, no offsets to undo)."""
    compute = {
        r.rank: union(
            [(o.start_ns, o.end_ns) for o in r.steps[step_index].ops if o.kind == "compute"]
        )
        for r in spec.ranks
        if r.rank in pipeline
    }
    span = (min(c[0][0] for c in compute.values()), max(c[-1][1] for c in compute.values()))
    size = span[1] - span[0]
    return [100 * (1 - length(intersect(compute[r], [span])) / size) for r in pipeline]


def test_balanced_1f1b_p4_m8_bubble_is_the_schedules(tmp_path: Path) -> None:
    spec = dp_pp_run(dp=1, pp=4, microbatches=8, steps=3, jitter=0)
    write_run(spec, tmp_path)
    (view,) = analyze([tmp_path]).pipelines
    assert (view.stages, view.microbatches) == (4, 8)
    assert view.textbook_bubble_pct == pytest.approx(100 * 3 / 11)
    assert [s.rank for s in view.per_stage] == [0, 1, 2, 3]
    # jitter-free: every step alike, so the median over steps is each step's own figure
    for step_index in range(3):
        expected = expected_bubbles(spec, [0, 1, 2, 3], step_index)
        assert [s.bubble_pct for s in view.per_stage] == pytest.approx(expected, abs=1e-9)
    for stage in view.per_stage:  # close to 3/11: p2p transfers add a little
        assert 100 * 3 / 11 <= stage.bubble_pct < 100 * 3 / 11 + 3
    assert "balanced" in view.verdict


def test_more_microbatches_and_dp_replicas(tmp_path: Path) -> None:
    spec = dp_pp_run(dp=2, pp=2, microbatches=6, steps=2, seed=3)
    write_run(spec, tmp_path)
    views = analyze([tmp_path]).pipelines
    assert len(views) == 2  # one pipeline per data-parallel replica
    for view in views:
        assert (view.stages, view.microbatches) == (2, 6)
        assert view.textbook_bubble_pct == pytest.approx(100 / 7)
        stage_ranks = [s.rank for s in view.per_stage]
        assert stage_ranks[0] < 2 <= stage_ranks[1]  # stage-major ranks


def test_an_unbalanced_stage_is_named(tmp_path: Path) -> None:
    write_run(
        dp_pp_run(dp=1, pp=4, microbatches=8, steps=2, layers_per_stage=(2, 2, 4, 2)), tmp_path
    )
    (view,) = analyze([tmp_path]).pipelines
    assert view.verdict.startswith("stage 2 (rank 2) computes")
    bubbles = {s.stage: s.bubble_pct for s in view.per_stage}
    assert bubbles[2] < min(b for st, b in bubbles.items() if st != 2)


def test_overrides_and_json(tmp_path: Path) -> None:
    write_run(dp_pp_run(dp=1, pp=4, microbatches=8, steps=2), tmp_path)
    given = analyze(tmp_path, pp_stages=4, microbatches=16).pipelines[0]
    assert (given.microbatches, given.microbatches_source) == (16, "--microbatches")
    assert given.textbook_bubble_pct == pytest.approx(100 * 3 / 19)
    result = runner.invoke(app, ["analyze", str(tmp_path), "-f", "json"])
    assert result.exit_code == EXIT_OK, result.stderr
    doc = json.loads(result.stdout)
    jsonschema.validate(doc, SCHEMA)
    assert doc["pipelines"][0]["stages"] == 4
    text = runner.invoke(app, ["analyze", str(tmp_path)]).stdout
    assert "Pipeline" in text and "textbook 1F1B bubble 27.3 %" in text


def test_no_pipeline_without_send_recv() -> None:
    assert analyze([REPO / "fixtures" / "sample-run"]).pipelines == ()


def test_pipelines_alike_are_shown_once(tmp_path: Path) -> None:
    # 4 replicas of a 2-stage pipeline, one with a slow rank: two verdicts, two tables
    write_run(dp_pp_run(dp=4, pp=2, microbatches=4, steps=2, slow_rank=5, slowdown=0.5), tmp_path)
    views = analyze([tmp_path]).pipelines
    shown = [v for v in views if v.shown_as is None]
    assert len(views) == 4 and len(shown) == 2
    slow = next(v for v in shown if v.slow_rank is not None)
    assert slow.slow_rank == 5 and not any(v.shown_as == slow.group for v in views)
    (balanced,) = (v for v in shown if v.slow_rank is None)
    alike = [v for v in views if v.shown_as == balanced.group]
    assert len(alike) == 2 and all(v.span_ns <= balanced.span_ns for v in alike)
    text = runner.invoke(app, ["analyze", str(tmp_path)], env={"COLUMNS": "140"}).stdout
    assert sum(line.startswith("Pipeline ") for line in text.splitlines()) == 2
    assert "2 more pipelines like this" in text


def test_the_se_jobs_32_pipelines_are_one_table() -> None:
    se = REPO.parent / "shared" / "data" / "traces" / "bytedance-straggler-SE"
    if not se.is_dir():
        pytest.skip("../shared/data/traces is not present")
    result = runner.invoke(app, ["analyze", str(se)], env={"COLUMNS": "140"})
    lines = result.stdout.splitlines()
    assert sum(line.startswith("Pipeline ") for line in lines) == 1
    assert any(line.startswith("  31 more pipelines like this (") for line in lines)
