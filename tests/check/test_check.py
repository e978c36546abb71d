"""tracecomm check / baseline on generated baseline / current pairs."""

from __future__ import annotations

import json
import statistics
import xml.etree.ElementTree as ET
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from typer.testing import CliRunner

from tracecomm.cli import EXIT_OK, EXIT_USAGE, app
from tracecomm.synth import RunSpec, expected_run, fsdp_run, write_run

SCHEMAS = Path(__file__).parents[2] / "tracecomm" / "schema"
EXIT_REGRESSION = 1


def spec(seed: int = 0, rs: float = 0.0, slow: float = 0.0, **kw: Any) -> RunSpec:
    return fsdp_run(
        world_size=8,
        steps=4,
        seed=seed,
        slow_rank=3,
        slowdown=slow,
        jitter=0.0,
        comm_slowdown={"ReduceScatter": rs} if rs else None,
        **kw,
    )


def exposed_rs(run: RunSpec) -> float:
    """The gate's figure from the schedule: per rank the median over complete steps of exposed
    ReduceScatter, then the median over ranks."""
    per_rank = [
        statistics.median(e.steps[s].by_type["ReduceScatter"][1] for s in e.complete_steps)
        for e in expected_run(run).values()
    ]
    return statistics.median(per_rank)


@cache
def _written(seed: int, rs: float, slow: float, root: Path) -> Path:
    path = root / f"run-{seed}-{rs}-{slow}"
    write_run(spec(seed, rs, slow), path)
    return path


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("runs")


def run_path(root: Path, seed: int = 0, rs: float = 0.0, slow: float = 0.0) -> Path:
    return _written(seed, rs, slow, root)


def check(current: Path, base: Path, *extra: str) -> tuple[int, str]:
    """Exit code and stdout (with a JSON format: the document alone), else stdout + stderr."""
    result = CliRunner().invoke(app, ["check", str(current), "--baseline", str(base), *extra])
    machine = any(f in extra for f in ("json", "junit", "github"))
    return result.exit_code, result.stdout if machine else result.stdout + result.stderr


@pytest.fixture(scope="module")
def baseline(runs: Path) -> Path:
    out = runs / "base.json"
    result = CliRunner().invoke(app, ["baseline", str(run_path(runs)), "-o", str(out)])
    assert result.exit_code == EXIT_OK, result.stderr
    jsonschema.validate(json.loads(out.read_text()), _schema("baseline"))
    return out


def _schema(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((SCHEMAS / f"{name}.schema.json").read_text())
    return doc


def figures(out: str) -> dict[str, dict[str, Any]]:
    return {f["figure"]: f for f in json.loads(out)["figures"]}


def test_ten_percent_more_exposed_reduce_scatter_fails(runs: Path, baseline: Path) -> None:
    # the slowdown that makes the exposed ReduceScatter figure 10 % larger, by the schedule
    base = exposed_rs(spec())
    assert exposed_rs(spec(rs=0.10)) / base == pytest.approx(1.10, abs=0.01)
    code, out = check(run_path(runs, rs=0.10), baseline, "--format", "json")
    assert code == EXIT_REGRESSION
    rs = figures(out)["exposed_comm.ReduceScatter"]
    assert rs["verdict"] == "regressed" and rs["change"] == pytest.approx(0.10, abs=0.01)
    assert "exposed_comm.ReduceScatter" in json.loads(out)["regressed"]
    code, text = check(run_path(runs, rs=0.10), baseline)
    assert "regressed: exposed_comm.ReduceScatter" in text


def test_one_percent_more_passes(runs: Path, baseline: Path) -> None:
    assert exposed_rs(spec(rs=0.01)) / exposed_rs(spec()) == pytest.approx(1.01, abs=0.002)
    code, out = check(run_path(runs, rs=0.01), baseline, "--format", "json")
    assert code == EXIT_OK, out
    assert figures(out)["exposed_comm.ReduceScatter"]["verdict"] == "pass"


def test_a_new_straggler_fails_on_straggler_delay(runs: Path, baseline: Path) -> None:
    code, out = check(run_path(runs, slow=0.2), baseline, "--format", "json")
    assert code == EXIT_REGRESSION
    delay = figures(out)["straggler_delay"]
    assert delay["verdict"] == "regressed" and delay["current"] > 1_000_000  # > 1 ms per step


def test_an_unchanged_run_passes(runs: Path, baseline: Path) -> None:
    code, out = check(run_path(runs), baseline, "--format", "json")
    assert code == EXIT_OK
    assert {f["verdict"] for f in figures(out).values()} <= {"pass", "not comparable"}
    # and a run folder works as the baseline too
    code, _ = check(run_path(runs), run_path(runs))
    assert code == EXIT_OK


def test_budgets_from_flags_and_settings(runs: Path, baseline: Path, tmp_path: Path) -> None:
    current = run_path(runs, rs=0.10)
    # a looser budget lets +10 % through; an absolute cap catches it instead
    loose = ["--max-exposed-comm-increase", "200%", "--max-step-time-increase", "50%"]
    loose += ["--max-overlap-decrease", "90%"]
    code, _ = check(current, baseline, *loose)
    assert code == EXIT_OK
    code, out = check(current, baseline, *loose, "--max-exposed-comm", "1ms", "-f", "json")
    assert code == EXIT_REGRESSION and json.loads(out)["regressed"] == ["exposed_comm"]
    # a noise floor above the change passes it (exposed comm at its default 5 % budget)
    others = ["--max-step-time-increase", "50%", "--max-overlap-decrease", "90%"]
    code, out = check(current, baseline, *others, "-f", "json")
    assert code == EXIT_REGRESSION and "exposed_comm" in json.loads(out)["regressed"]
    code, out = check(current, baseline, *others, "--noise-floor", "exposed_comm=100ms")
    assert code == EXIT_OK, out
    # [check] in tracecomm.toml of the run folder
    (tmp_path / "tracecomm.toml").write_text(
        '[check]\nmax_exposed_comm_increase = "200%"\nmax_step_time_increase = 0.5\n'
        'max_overlap_decrease = "90%"\n'
    )
    doc = json.loads(CliRunner().invoke(app, ["analyze", str(current), "-f", "json"]).stdout)
    (tmp_path / "current.json").write_text(json.dumps(doc))
    code, _ = check(tmp_path / "current.json", baseline)
    assert code == EXIT_OK


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--max-exposed-comm-increase", "lots"], "cannot read 'lots'"),
        (["--noise-floor", "bogus=1ms"], "unknown figure 'bogus'"),
        (["--noise-floor", "exposed_comm"], "FIGURE=VALUE"),
    ],
)
def test_bad_budgets_are_usage_errors(
    runs: Path, baseline: Path, args: list[str], message: str
) -> None:
    code, out = check(run_path(runs), baseline, *args)
    assert code == EXIT_USAGE and message in out and "Traceback" not in out


def test_bad_baselines_are_input_errors(runs: Path, tmp_path: Path, baseline: Path) -> None:
    newer = json.loads(baseline.read_text()) | {"schema_version": 99}
    (tmp_path / "newer.json").write_text(json.dumps(newer))
    code, out = check(run_path(runs), tmp_path / "newer.json")
    assert code == EXIT_USAGE and "newer than this tracecomm reads" in out
    older = json.loads(baseline.read_text()) | {"schema_version": 0}
    (tmp_path / "older.json").write_text(json.dumps(older))
    code, out = check(run_path(runs), tmp_path / "older.json")
    assert code == EXIT_USAGE and "write it again with `tracecomm baseline`" in out
    (tmp_path / "other.json").write_text('{"hello": 1}')
    code, out = check(run_path(runs), tmp_path / "other.json")
    assert code == EXIT_USAGE and "other.json: not an analyze JSON document" in out
    code, out = check(run_path(runs), tmp_path / "missing")
    assert code == EXIT_USAGE and "no such file" in out


def test_different_ranks_and_steps_compare_what_they_share(
    runs: Path, tmp_path: Path, baseline: Path
) -> None:
    base = run_path(runs)
    smaller = tmp_path / "ranks-0-5"
    smaller.mkdir()
    for f in sorted(base.iterdir())[:6]:
        (smaller / f.name).write_bytes(f.read_bytes())
    code, out = check(smaller, baseline, "--steps", "13:14", "-f", "json")
    doc = json.loads(out)
    assert code == EXIT_OK and doc["shared_ranks"] == [0, 1, 2, 3, 4, 5]
    notes = " ".join(doc["notes"])
    assert "ranks only in the baseline (left out): 6–7" in notes
    assert "steps differ (baseline 12–15, current 13–14)" in notes
    # no rank in common is an input error
    lone = tmp_path / "lone.json"
    only = json.loads(CliRunner().invoke(app, ["analyze", str(base), "-f", "json"]).stdout)
    only["ranks"] = [r | {"rank": 100 + r["rank"]} for r in only["ranks"]]
    lone.write_text(json.dumps(only))
    code, out = check(base, lone)
    assert code == EXIT_USAGE and "share no rank" in out


def test_json_validates(runs: Path, baseline: Path) -> None:
    _, out = check(run_path(runs, rs=0.10), baseline, "--format", "json")
    jsonschema.validate(json.loads(out), _schema("check"))


def test_junit_parses(runs: Path, baseline: Path) -> None:
    code, out = check(run_path(runs, rs=0.10), baseline, "--format", "junit")
    assert code == EXIT_REGRESSION
    suite = ET.fromstring(out).find("testsuite")
    assert suite is not None
    cases = {c.get("name"): c for c in suite.iter("testcase")}
    assert cases["exposed_comm.ReduceScatter"].find("failure") is not None
    assert cases["idle"].find("failure") is None
    assert cases["mfu"].find("skipped") is not None  # no FLOPs given: not comparable
    assert int(suite.get("failures", "0")) == sum(
        c.find("failure") is not None for c in cases.values()
    )


WORKFLOW_COMMAND = r"^::(error|warning|notice)( [a-z]+=[^:,\r\n]*(,[a-z]+=[^:,\r\n]*)*)?::[^\r\n]*$"


def test_github_annotations_and_summary(
    runs: Path, baseline: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import re

    summary = tmp_path / "summary.md"
    summary.write_text("earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    code, out = check(run_path(runs, rs=0.10), baseline, "--format", "github")
    assert code == EXIT_REGRESSION
    lines = [line for line in out.splitlines() if line.startswith("::")]
    assert lines and all(re.match(WORKFLOW_COMMAND, line) for line in lines)
    assert any(
        line.startswith("::error title=tracecomm check%3A exposed_comm.ReduceScatter::")
        for line in lines
    )
    assert all(
        "%" not in line.split("::")[2].replace("%25", "").replace("%3A", "") for line in lines
    )
    text = summary.read_text()
    assert text.startswith("earlier step\n### ❌ tracecomm check")  # appended, not replaced
    assert "| `exposed_comm.ReduceScatter` |" in text


def test_markdown(runs: Path, baseline: Path) -> None:
    code, out = check(run_path(runs), baseline, "--format", "markdown")
    assert code == EXIT_OK and out.startswith("### ✅ tracecomm check passed")
    assert "| figure | baseline | current | Δ | budget | verdict |" in out


def test_the_gates_step_time_is_the_one_analyze_prints(runs: Path, baseline: Path) -> None:
    """One name, one number (metrics.md §8): ``step_time`` is the run's step time, exactly as
    analyze prints it; each rank's median step window is gated as ``step_window``."""
    current = run_path(runs, rs=0.10)
    _, out = check(current, baseline, "--format", "json")
    analyzed = CliRunner().invoke(app, ["analyze", str(current), "-f", "json"])
    step_ns = json.loads(analyzed.stdout)["throughput"]["step_time_ns"]
    base_doc = json.loads(baseline.read_text())
    got = figures(out)
    assert got["step_time"]["current"] == step_ns
    assert got["step_time"]["baseline"] == base_doc["step_time_ns"]
    windows = [r["step_window_ns"] for r in base_doc["ranks"]]
    assert got["step_window"]["baseline"] == statistics.median(windows)


def test_a_version_1_baseline_gates_the_windows_and_says_why_not_the_step(
    runs: Path, baseline: Path, tmp_path: Path
) -> None:
    """A baseline written before the step time was one number named each rank's median step
    window ``step_time_ns``: it is read as the windows it holds, not as a step time."""
    doc = json.loads(baseline.read_text())
    old = {k: v for k, v in doc.items() if k != "step_time_ns"} | {"schema_version": 1}
    old["ranks"] = [
        {("step_time_ns" if k == "step_window_ns" else k): v for k, v in r.items()}
        for r in doc["ranks"]
    ]
    path = tmp_path / "v1.json"
    path.write_text(json.dumps(old))
    code, out = check(run_path(runs), path, "--format", "json")
    result = json.loads(out)
    got = {f["figure"]: f for f in result["figures"]}
    assert code == EXIT_OK
    assert got["step_time"]["verdict"] == "not comparable" and got["step_time"]["baseline"] is None
    assert got["step_window"]["verdict"] == "pass"
    assert any("version 1 baseline holds no step time" in n for n in result["notes"])


def test_a_baseline_rank_field_it_does_not_know_is_refused(
    runs: Path, baseline: Path, tmp_path: Path
) -> None:
    """A format-2 baseline with a format-1 field name (or a typo) is not read as a baseline
    missing that figure."""
    doc = json.loads(baseline.read_text())
    doc["ranks"][0]["step_time_ns"] = doc["ranks"][0].pop("step_window_ns")
    path = tmp_path / "stale.json"
    path.write_text(json.dumps(doc))
    code, out = check(run_path(runs), path)
    assert code == EXIT_USAGE and "unknown rank field 'step_time_ns'" in out


def test_a_gate_across_world_sizes_says_so(runs: Path, tmp_path: Path, baseline: Path) -> None:
    # a 16-rank run against the 8-rank baseline: gated on the ranks both have, with a warning
    bigger = tmp_path / "sixteen"
    write_run(fsdp_run(world_size=16, steps=4, seed=0, jitter=0.0), bigger)
    code, out = check(bigger, baseline, "-f", "json")
    assert code in (EXIT_OK, EXIT_REGRESSION)  # the gate still runs
    notes = json.loads(out)["notes"]
    assert notes[0].startswith("the runs differ in world size (baseline 8 ranks, current run 16)")
    text = check(bigger, baseline)[1]
    assert "the runs differ in world size" in " ".join(text.split())
    assert "differ in world size" not in " ".join(check(run_path(runs), baseline)[1].split())


def test_a_gate_across_models_says_so(runs: Path, tmp_path: Path) -> None:
    """The same traces given other model FLOPs: the gate compares them, and says the runs
    differ in model (their FLOPs per token), from a baseline file as from the run."""
    base = tmp_path / "base.json"
    model = ["--model-flops-per-step", "1.2e15", "--tokens-per-step", "1000000"]
    other = ["--model-flops-per-step", "2.4e15", "--tokens-per-step", "1000000"]
    made = CliRunner().invoke(app, ["baseline", str(run_path(runs)), "-o", str(base), *model])
    assert made.exit_code == EXIT_OK, made.stderr
    assert json.loads(base.read_text())["flops_per_token"] == 1_200_000_000
    jsonschema.validate(json.loads(base.read_text()), _schema("baseline"))
    _, out = check(run_path(runs), base, "-f", "json", *other)
    assert json.loads(out)["notes"][0].startswith(
        "the runs differ in model (FLOPs per token: baseline 1.2e+09, current run 2.4e+09)"
    )
    _, same = check(run_path(runs), base, "-f", "json", *model)
    assert not any("differ in model" in n for n in json.loads(same)["notes"])
