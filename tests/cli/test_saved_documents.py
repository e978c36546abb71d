"""A saved ``analyze --format json`` document is read by one loader (``run.saved``) whichever
command reads it: ``report``, ``check`` (as the run or as ``--baseline``), ``baseline`` and
``compare`` take the same documents and refuse the same bad ones with the same one line
(exit 2, never a traceback)."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tracecomm.cli import EXIT_OK, EXIT_PARTIAL, EXIT_USAGE, app
from tracecomm.synth import fsdp_run, write_run

runner = CliRunner()
MODEL = ["--model-flops-per-step", "2e11", "--tokens-per-step", "4096"]


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A generated run (a straggler, model FLOPs), its analyze JSON with the timeline, the
    baseline and the comparison written from it."""
    out = tmp_path_factory.mktemp("saved")
    write_run(fsdp_run(world_size=4, steps=3, seed=4, slowdown=0.2), out / "run")
    analyzed = runner.invoke(
        app, ["analyze", str(out / "run"), "-f", "json", "--detail", "timeline", *MODEL]
    )
    assert analyzed.exit_code == EXIT_OK, analyzed.stderr
    (out / "run.json").write_text(analyzed.stdout)
    doc = json.loads(analyzed.stdout)
    assert doc["stragglers"] and doc["throughput"]["mfu"] is not None and doc["timeline"]
    made = runner.invoke(app, ["baseline", str(out / "run.json"), "-o", str(out / "base.json")])
    assert made.exit_code == EXIT_OK, made.stderr
    compared = runner.invoke(
        app, ["compare", str(out / "run.json"), str(out / "run.json"), "-f", "json"]
    )
    assert compared.exit_code == EXIT_OK, compared.stderr
    (out / "compare.json").write_text(compared.stdout)
    return {
        "root": out,
        "run": out / "run",
        "json": out / "run.json",
        "baseline": out / "base.json",
        "compare": out / "compare.json",
    }


def _doc(saved: dict[str, Path]) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(saved["json"].read_text())
    return doc


# each: how to spoil the saved document (its JSON text, or its values), and what the line says
Damage = Callable[[str, dict[str, Any]], str]


def _values(change: Callable[[dict[str, Any]], None]) -> Damage:
    def damage(text: str, doc: dict[str, Any]) -> str:
        doc = copy.deepcopy(doc)
        change(doc)
        return json.dumps(doc)

    return damage


def _set(*where: str | int, to: object) -> Damage:
    def change(doc: dict[str, Any]) -> None:
        target: Any = doc
        for step in where[:-1]:
            target = target[step]
        target[where[-1]] = to

    return _values(change)


def _add(*where: str | int, by: int) -> Damage:
    def change(doc: dict[str, Any]) -> None:
        target: Any = doc
        for step in where[:-1]:
            target = target[step]
        target[where[-1]] += by

    return _values(change)


def _drop(key: str) -> Damage:
    return _values(lambda doc: doc.pop(key))


def _median_beyond_its_step(doc: dict[str, Any]) -> None:
    median = doc["ranks"][0]["step_median"]
    median["idle_ns"] = median["window_ns"] + 1


BAD: dict[str, tuple[Damage, str]] = {
    "not JSON": (
        lambda text, doc: text.replace('"ranks": [', '"ranks": [,', 1),
        "not an analyze JSON document (JSON is malformed",
    ),
    "truncated": (lambda text, doc: text[:5000], "not an analyze JSON document (Input data was"),
    "trailing text": (lambda text, doc: text + "{}", "JSON is malformed: trailing characters"),
    "another tool": (_set("tool", "name", to="hta"), "not a tracecomm document (tool 'hta')"),
    "a newer schema": (_set("schema_version", to=4), "report schema version 4; this tracecomm"),
    "an older schema": (_set("schema_version", to=0), "report schema version 0; this tracecomm"),
    # written before the step parts added up (issue 29): read again, not misread
    "a version 1 document": (
        _set("schema_version", to=1),
        "report schema version 1; this tracecomm reads 3",
    ),
    # a crafted projection basis would replay to negative or overflowing step times
    "a replayed event that ends before it starts": (
        _set("projection_basis", "events", "end_ns", 0, to=0),
        "impossible figures: projection basis: an event that ends before it starts",
    ),
    "a link model of negative bandwidth": (
        _set("projection_basis", "fits", 0, "bus_gbps", to=-5.0),
        "link model is not a link",
    ),
    # written before the projection basis (issue 44): no projection from it, read again
    "a version 2 document": (
        _set("schema_version", to=2),
        "report schema version 2; this tracecomm reads 3: analyze the run again",
    ),
    "a window that does not add up": (
        _add("ranks", 0, "steps", 1, "window", "figures", "compute_ns", by=1),
        "impossible figures: rank 0: a window whose figures do not add up",
    ),
    "a negative time": (
        _set("ranks", 1, "window", "figures", "compute_ns", to=-5),
        "Expected `int` >= 0 - at `$.ranks[1].window.figures.compute_ns`",
    ),
    "a negative step span": (
        _set("ranks", 2, "steps", 0, "cpu_span_ns", to=-1),
        "impossible figures: rank 2: a negative step span",
    ),
    "a time as text": (
        _set("ranks", 0, "steps", 1, "window", "figures", "window_ns", to="12"),
        "Expected `int`, got `str` - at `$.ranks[0].steps[1].window.figures.window_ns`",
    ),
    "a share over 100 %": (
        _set("stragglers", "recoverable_pct", to=250.0),
        "Expected `float` <= 100.0 - at `$.stragglers.recoverable_pct`",
    ),
    "an overlap over 100 %": (
        _set("ranks", 0, "window", "figures", "overlap_pct", to=140.0),
        "overlap_pct 140.0 is not what the part's times give (",
    ),
    "a negative MFU": (
        _set("throughput", "mfu", to=-0.5),
        "impossible figures: mfu -0.5 is not a fraction of the peak",
    ),
    "idle causes that do not add up": (
        _add("ranks", 0, "steps", 1, "window", "idle_by_cause", "other", by=7),
        "impossible figures: rank 0: idle causes that do not add up to the idle time",
    ),
    "a median step shorter than its idle time": (
        _values(_median_beyond_its_step),
        "impossible figures: rank 0: the median step time",
    ),
    "no rank": (_set("summary", "ranks_analyzed", to=0), ">= 1 - at `$.summary.ranks_analyzed`"),
    "a world of no rank": (
        _set("summary", "world_size", to=0),
        "impossible figures: world_size 0 is not a rank count",
    ),
    "a rank that is a boolean": (_set("ranks", 0, "rank", to=True), "at `$.ranks[0].rank`"),
    "a missing section": (_drop("ranks"), "missing required field `ranks`"),
    "an unknown field": (_set("ranks", 0, "surprise", to=1), "unknown field `surprise`"),
}


def run_all(saved: dict[str, Path], bad: Path, tmp: Path) -> dict[str, tuple[int, str, str]]:
    """Each command given ``bad`` where it takes a saved analyze document: exit code, stderr
    and stdout."""
    good = str(saved["json"])
    commands = {
        "report": ["report", str(bad), "-o", str(tmp / "page.html")],
        "check --baseline": ["check", good, "--baseline", str(bad)],
        "check RUN": ["check", str(bad), "--baseline", str(saved["baseline"])],
        "baseline": ["baseline", str(bad), "-o", str(tmp / "base.json")],
        "compare": ["compare", good, str(bad)],
    }
    out = {}
    for name, argv in commands.items():
        result = runner.invoke(app, argv)
        out[name] = (result.exit_code, result.stderr, result.stdout)
    return out


def assert_refused_alike(results: dict[str, tuple[int, str, str]], bad: Path, says: str) -> None:
    lines = {name: stderr.strip().splitlines() for name, (_, stderr, _) in results.items()}
    first = next(iter(lines.values()))
    assert len(first) == 1, first
    assert first[0].startswith(f"tracecomm: error: {bad}: "), first[0]
    assert says in first[0], first[0]
    for name, (code, stderr, stdout) in results.items():
        assert code == EXIT_USAGE, (name, code, stderr)
        assert lines[name] == first, (name, lines[name], first)
        assert "Traceback" not in stderr and stdout == "", name


@pytest.mark.parametrize("case", sorted(BAD))
def test_every_command_refuses_a_bad_document_in_the_same_line(
    saved: dict[str, Path], tmp_path: Path, case: str
) -> None:
    damage, says = BAD[case]
    bad = tmp_path / "bad.json"
    bad.write_text(damage(saved["json"].read_text(), _doc(saved)))
    results = run_all(saved, bad, tmp_path)
    assert_refused_alike(results, bad, says)
    assert not (tmp_path / "page.html").exists() and not (tmp_path / "base.json").exists()


def test_an_oversized_document_is_refused_alike(
    saved: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("tracecomm.run.saved.MAX_SAVED_BYTES", 10_000)
    big = tmp_path / "big.json"
    big.write_text(saved["json"].read_text())
    results = {k: v for k, v in run_all(saved, big, tmp_path).items() if k != "check --baseline"}
    results.pop("compare")  # its first run, the same file, is refused first: checked below
    assert_refused_alike(results, big, "bytes: larger than a saved report can be")
    code, stderr, _ = run_all(saved, big, tmp_path)["compare"]
    assert code == EXIT_USAGE and stderr.strip().endswith("larger than a saved report can be")


@pytest.mark.parametrize("other", ["compare", "nccl"])
def test_another_tracecomm_document_is_refused_alike(
    saved: dict[str, Path], tmp_path: Path, other: str
) -> None:
    if other == "nccl":
        path = tmp_path / "nccl.json"
        path.write_text(json.dumps({"kind": "tracecomm-nccl", "schema_version": 2}))
    else:
        path = saved["compare"]
    results = run_all(saved, path, tmp_path)
    assert_refused_alike(
        results,
        path,
        f"a tracecomm-{other} document holds no per-step figures: give the run folder, its "
        "summaries or its `analyze --format json` document",
    )


def test_a_baseline_is_a_baseline_to_check_and_nothing_else(
    saved: dict[str, Path], tmp_path: Path
) -> None:
    results = run_all(saved, saved["baseline"], tmp_path)
    assert results.pop("check --baseline")[0] == EXIT_OK
    assert results.pop("check RUN")[0] == EXIT_OK
    assert results.pop("baseline")[0] == EXIT_OK
    assert_refused_alike(
        results, saved["baseline"], "a tracecomm-baseline document holds no per-step figures"
    )


def test_the_report_of_a_saved_document_is_the_report_of_the_run(
    saved: dict[str, Path], tmp_path: Path
) -> None:
    of_run, of_json = tmp_path / "run.html", tmp_path / "json.html"
    result = runner.invoke(app, ["report", str(saved["run"]), "-o", str(of_run), *MODEL])
    assert result.exit_code == EXIT_OK, result.stderr
    result = runner.invoke(app, ["report", str(saved["json"]), "-o", str(of_json)])
    assert result.exit_code == EXIT_OK, result.stderr
    assert "no one-step timeline" not in result.stderr
    assert of_json.read_bytes() == of_run.read_bytes()


def test_the_report_of_a_document_saved_without_the_timeline_says_so(
    saved: dict[str, Path], tmp_path: Path
) -> None:
    doc = _doc(saved) | {"timeline": None, "partial": True}
    path = tmp_path / "plain.json"
    path.write_text(json.dumps(doc))
    result = runner.invoke(app, ["report", str(path), "-o", str(tmp_path / "page.html")])
    assert result.exit_code == EXIT_PARTIAL, result.stderr
    assert "was saved without --detail timeline" in result.stderr
    assert (tmp_path / "page.html").read_text().startswith("<!doctype html>")


def test_report_draws_a_saved_document_alone_and_projects_it_as_its_run(
    saved: dict[str, Path], tmp_path: Path
) -> None:
    """A saved document is drawn alone; ``--project`` projects it from the projection basis it
    holds, to the figures the run gives (issue 44: no trace is read again for it)."""
    page = str(tmp_path / "page.html")
    result = runner.invoke(app, ["report", str(saved["json"]), str(saved["run"]), "-o", page])
    assert result.exit_code == EXIT_USAGE and "drawn alone" in result.stderr
    result = runner.invoke(app, ["report", str(saved["json"]), "--project", "-o", page])
    assert result.exit_code == EXIT_OK, result.stderr
    flags = ["--to", "8,64", "-f", "json"]
    of_saved = runner.invoke(app, ["project", str(saved["json"]), *flags])
    of_run = runner.invoke(app, ["project", str(saved["run"]), *flags, *MODEL])
    assert of_saved.exit_code == of_run.exit_code == EXIT_OK, of_saved.stderr + of_run.stderr
    projection = json.loads(of_saved.stdout)["projection"]
    assert [s["world_size"] for s in projection["sizes"]] == [4, 8, 64]
    assert projection == json.loads(of_run.stdout)["projection"]


def test_the_gate_reads_a_saved_document_as_it_reads_the_run(
    saved: dict[str, Path], tmp_path: Path
) -> None:
    """``baseline`` of the saved document and of the run folder hold the same figures, and
    ``check`` of the run against either passes with the same figures."""
    of_run = tmp_path / "of-run.json"
    result = runner.invoke(app, ["baseline", str(saved["run"]), "-o", str(of_run), *MODEL])
    assert result.exit_code == EXIT_OK, result.stderr
    a, b = json.loads(of_run.read_text()), json.loads(saved["baseline"].read_text())
    assert a.pop("source") == str(saved["run"]) and b.pop("source") == str(saved["json"])
    assert a == b
    verdicts = []
    for base in (saved["json"], saved["baseline"]):
        result = runner.invoke(
            app, ["check", str(saved["json"]), "--baseline", str(base), "-f", "json"]
        )
        assert result.exit_code == EXIT_OK, result.stderr
        doc = json.loads(result.stdout)
        verdicts.append([(f["figure"], f["baseline"], f["current"]) for f in doc["figures"]])
    assert verdicts[0] == verdicts[1]


@pytest.mark.parametrize(
    ("in_baseline", "in_document"),
    [
        (
            lambda b: b["ranks"][0].update(idle_ns=b["ranks"][0]["step_window_ns"] + 1),
            _median_beyond_its_step,
        ),
        (lambda b: b.update(mfu=-0.25), lambda d: d["throughput"].update(mfu=-0.25)),
        (lambda b: b.update(world_size=0), lambda d: d["summary"].update(world_size=0)),
    ],
)
def test_a_baseline_is_checked_as_the_document_it_came_from(
    saved: dict[str, Path],
    tmp_path: Path,
    in_baseline: Callable[[dict[str, Any]], None],
    in_document: Callable[[dict[str, Any]], None],
) -> None:
    """The compact baseline keeps its own reader, but the figures it shares with the analyze
    document are refused by the same checks, in the same words."""
    said = []
    for source, damage in ((saved["baseline"], in_baseline), (saved["json"], in_document)):
        doc = json.loads(source.read_text())
        damage(doc)
        bad = tmp_path / source.name
        bad.write_text(json.dumps(doc))
        result = runner.invoke(app, ["check", str(saved["json"]), "--baseline", str(bad)])
        assert result.exit_code == EXIT_USAGE, result.stdout
        said.append(result.stderr.strip().replace(str(bad), "FILE"))
    assert said[0] == said[1] and said[0].startswith("tracecomm: error: FILE: impossible figures")
