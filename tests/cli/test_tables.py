"""``analyze -f csv --table``: the Report's tables a user pipes (issue 34), each the same
figures as the JSON document, text made safe for a spreadsheet."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.conftest import SAMPLE_RUN, analyze_json, simple_events, trace_doc, write_trace
from tracecomm.cli import EXIT_USAGE, app
from tracecomm.render.tables import CSV_TABLES


def table(run: Path, name: str) -> list[dict[str, str]]:
    result = CliRunner().invoke(app, ["analyze", str(run), "-f", "csv", "--table", name])
    assert result.exit_code == 0, result.stderr
    return list(csv.DictReader(io.StringIO(result.stdout)))


@pytest.fixture(scope="module")
def doc() -> dict:
    return analyze_json(SAMPLE_RUN)


def test_every_table_has_the_documents_rows(doc: dict) -> None:
    steps = table(SAMPLE_RUN, "steps")
    assert len(steps) == sum(len(r["steps"]) for r in doc["ranks"])
    for row in steps:
        rank = next(r for r in doc["ranks"] if r["rank"] == int(row["rank"]))
        step = next(s for s in rank["steps"] if s["step"] == int(row["step"]))
        if step["window"] is not None:
            assert int(row["exposed_comm_ns"]) == step["window"]["figures"]["exposed_comm_ns"]
    types = {r["coll_type"]: r for r in table(SAMPLE_RUN, "types")}
    assert {t: int(r["exposed_comm_ns"]) for t, r in types.items()} == {
        t["coll_type"]: t["exposed_comm_ns"] for t in doc["by_type"]
    }
    stragglers = table(SAMPLE_RUN, "stragglers")
    assert [int(r["rank"]) for r in stragglers] == [r["rank"] for r in doc["stragglers"]["ranks"]]
    assert stragglers[0]["rank"] == "3"
    instances = table(SAMPLE_RUN, "instances")
    # each matched instance once per member rank (the sample's groups hold all 8 ranks)
    assert len(instances) == 8 * doc["cross_rank"]["matched"] > 0
    assert {r["rank"] for r in instances} == {str(r) for r in range(8)}
    kernels = table(SAMPLE_RUN, "kernels")
    top = [k for g in doc["kernels"]["groups"] for k in g["top"]]
    assert [(k["name"], int(k["total_ns"])) for k in kernels] == [
        (k["name"], k["total_ns"]) for k in top
    ]
    assert set(CSV_TABLES) == {"ranks", "steps", "types", "stragglers", "instances", "kernels"}


def test_trace_text_is_never_a_formula(tmp_path: Path) -> None:
    events = simple_events()
    for e in events:
        if e["name"] == "sm90_gemm":
            e["name"] = '=HYPERLINK("http://x")'
    write_trace(tmp_path / "rank0.json", trace_doc(events, world=1))
    names = [r["name"] for r in table(tmp_path, "kernels")]
    assert '\'=HYPERLINK("http://x")' in names and not any(n.startswith("=") for n in names)


def test_a_table_needs_csv() -> None:
    result = CliRunner().invoke(app, ["analyze", str(SAMPLE_RUN), "--table", "steps"])
    assert result.exit_code == EXIT_USAGE and "-f csv" in result.stderr
    assert json.loads(CliRunner().invoke(app, ["analyze", str(SAMPLE_RUN), "-f", "json"]).stdout)


@pytest.mark.parametrize("name", ["ranks", "steps", "instances"])
def test_parquet_holds_the_same_table_typed(tmp_path: Path, name: str) -> None:
    import polars as pl

    out = tmp_path / f"{name}.parquet"
    args = ["analyze", str(SAMPLE_RUN), "--table", name, "--parquet", str(out)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0 and result.stdout == "", result.stderr
    frame = pl.read_parquet(out)
    if name != "ranks":  # the CSV of ranks has its own, older layout
        assert frame.height == len(table(SAMPLE_RUN, name))
    assert frame.schema["rank"] == pl.Int64
    if name == "steps":
        assert frame.schema["exposed_comm_ns"] == pl.Int64
    assert frame["rank"].n_unique() == 8
    bad = CliRunner().invoke(app, [*args, "-f", "json"])
    assert bad.exit_code == EXIT_USAGE and "--parquet" in bad.stderr
