"""Each rank read once per command (issue 44): what the timeline, the projection and the export
need of a rank is taken in the pass that parses it (``engine.views``); no view parses a trace
again. The one exception, the export's second read of the ranks the analysis chose, reads only
those, each file once."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.conftest import SAMPLE_RUN, SHARED_TRACES
from tracecomm.cli import app
from tracecomm.ingest import load as ingest_load

runner = CliRunner(env={"COLUMNS": "140"})
SE = SHARED_TRACES / "bytedance-straggler-SE"


@pytest.fixture
def parses(monkeypatch: pytest.MonkeyPatch) -> Iterator[Counter[str]]:
    """How often each trace file is parsed (the workers run in this process: ``--jobs 1``)."""
    seen: Counter[str] = Counter()
    real = ingest_load.load_rank

    def counted(path: str | Path, *args: object, **kwargs: object) -> object:
        seen[Path(path).name] += 1
        return real(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(ingest_load, "load_rank", counted)
    yield seen


def _ok(*args: str) -> str:
    result = runner.invoke(app, [*args, "--jobs", "1"])
    assert result.exit_code in (0, 4), result.stderr
    return result.stdout


def _traces(run: Path) -> list[str]:
    return sorted(p.name for p in run.iterdir() if ".json" in p.name and "trace" in p.name)


@pytest.mark.parametrize(
    "command",
    [
        ["report", "{run}", "-o", "{tmp}/page.html"],
        ["analyze", "{run}", "--detail", "timeline", "-f", "json"],
        ["project", "{run}", "--to", "64,128"],
        ["analyze", "{run}", "--project"],
        ["export", "{run}", "--export-ranks", "0,3", "--export-steps", "13", "-o", "{tmp}/t.json"],
        ["compare", "{run}", "{run}", "-f", "json"],
    ],
    ids=["report", "timeline", "project", "analyze-project", "export-named", "compare"],
)
def test_every_rank_is_parsed_once(
    command: list[str], parses: Counter[str], tmp_path: Path
) -> None:
    _ok(*(a.format(run=SAMPLE_RUN, tmp=tmp_path) for a in command))
    runs = 2 if command[0] == "compare" else 1
    assert parses == dict.fromkeys(_traces(SAMPLE_RUN), runs)


def test_the_timeline_and_projection_are_those_of_the_views_taken(tmp_path: Path) -> None:
    """The views drawn from what the first pass took: the timeline's median rank shows the
    figures of its step (its lanes are the engine's classes clipped to that window), and the
    projection's first row replays the measured step."""
    doc = json.loads(
        _ok("analyze", str(SAMPLE_RUN), "--detail", "timeline", "--project", "-f", "json")
    )
    timeline = doc["timeline"]
    median = next(r for r in doc["ranks"] if r["rank"] == doc["summary"]["median_rank"])
    step = next(s for s in median["steps"] if s["step"] == timeline["step"])
    drawn = next(t for t in timeline["ranks"] if t["role"] == "median")["timeline"]
    assert drawn["window_ns"] == step["window"]["figures"]["window_ns"]
    basis = doc["projection_basis"]
    assert (basis["rank"], basis["step"]) == (median["rank"], timeline["step"])
    events = basis["events"]
    assert len({len(column) for column in events.values()}) == 1
    assert events["start_ns"] == sorted(events["start_ns"])
    measured = doc["projection"]["sizes"][0]
    assert measured["world_size"] == doc["summary"]["world_size"]


@pytest.mark.skipif(not SE.is_dir(), reason="../shared is absent")
def test_the_export_reads_again_only_the_ranks_it_chose(
    parses: Counter[str], tmp_path: Path
) -> None:
    """The default ranks are chosen by the analysis: those ranks' files are parsed a second
    time, once each, and no other file is."""
    _ok("export", str(SE), "-o", str(tmp_path / "t.json"))
    written = json.loads((tmp_path / "t.json").read_text())
    exported = {
        e["pid"]
        for e in written["traceEvents"]
        if e.get("ph") == "M" and e["name"] == "process_name"
    }
    twice = {name for name, n in parses.items() if n == 2}
    assert len(twice) == len(exported) > 3
    assert set(parses.values()) == {1, 2}
    assert twice == {f"rank{rank}.json.gz" for rank in exported}
