"""``tracecomm export`` on the real shared traces (metrics.md §17): read back, every kept rank
and step gives the report's figures, and the exposed-communication track adds up to its
exposed communication."""

from __future__ import annotations

import gzip
import json
from collections import defaultdict
from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

from tracecomm.cli import EXIT_OK, app
from tracecomm.engine import breakdown
from tracecomm.ingest import load_merged
from tracecomm.run.request import request_of
from tracecomm.run.session import analyze_run

FOLDERS = (
    "bytedance-straggler-SE",
    "hta-amd_trace",
    "hta-mtia_trace_single_rank",
    "hta-nccl_parser_config",
    "hta-negative_queue_length_values_check",
    "hta-ns_resolution_trace",
    "hta-trace_diff_control",
    "hta-trace_filter",
)


@pytest.mark.parametrize("folder", FOLDERS)
def test_real_trace_export_round_trips(shared_traces: Path, tmp_path: Path, folder: str) -> None:
    run, out = shared_traces / folder, tmp_path / "view.json.gz"
    result = CliRunner().invoke(app, ["export", str(run), "-o", str(out), "--export-steps", "all"])
    assert result.exit_code == EXIT_OK, result.stderr
    doc = json.loads(gzip.decompress(out.read_bytes()))
    exposed: dict[tuple[int, int], int] = defaultdict(int)
    for e in doc["traceEvents"]:
        if e["ph"] == "X" and e.get("cat") == "tracecomm" and e["name"].startswith("exposed "):
            exposed[(e["pid"], e["args"]["step"])] += round(e["dur"] * 1000)
    read_back = {ev.meta.rank: breakdown(ev) for ev in load_merged(out, "pid")}
    again = {rank: {s.step: s for s in bd.steps} for rank, bd in read_back.items()}
    analysis = analyze_run(request_of(run))
    report = analysis.report
    kept = {r["rank"] for r in doc["tracecomm"]["ranks"]}
    assert kept and set(again) == kept
    for rank in report.ranks:
        if rank.rank not in kept:
            continue
        for step in rank.included_steps:
            back = again[rank.rank][step.step]
            assert step.window is not None and back.window is not None
            assert back.window.figures == step.window.figures, (rank.rank, step.step)
            assert back.window.by_type == step.window.by_type
            assert back.window.idle_by_cause == step.window.idle_by_cause
            assert exposed[(rank.rank, step.step)] == step.window.figures.exposed_comm_ns
        # the collectives read back are the same instances of the same groups (issue 34: the
        # export kept "Collective name" only, and a re-read put every group in "world")
        steps = [s.step for s in rank.included_steps]
        mine = analysis.side.breakdown(rank.rank).collectives
        assert _groups(read_back[rank.rank].collectives, steps) == _groups(mine, steps)
        assert _rank_lists(read_back[rank.rank].collectives) == _rank_lists(mine)


def _groups(instances: pl.DataFrame | None, steps: list[int]) -> list[tuple[object, ...]]:
    if instances is None:
        return []
    cols = ["pg", "group_size", "coll_type", "seq", "nelems", "bytes", "step"]
    return sorted(instances.filter(pl.col("step").is_in(steps)).select(cols).rows())


def _rank_lists(instances: pl.DataFrame | None) -> set[tuple[object, ...]]:
    """Each group's rank list (on its first instance of the rank, engine.collectives)."""
    if instances is None:
        return set()
    return set(instances.select("pg", "pg_ranks").drop_nulls().rows())
