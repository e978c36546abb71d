"""CUDA graphs (metrics.md §16) on generated runs with known truth: every kernel a graph
replayed is attributed to its step and to the op that launched the graph, whichever way the
trace ties it to the launch; launches made during a graph capture run nothing, are never
missing, and a trace of the capture alone is explained, not analyzed."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

from tests.conftest import analyze_json
from tests.engine.test_synth_truth import assert_run_matches
from tracecomm.cli import EXIT_NO_INPUT, app
from tracecomm.engine import breakdown
from tracecomm.engine.classify import classify
from tracecomm.engine.steps import BY_CORRELATION, BY_REPLAY_ORDER, BY_TIME, link_launches
from tracecomm.ingest import load_rank
from tracecomm.synth import RunSpec, write_run
from tracecomm.synth.graphs import graph_capture_run, graph_replay_run
from tracecomm.synth.layout import GRAPH_REPLAY_OP

RUNS = {
    "correlation": (lambda: graph_replay_run(world_size=2), BY_CORRELATION),
    "graph nodes, one graph": (
        lambda: graph_replay_run(graphs=1, graph_links="node"),
        BY_REPLAY_ORDER,
    ),
    "graph nodes, two graphs": (lambda: graph_replay_run(graph_links="node"), BY_TIME),
    "capture, then replays": (lambda: graph_replay_run(capture_step=True), BY_CORRELATION),
}


def truth(spec: RunSpec, rank: int) -> dict[tuple[int, int], int]:
    """(stream, start) -> step of every kernel a graph replayed."""
    ranks = {r.rank: r for r in spec.ranks}
    return {
        (op.stream, op.start_ns): step.number
        for step in ranks[rank].steps
        for op in step.ops
        if op.graph
    }


@pytest.mark.parametrize("name", sorted(RUNS))
def test_every_replayed_kernel_is_attributed_to_its_step_and_op(tmp_path: Path, name: str) -> None:
    make, via = RUNS[name]
    spec = make()
    paths = write_run(spec, tmp_path / "run")
    for path, rank in zip(paths, sorted(r.rank for r in spec.ranks), strict=True):
        events = load_rank(path)
        linked = link_launches(classify(events), events)
        ops = events.launches.select(pl.col("correlation").alias("launch_corr"), "op")
        graph = linked.filter(pl.col("graph_via").is_not_null()).join(
            ops, on="launch_corr", how="left"
        )
        base = events.meta.base_time_ns or 0
        got = {
            (stream, start - base): step
            for stream, start, step in graph.select("stream", "start_ns", "step").iter_rows()
        }
        assert got == truth(spec, rank)
        assert graph.height == len(got)
        assert set(graph["graph_via"]) == {via}
        assert set(graph["op"]) == {GRAPH_REPLAY_OP}


@pytest.mark.parametrize("name", sorted(RUNS))
def test_graph_runs_match_their_schedule_exactly(tmp_path: Path, name: str) -> None:
    spec = RUNS[name][0]()
    write_run(spec, tmp_path / "run")
    assert_run_matches(spec, analyze_json(tmp_path / "run"))


def test_captured_launches_are_not_missing(tmp_path: Path) -> None:
    spec = graph_replay_run(capture_step=True)
    result = breakdown(load_rank(write_run(spec, tmp_path / "run")[0]))
    assert all(s.complete for s in result.steps) and len(result.steps) == 4
    assert len(result.notes) == 1 and "not counted as missing" in result.notes[0]
    assert "9 kernel launches were made while a stream captured" in result.notes[0]


def test_a_capture_only_trace_is_explained(tmp_path: Path) -> None:
    write_run(graph_capture_run(), tmp_path / "run")
    result = CliRunner().invoke(app, ["analyze", str(tmp_path / "run")])
    assert result.exit_code == EXIT_NO_INPUT
    assert "this trace records graph capture" in result.stderr
    assert "profile the replay" in result.stderr
    assert "no complete step" not in result.stderr
