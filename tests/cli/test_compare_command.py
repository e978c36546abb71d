"""``tracecomm compare`` end to end (metrics.md §18): run folders, summaries and saved analyze
JSON as inputs; every JSON output valid against compare.schema.json; malformed saved reports
refused in one line (exit 2); text from inputs made safe in every format."""

from __future__ import annotations

import csv
import gzip
import io
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from typer.testing import CliRunner

import tracecomm
from tests.conftest import REPO
from tracecomm.cli import EXIT_OK, EXIT_PARTIAL, EXIT_USAGE, app
from tracecomm.errors import UsageError
from tracecomm.synth.fsdp import fsdp_run
from tracecomm.synth.series import before_after, scaling_series
from tracecomm.synth.writer import write_run

runner = CliRunner()
SCHEMA = json.loads((REPO / "tracecomm/schema/compare.schema.json").read_text())
REPORT_SCHEMA = json.loads((REPO / "tracecomm/schema/report.schema.json").read_text())
MODEL = ["--flops-per-token", "8e8", "--tokens-per-step", "1000000"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """n4 and n8 as trace folders, n16 as summaries, n8 also as a saved analyze JSON."""
    out = tmp_path_factory.mktemp("runs")
    for n, spec in scaling_series((4, 8, 16), base_world=16, steps=3).items():
        write_run(spec, out / f"n{n}")
    ingest = runner.invoke(app, ["ingest", str(out / "n16"), "-o", str(out / "s16"), "-q"])
    assert ingest.exit_code == 0, ingest.stderr
    saved = runner.invoke(app, ["analyze", str(out / "n8"), "-f", "json", *MODEL])
    doc = json.loads(saved.stdout)
    jsonschema.validate(doc, REPORT_SCHEMA)
    (out / "n8.json").write_text(saved.stdout)
    before, after = before_after(8, "AllGather", 2.0, base_world=16)
    write_run(before, out / "before")
    write_run(after, out / "after")
    return {
        "n4": out / "n4",
        "n8": out / "n8",
        "n16": out / "n16",
        "s16": out / "s16",
        "n8.json": out / "n8.json",
        "before": out / "before",
        "after": out / "after",
        "root": out,
    }


def compared(*args: str | Path) -> dict[str, Any]:
    result = runner.invoke(app, ["compare", *map(str, args), "-f", "json", "-q"])
    assert result.exit_code == EXIT_OK, result.stderr
    doc: dict[str, Any] = json.loads(result.stdout)
    jsonschema.validate(doc, SCHEMA)
    return doc


def adds_up(doc: dict[str, Any]) -> None:
    for pair in doc["pairs"]:
        d = pair["decomposition"]
        parts = ("compute", "exposed_comm", "exposed_memory", "idle")
        assert d["delta_step_ns"] == sum(d[f"delta_{p}_ns"] for p in parts)
        by_type = sum(d["delta_exposed_comm_by_type_ns"].values()) - d["delta_types_overlap_ns"]
        assert d["delta_exposed_comm_ns"] == by_type
    for run in doc["runs"]:
        t = run["typical_step"]
        parts = ("compute", "exposed_comm", "exposed_memory", "idle")
        assert t["window_ns"] == sum(t[f"{p}_ns"] for p in parts)


def test_folders_and_summaries_side_by_side(runs: dict[str, Path]) -> None:
    doc = compared(runs["s16"], runs["n8"], runs["n4"], *MODEL)
    assert [r["world_size"] for r in doc["runs"]] == [4, 8, 16]
    assert [r["source"] for r in doc["runs"]] == ["traces", "traces", "summaries"]
    assert doc["runs"][0]["scaling_efficiency"] == 1.0
    per_gpu = [r["tokens_per_s_per_gpu"] for r in doc["runs"]]
    assert per_gpu == sorted(per_gpu, reverse=True)
    adds_up(doc)
    assert [p["collectives"]["level"] for p in doc["pairs"]] == ["instance", "instance"]
    # the first run (traces) projected to 8 and 16 and checked against them
    assert [row["world_size"] for row in doc["projection"]["rows"]] == [8, 16]
    assert doc["projection"]["rows"][0]["run"] == 1
    assert doc["runs"][2]["changes"]["step_time_ns"]["relative"] < 0


def test_a_saved_report_is_compared_like_its_run(runs: dict[str, Path]) -> None:
    doc = compared(runs["n8.json"], runs["n4"], *MODEL)
    assert [r["source"] for r in doc["runs"]] == ["traces", "traces"]
    assert doc["pairs"][0]["collectives"]["level"] == "instance"
    adds_up(doc)
    # the same run from its folder and from its saved report: the same figures
    live = compared(runs["n8"], runs["n4"], *MODEL)
    for key in ("step_time_ns", "typical_step", "mfu", "tokens_per_s", "scaling_efficiency"):
        assert live["runs"][1][key] == doc["runs"][1][key], key
    assert live["pairs"][0]["decomposition"] == doc["pairs"][0]["decomposition"]
    assert live["pairs"][0]["collectives"] == doc["pairs"][0]["collectives"]
    assert live["pairs"][0]["kernels"] == doc["pairs"][0]["kernels"]
    assert doc["pairs"][0]["kernels"]["changes"]  # the kernels of 4 and 8 ranks differ


def test_a_report_saved_before_collective_steps_is_compared_by_type(
    runs: dict[str, Path], tmp_path: Path
) -> None:
    older = json.loads(runs["n8.json"].read_text())
    del older["collective_steps"]
    (tmp_path / "n8.json").write_text(json.dumps(older))
    doc = compared(tmp_path / "n8.json", runs["n4"], *MODEL)
    assert doc["pairs"][0]["collectives"]["level"] == "type"
    assert {r["group"] for r in doc["pairs"][0]["collectives"]["rows"]} == {"all groups"}
    assert any("written before collective_steps" in n for n in doc["notes"])
    adds_up(doc)


def test_summaries_first_are_projected_as_their_traces(runs: dict[str, Path]) -> None:
    """Summaries keep each rank's typical step as the projection replays it (issue 44): given
    first, they project to the others' sizes exactly as their trace folder does."""
    doc = compared(runs["s16"], runs["n4"], "--keep-order")
    assert [r["world_size"] for r in doc["runs"]] == [16, 4]
    assert doc["order"] == "as given"
    assert [r["world_size"] for r in doc["projection"]["rows"]] == [4]
    of_traces = compared(runs["n16"], runs["n4"], "--keep-order")
    assert doc["projection"] == of_traces["projection"]


def test_a_run_compared_with_itself(runs: dict[str, Path]) -> None:
    doc = compared(runs["n4"], runs["n4"])
    assert [r["label"] for r in doc["runs"]] == ["n4", "n4 #2"]  # the folder's own name
    (pair,) = doc["pairs"]
    assert pair["delta_step_time_ns"] == 0 and pair["decomposition"]["delta_step_ns"] == 0
    assert all(c["delta"] == 0 for c in doc["runs"][1]["changes"].values())
    assert all(r["delta_time_per_step_ns"] == 0 for r in pair["collectives"]["rows"])
    assert pair["kernels"] == {
        "changes": [],
        "missing": None,
        "step_change_ns": 0.0,
        "delta_not_kernels_ns": 0.0,
        "note": None,
    }
    assert all(r["status"] == "same" for r in pair["collectives"]["rows"])
    assert doc["notes"] == []
    assert "every run has its world size" in doc["projection"]["missing"]


def test_before_and_after_in_every_format(runs: dict[str, Path], tmp_path: Path) -> None:
    doc = compared(runs["before"], runs["after"])
    assert doc["pairs"][0]["collectives"]["rows"][0]["coll_type"] == "AllGather"
    term = runner.invoke(app, ["compare", str(runs["before"]), str(runs["after"])])
    assert term.exit_code == EXIT_OK, term.stderr
    text = term.stdout
    assert "Where the time went" in text and "Largest changes by collective" in text
    assert "Δ typical step" in text and "Largest changes by kernel: after − before" in text
    (top, *_) = doc["pairs"][0]["kernels"]["changes"]
    assert top["class"] == "AllGather" and top["status"] == "changed"
    assert top["name"].startswith("ncclDevKernel_AllGather") and top["name"] in text
    table = runner.invoke(
        app, ["compare", str(runs["before"]), str(runs["after"]), "--table", "kernel-changes"]
    )
    assert table.exit_code == EXIT_OK, table.stderr
    rows = list(csv.DictReader(io.StringIO(table.stdout)))
    assert len(rows) == len(doc["pairs"][0]["kernels"]["changes"])
    assert rows[0]["name"] == top["name"] and rows[0]["class"] == "AllGather"
    assert float(rows[0]["delta_ns"]) == top["delta_ns"]
    refused = runner.invoke(
        app, ["compare", str(runs["before"]), str(runs["after"]), "-f", "json", "--table",
              "kernel-changes"]
    )  # fmt: skip
    assert refused.exit_code == 2
    md = runner.invoke(
        app, ["compare", str(runs["before"]), str(runs["after"]), "-f", "markdown"]
    ).stdout
    assert md.startswith("### tracecomm compare: 2 runs")
    assert "| Δ typical step |" in md and "| ↳ ↳ AllGather |" in md
    assert "#### Largest changes by kernel: after − before" in md
    page = tmp_path / "compare.html"
    written = runner.invoke(
        app, ["compare", str(runs["before"]), str(runs["after"]), "-f", "html", "-o", str(page)]
    )
    assert written.exit_code == EXIT_OK and written.stdout == ""
    html = page.read_text()
    assert "Content-Security-Policy" in html and 'id="tracecomm-data"' in html
    start = html.index('id="tracecomm-data">') + len('id="tracecomm-data">')
    embedded = json.loads(html[start : html.index("</script>", start)])
    jsonschema.validate(embedded, SCHEMA)


def test_a_kernel_built_for_another_dtype_is_one_marked_change(tmp_path: Path) -> None:
    """Three runs, each diffed against the first: a kernel inserted in the middle of the step
    (``new``), then the same kernel for another dtype (paired by family, marked), in JSON
    valid against the schema, the terminal, Markdown and the CSV."""
    float_k, half_k = "void scale<float>(float*)", "void scale<c10::Half>(c10::Half*)"
    for name, extra in (("a", None), ("b", (float_k, 150.0, "middle"))):
        write_run(fsdp_run(8, steps=3, extra_kernel=extra), tmp_path / name)
    write_run(fsdp_run(8, steps=3, extra_kernel=(half_k, 90.0, "middle")), tmp_path / "c")
    folders = [tmp_path / n for n in ("b", "c", "a")]
    doc = compared(*folders, "--keep-order")
    first, second = (p["kernels"] for p in doc["pairs"])
    top = first["changes"][0]
    assert (top["name"], top["baseline_name"], top["paired_by"]) == (half_k, float_k, "family")
    assert (doc["pairs"][1]["kernels"]["changes"][0]["status"], second["changes"][0]["name"]) == (
        "gone",
        float_k,
    )
    for k in (first, second):
        exposed = sum(c["delta_exposed_ns"] for c in k["changes"])
        assert exposed + k["delta_not_kernels_ns"] == pytest.approx(k["step_change_ns"])
    shown = runner.invoke(app, ["compare", *map(str, folders), "--keep-order", "-q"]).stdout
    assert "changed †" in shown and "template arguments" in shown
    md = runner.invoke(app, ["compare", *map(str, folders), "--keep-order", "-f", "markdown"])
    assert "| changed † |" in md.stdout
    table = runner.invoke(
        app, ["compare", *map(str, folders), "--keep-order", "--table", "kernel-changes"]
    )
    rows = list(csv.DictReader(io.StringIO(table.stdout)))
    family = next(r for r in rows if r["paired_by"] == "family")
    assert (family["name"], family["baseline_name"]) == (half_k, float_k)
    assert float(family["delta_exposed_ns"]) == top["delta_exposed_ns"]


def test_the_python_api(runs: dict[str, Path]) -> None:
    result = tracecomm.compare([runs["n8"], runs["n4"]])
    assert [r.world_size for r in result.runs] == [4, 8]
    with pytest.raises(UsageError, match="two or more"):
        tracecomm.compare([runs["n4"]])
    with pytest.raises(UsageError, match="compare sets --to"):
        tracecomm.compare([runs["n4"], runs["n8"]], to="64")


def test_one_run_is_a_usage_error(runs: dict[str, Path]) -> None:
    result = runner.invoke(app, ["compare", str(runs["n4"])])
    assert result.exit_code == EXIT_USAGE
    assert result.stderr.strip() == (
        "tracecomm: error: compare needs two or more runs (run folders, summaries or analyze JSON)"
    )


def _saved(runs: dict[str, Path]) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(runs["n8.json"].read_text())
    return doc


def _break_figures(doc: dict[str, Any]) -> None:
    doc["ranks"][0]["steps"][1]["window"]["figures"]["compute_ns"] += 1


def _negative_mfu(doc: dict[str, Any]) -> None:
    doc["throughput"]["mfu"] = -0.5


def _string_time(doc: dict[str, Any]) -> None:
    doc["ranks"][0]["steps"][1]["window"]["figures"]["window_ns"] = "12"


def _newer(doc: dict[str, Any]) -> None:
    doc["schema_version"] = 4


def _other_tool(doc: dict[str, Any]) -> None:
    doc["tool"]["name"] = "hta"


def _no_ranks(doc: dict[str, Any]) -> None:
    del doc["ranks"]


def _bad_causes(doc: dict[str, Any]) -> None:
    doc["ranks"][0]["steps"][1]["window"]["idle_by_cause"]["other"] = -3


def _bool_rank(doc: dict[str, Any]) -> None:
    doc["ranks"][0]["rank"] = True


def _share(doc: dict[str, Any]) -> None:
    doc["stragglers"]["recoverable_pct"] = 250.0


def _short_kernel_row(doc: dict[str, Any]) -> None:
    doc["kernel_steps"]["kernels"][0]["time_ns"].pop()


def _negative_kernel_time(doc: dict[str, Any]) -> None:
    doc["kernel_steps"]["kernels"][0]["time_ns"][0] = -1


def _exposed_past_its_time(doc: dict[str, Any]) -> None:
    row = doc["kernel_steps"]["kernels"][0]
    row["exposed_ns"][0] = row["time_ns"][0] + 1


@pytest.mark.parametrize(
    ("damage", "says"),
    [
        (_break_figures, "do not add up"),
        (_short_kernel_row, "does not have one figure per step"),
        (_negative_kernel_time, "at `$.kernel_steps.kernels[0].time_ns[0]`"),
        (_exposed_past_its_time, "is exposed longer than it ran"),
        (_negative_mfu, "mfu -0.5"),
        (_string_time, "not an analyze JSON document"),
        (_newer, "schema version 4"),
        (_other_tool, "not a tracecomm document"),
        (_no_ranks, "not an analyze JSON document"),
        (_bad_causes, "at `$.ranks[0].steps[1].window.idle_by_cause[...]`"),
        (_bool_rank, "not an analyze JSON document"),
        (_share, "<= 100.0 - at `$.stragglers.recoverable_pct`"),
    ],
)
def test_a_malformed_saved_report_is_one_line_and_exit_2(
    runs: dict[str, Path], tmp_path: Path, damage: Any, says: str
) -> None:
    doc = _saved(runs)
    damage(doc)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    result = runner.invoke(app, ["compare", str(runs["n4"]), str(bad)])
    assert result.exit_code == EXIT_USAGE, result.stdout
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"tracecomm: error: {bad}: ")
    assert says in lines[0]
    assert "Traceback" not in result.stderr and result.stdout == ""


def test_truncated_and_baseline_files_are_refused(runs: dict[str, Path], tmp_path: Path) -> None:
    cut = tmp_path / "cut.json"
    cut.write_text(runs["n8.json"].read_text()[:5000])
    result = runner.invoke(app, ["compare", str(runs["n4"]), str(cut)])
    assert result.exit_code == EXIT_USAGE and "not an analyze JSON document" in result.stderr
    base = tmp_path / "base.json"
    assert runner.invoke(app, ["baseline", str(runs["n4"]), "-o", str(base), "-q"]).exit_code == 0
    result = runner.invoke(app, ["compare", str(runs["n4"]), str(base)])
    assert result.exit_code == EXIT_USAGE
    assert result.stderr.strip() == (
        f"tracecomm: error: {base}: a tracecomm-baseline document holds no per-step figures: "
        "give the run folder, its summaries or its `analyze --format json` document"
    )


def test_a_partial_run_exits_4(runs: dict[str, Path], tmp_path: Path) -> None:
    damaged = tmp_path / "damaged"
    damaged.mkdir()
    for path in sorted(runs["n4"].iterdir()):
        (damaged / path.name).write_bytes(path.read_bytes())
    victim = sorted(damaged.iterdir())[-1]
    victim.write_bytes(gzip.compress(b'{"traceEvents": [{"ph": "X", "name": '))
    result = runner.invoke(app, ["compare", str(runs["n4"]), str(damaged), "-f", "json"])
    assert result.exit_code == EXIT_PARTIAL, result.stderr
    doc = json.loads(result.stdout)
    jsonschema.validate(doc, SCHEMA)
    assert doc["partial"] is True and "missing" in result.stderr


def test_labels_from_inputs_are_made_safe(runs: dict[str, Path], tmp_path: Path) -> None:
    odd = tmp_path / "run\x1b[2J|`*x"
    odd.mkdir()
    for path in runs["n4"].iterdir():
        (odd / path.name).write_bytes(path.read_bytes())
    term = runner.invoke(app, ["compare", str(runs["n4"]), str(odd)])
    assert term.exit_code == EXIT_OK and "\x1b" not in term.stdout
    assert "run\\x1b[2J|`*x" in term.stdout
    md = runner.invoke(app, ["compare", str(runs["n4"]), str(odd), "-f", "markdown"]).stdout
    assert "\x1b" not in md and "run\\\\x1b\\[2J\\|\\`\\*x" in md
    page = tmp_path / "odd.html"
    runner.invoke(app, ["compare", str(runs["n4"]), str(odd), "-f", "html", "-o", str(page)])
    assert "\x1b" not in page.read_text() and "<script>run" not in page.read_text()


def test_a_run_without_matched_instances_is_compared_by_type() -> None:
    doc = compared(REPO / "fixtures" / "sample-run", REPO / "fixtures" / "gloo-run")
    (pair,) = doc["pairs"]
    assert pair["collectives"]["level"] == "type"
    assert "gloo-run: no matched collective instances" in pair["collectives"]["note"]
    rows = {r["coll_type"]: r for r in pair["collectives"]["rows"]}
    assert rows["AllReduce"]["base"] is not None and rows["AllGather"]["base"] is None
    adds_up(doc)


def test_saved_reports_of_other_steps_and_another_model(runs: dict[str, Path]) -> None:
    fewer = runs["root"] / "n4-step14.json"
    other = runs["root"] / "n4-bigger.json"
    for target, extra in ((fewer, ["--steps", "14"]), (other, ["--flops-per-token", "4e9"])):
        saved = runner.invoke(
            app, ["analyze", str(runs["n4"]), "-f", "json", "--tokens-per-step", "1000000", *extra]
        )
        target.write_text(saved.stdout)
    doc = compared(runs["n4"], fewer, "--keep-order", *MODEL)
    assert doc["compared_steps"] == [14]
    assert [r["typical_step"]["step"] for r in doc["runs"]] == [14, 14]
    assert any("profiled different steps" in n for n in doc["notes"])
    assert doc["pairs"][0]["decomposition"]["delta_step_ns"] == 0  # the generator's steps agree
    doc = compared(runs["n8"], other, *MODEL)
    assert any("differ in model" in n for n in doc["notes"])
    assert doc["runs"][1]["scaling_efficiency"] is None
    assert doc["runs"][1]["scaling_efficiency_missing"] == "the runs differ in model"


def test_labels_drop_what_every_input_shares() -> None:
    from tracecomm.run.compare import _labels

    assert _labels(["/data/runs/exp-8/report.json", "/data/runs/exp-64/report.json"]) == [
        "exp-8",
        "exp-64",
    ]
    assert _labels(["runs/a/", "runs/b"]) == ["a", "b"]
    assert _labels(["/x/b/run8", "/x/c/run8"]) == ["b", "c"]
    assert _labels(["s3://bucket/r8/", "s3://bucket/r64/"]) == ["r8", "r64"]
    assert _labels(["run", "run"]) == ["run", "run #2"]


def test_changes_on_a_near_zero_base_are_differences(monkeypatch: pytest.MonkeyPatch) -> None:
    import tracecomm.analysis.compare as compare
    from tracecomm.render.compare import _change

    figures = {
        "first": {"idle.host_bound": 1_000.0, "step_time_ns": 10e6, "idle_ns": 0.0},
        "run": {"idle.host_bound": 2_028_577.0, "step_time_ns": 11e6, "idle_ns": 5e6},
    }
    monkeypatch.setattr(compare, "_flat", lambda r: figures[r])
    changes = compare._changes("first", "run")  # type: ignore[arg-type]
    # +202,757.7 % of a near-zero idle is a difference, not a percentage
    assert changes["idle.host_bound"] == compare.Change(2_027_577.0, None)
    assert changes["idle_ns"] == compare.Change(5e6, None)  # none at all in the first run
    assert changes["step_time_ns"].relative == pytest.approx(0.1)
    assert _change(changes["idle.host_bound"], None, "idle.host_bound") == "+2.028 ms"
    assert _change(changes["step_time_ns"], None, "step_time_ns") == "+10.0 %"
    assert _change(compare.Change(-5.0, None), None, "tokens_per_s") == "−5"
    assert _change(compare.Change(0.0, None), None, "idle_ns") == ""


def test_runs_of_different_frameworks_are_said_to_be(tmp_path: Path) -> None:
    from tests.conftest import simple_events, trace_doc, write_trace

    def run(name: str, annotation: str) -> Path:
        marker = {"ph": "X", "cat": "user_annotation", "name": annotation, "pid": 100,
                  "tid": 100, "ts": 990, "dur": 300}  # fmt: skip
        write_trace(tmp_path / name / "rank0.json", trace_doc([*simple_events(), marker], world=1))
        return tmp_path / name

    ddp, fsdp = run("ddp", "DistributedDataParallel.forward"), run("fsdp", "FSDP::pre_forward")
    doc = compared(ddp, fsdp)
    (note,) = [n for n in doc["notes"] if "different frameworks" in n]
    assert note.startswith("the runs were written by different frameworks (ddp: DDP; fsdp: FSDP2")
    again = compared(ddp, run("ddp2", "DistributedDataParallel.forward"))
    assert not any("different frameworks" in n for n in again["notes"])
