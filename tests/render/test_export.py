"""``tracecomm export`` (metrics.md §17): the trace round-trips through tracecomm's own ingest
with the report's figures, its exposed-communication track adds up to the report's exposed
communication to the ns, and every event has the fields the Trace Event Format requires.
With ``TRACE_PROCESSOR_SHELL`` set (Perfetto's trace processor), the trace is also loaded there
and its tracks queried."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
from collections import defaultdict
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from typer.testing import CliRunner

import tracecomm
from tests.conftest import REPO, SAMPLE_RUN
from tracecomm import analyze
from tracecomm.cli import EXIT_NO_INPUT, EXIT_OK, EXIT_USAGE, app
from tracecomm.engine import breakdown
from tracecomm.engine.model import StepFigures
from tracecomm.ingest import load_merged
from tracecomm.render.export import CAT, TRACKS
from tracecomm.synth import dp_pp_run, fsdp_run, write_run
from tracecomm.synth.graphs import graph_replay_run

GLOO = REPO / "fixtures" / "gloo-run"
RUNS = {
    "sample run": lambda tmp: SAMPLE_RUN,
    "16 ranks on two hosts, skewed clocks": lambda tmp: (
        write_run(fsdp_run(world_size=16, steps=2, layers=2, seed=31, gzip=False), tmp / "run")[
            0
        ].parent
    ),
    "pipeline stages": lambda tmp: write_run(dp_pp_run(dp=2, pp=2), tmp / "run")[0].parent,
    "graph replays tied by node ids": lambda tmp: (
        write_run(
            graph_replay_run(world_size=2, graph_links="node", capture_step=True), tmp / "run"
        )[0].parent
    ),
    "idle causes": lambda tmp: (
        write_run(
            fsdp_run(world_size=2, steps=3, seed=32, idle_detail=True, optimizer_launch_us=40),
            tmp / "run",
        )[0].parent
    ),
}


def export(run: Path, out: Path, *extra: str) -> dict[str, Any]:
    result = CliRunner().invoke(app, ["export", str(run), "-o", str(out), *extra])
    assert result.exit_code == EXIT_OK, result.stderr
    assert "wrote" in result.stderr and "MB" in result.stderr and "events" in result.stderr
    data = out.read_bytes()
    doc: dict[str, Any] = json.loads(gzip.decompress(data) if out.suffix == ".gz" else data)
    return doc


def reread(path: Path) -> dict[int, dict[int, StepFigures]]:
    return {
        ev.meta.rank or 0: {s.step: s for s in breakdown(ev).steps}
        for ev in load_merged(path, "pid")
    }


def track_sums(doc: dict[str, Any], track: str) -> dict[tuple[int, int, str], int]:
    """(rank, step, event name) -> summed ns of the tracecomm track ``track``."""
    tids = {
        (e["pid"], e["tid"])
        for e in doc["traceEvents"]
        if e["ph"] == "M"
        and e["name"] == "thread_name"
        and e["args"]["name"] == f"tracecomm: {track}"
    }
    out: dict[tuple[int, int, str], int] = defaultdict(int)
    for e in doc["traceEvents"]:
        if e["ph"] == "X" and (e["pid"], e["tid"]) in tids and "step" in e["args"]:
            out[(e["pid"], e["args"]["step"], e["name"])] += round(e["dur"] * 1000)
    return out


@pytest.mark.parametrize("name", sorted(RUNS))
def test_the_export_round_trips_with_the_reports_figures(tmp_path: Path, name: str) -> None:
    run = RUNS[name](tmp_path)
    report = analyze(run)
    doc = export(run, tmp_path / "view.json.gz", "--export-steps", "all")
    kept = {r["rank"] for r in doc["tracecomm"]["ranks"]}
    assert kept and set(doc["tracecomm"]["steps"]) == set(report.summary.steps)
    again = reread(tmp_path / "view.json.gz")
    assert set(again) == kept
    exposed = track_sums(doc, TRACKS[0])
    idle = track_sums(doc, TRACKS[1])
    for rank in report.ranks:
        if rank.rank not in kept:
            continue
        for step in rank.included_steps:
            back = again[rank.rank][step.step]
            assert step.window is not None and back.window is not None and back.complete
            assert back.window.figures == step.window.figures, (rank.rank, step.step)
            assert back.window.by_type == step.window.by_type
            assert back.window.idle_by_cause == step.window.idle_by_cause
            mine = {k[2]: v for k, v in exposed.items() if k[:2] == (rank.rank, step.step)}
            assert sum(mine.values()) == step.window.figures.exposed_comm_ns
            alone = {n.removeprefix("exposed "): ns for n, ns in mine.items() if "+" not in n}
            for t in step.window.by_type:  # exposed while no other type was: at most its own
                assert alone.get(t.coll_type, 0) <= t.exposed_comm_ns
            causes = {
                k[2].removeprefix("idle: "): v
                for k, v in idle.items()
                if k[:2] == (rank.rank, step.step)
            }
            assert causes == {c: ns for c, ns in (step.window.idle_by_cause or {}).items() if ns}


def test_default_ranks_and_step(tmp_path: Path) -> None:
    report = analyze(SAMPLE_RUN)
    doc = export(SAMPLE_RUN, tmp_path / "view.json")  # plain JSON: no .gz in the name
    roles = {r["rank"]: r["role"] for r in doc["tracecomm"]["ranks"]}
    s = report.summary
    assert roles[s.slowest_first[-1]] == "fastest"
    assert roles[s.slowest_first[0]].startswith("slowest")
    assert s.median_rank is not None and roles[s.median_rank] == "median"
    assert len(doc["tracecomm"]["steps"]) == 1
    # a flagged straggler is exported too (the sample's rank 3 is under the flag line)
    write_run(fsdp_run(world_size=8, slow_rank=5, slowdown=0.4), tmp_path / "slow")
    slow = analyze(tmp_path / "slow")
    doc = export(tmp_path / "slow", tmp_path / "slow.json")
    roles = {r["rank"]: r["role"] for r in doc["tracecomm"]["ranks"]}
    assert slow.stragglers is not None and slow.stragglers.flagged == (5,)
    assert "straggler" in roles[5]


def test_one_rank_has_every_role(tmp_path: Path) -> None:
    write_run(fsdp_run(world_size=1, steps=2), tmp_path / "run")
    doc = export(tmp_path / "run", tmp_path / "v.json.gz")
    assert [r["role"] for r in doc["tracecomm"]["ranks"]] == ["fastest/median/slowest"]


def test_nothing_to_export_is_said(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app, ["export", str(GLOO), "-o", str(tmp_path / "v.json"), "--export-steps", "all"]
    )
    assert result.exit_code == EXIT_NO_INPUT
    assert "nothing to export" in result.stderr and not (tmp_path / "v.json").exists()


def test_chosen_ranks_steps_and_bad_ones(tmp_path: Path) -> None:
    doc = export(
        SAMPLE_RUN, tmp_path / "v.json.gz", "--export-ranks", "1,6", "--export-steps", "12:13"
    )
    assert [r["rank"] for r in doc["tracecomm"]["ranks"]] == [1, 6]
    assert doc["tracecomm"]["steps"] == [12, 13]
    bad = CliRunner().invoke(
        app, ["export", str(SAMPLE_RUN), "-o", str(tmp_path / "x.json"), "--export-ranks", "99"]
    )
    assert bad.exit_code == EXIT_USAGE and "--export-ranks: rank 99" in bad.stderr
    bad = CliRunner().invoke(
        app, ["export", str(SAMPLE_RUN), "-o", str(tmp_path / "x.json"), "--export-steps", "7:3"]
    )
    assert bad.exit_code == EXIT_USAGE and "--export-steps" in bad.stderr


def test_an_unwritable_output_exits_74(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app, ["export", str(SAMPLE_RUN), "-o", str(tmp_path / "no" / "v.json")]
    )
    assert result.exit_code == 74 and "cannot write the trace" in result.stderr


def test_markers_and_tracecomm_tracks_are_no_work(tmp_path: Path) -> None:
    doc = export(SAMPLE_RUN, tmp_path / "v.json.gz")
    instants = [e for e in doc["traceEvents"] if e["ph"] == "i"]
    assert any(e["name"] == "straggler" and e["s"] == "p" for e in instants)
    # one marker per finding of the bottom line (metrics.md §14), what to try in its text
    report = tracecomm.analyze(SAMPLE_RUN)
    for finding in report.findings:
        texts = [e["args"]["text"] for e in instants if e["name"] == finding.kind]
        assert any(finding.title in t and finding.advice[0] in t for t in texts)
    assert all(e["cat"] == CAT for e in instants)
    ours = [e for e in doc["traceEvents"] if e.get("cat") == CAT and e["ph"] == "X"]
    assert ours and {e["tid"] for e in ours} <= {
        e["tid"]
        for e in doc["traceEvents"]
        if e["ph"] == "M" and e["args"].get("name", "").startswith("tracecomm: ")
    }


# Trace Event Format (the Chrome "Trace Event Format" document): the fields each phase needs
REQUIRED = {
    "X": {"name", "ph", "ts", "dur", "pid", "tid"},
    "i": {"name", "ph", "ts", "pid", "tid", "s"},
    "M": {"name", "ph", "pid", "args"},
    "s": {"name", "ph", "ts", "pid", "tid", "id", "cat"},
    "f": {"name", "ph", "ts", "pid", "tid", "id", "cat", "bp"},
}
METADATA = {
    "process_name",
    "process_labels",
    "process_sort_index",
    "thread_name",
    "thread_sort_index",
}


def test_every_event_has_the_fields_the_trace_event_format_requires(tmp_path: Path) -> None:
    run = RUNS["graph replays tied by node ids"](tmp_path)
    doc = export(run, tmp_path / "v.json.gz", "--export-steps", "all")
    assert isinstance(doc["traceEvents"], list) and doc["displayTimeUnit"] in ("ms", "ns")
    flows: dict[int, set[str]] = defaultdict(set)
    for e in doc["traceEvents"]:
        assert e["ph"] in REQUIRED, e
        assert REQUIRED[e["ph"]] <= set(e), e
        assert isinstance(e["pid"], int) and isinstance(e.get("tid", 0), int)
        if "ts" in e:
            assert isinstance(e["ts"], int | float) and e["ts"] >= 0
        if e["ph"] == "X":
            assert (
                isinstance(e["dur"], int | float) and e["dur"] >= 0 and isinstance(e["name"], str)
            )
            assert isinstance(e.get("args", {}), dict)
        if e["ph"] == "i":
            assert e["s"] in ("g", "p", "t")
        if e["ph"] == "M":
            assert e["name"] in METADATA
        if e["ph"] in ("s", "f"):
            flows[e["id"]].add(e["ph"])
            if e["ph"] == "f":
                assert e["bp"] == "e"
    assert flows and all(phases == {"s", "f"} for phases in flows.values())


def test_tracecomm_reads_the_export_back_from_the_cli(tmp_path: Path) -> None:
    export(SAMPLE_RUN, tmp_path / "v.json.gz", "--export-steps", "all", "--export-ranks", "2")
    result = CliRunner().invoke(
        app, ["analyze", str(tmp_path / "v.json.gz"), "--rank-from", "pid", "-f", "json"]
    )
    assert result.exit_code == EXIT_OK, result.stderr
    doc = json.loads(result.stdout)
    report = analyze(SAMPLE_RUN)
    rank2 = next(r for r in report.ranks if r.rank == 2)
    assert [r["rank"] for r in doc["ranks"]] == [2]
    got = {s["step"]: s["window"]["figures"]["exposed_comm_ns"] for s in doc["ranks"][0]["steps"]}
    assert got == {
        s.step: s.window.figures.exposed_comm_ns for s in rank2.included_steps if s.window
    }


SHELL = os.environ.get("TRACE_PROCESSOR_SHELL")


@pytest.mark.skipif(
    not SHELL, reason="TRACE_PROCESSOR_SHELL (Perfetto's trace_processor_shell) not set"
)
def test_perfetto_loads_the_export_and_its_exposed_track_adds_up(tmp_path: Path) -> None:
    assert SHELL is not None
    doc = export(SAMPLE_RUN, tmp_path / "v.json", "--export-steps", "all")
    query = tmp_path / "q.sql"
    query.write_text(
        "select p.pid as pid, count(*) as n, sum(s.dur) as ns from slice s "
        "join thread_track tt on s.track_id = tt.id join thread t using (utid) "
        "join process p using (upid) "
        f"where t.name = 'tracecomm: {TRACKS[0]}' group by p.pid order by p.pid;"
    )
    out = subprocess.run(
        [SHELL, "-q", str(query), str(tmp_path / "v.json")],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    ).stdout
    rows = [line.replace('"', "").split(",") for line in out.strip().splitlines()[1:]]
    got = {int(pid): (int(n), int(ns)) for pid, n, ns in rows}
    report = analyze(SAMPLE_RUN)
    kept = {r["rank"] for r in doc["tracecomm"]["ranks"]}
    for rank in report.ranks:
        if rank.rank in kept:
            want = sum(s.window.figures.exposed_comm_ns for s in rank.included_steps if s.window)
            spans = sum(
                1
                for e in doc["traceEvents"]
                if e["ph"] == "X" and e["pid"] == rank.rank and e["name"].startswith("exposed ")
            )
            n, ns = got[rank.rank]
            assert n == spans
            assert abs(ns - want) <= n  # Perfetto converts each µs float to ns: ≤ 1 ns per slice
    assert pl is not None
