"""All-to-all and expert parallelism (metrics.md §1, §1a, §7a) against the generator's
schedule: types, exposed and hidden all-to-all time, token imbalance, and what balancing gives
back; and on the real DeepSeek-V3 chunk."""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tests.analysis.possible import impossible
from tests.conftest import analyze_json
from tracecomm.cli.app import app
from tracecomm.synth import write_run
from tracecomm.synth.dlrm import dlrm_run
from tracecomm.synth.expected import expected_alltoall_ns, expected_run, expected_tokens
from tracecomm.synth.moe import moe_run
from tracecomm.synth.schedule import RunSpec

RUNS: dict[str, Callable[[], RunSpec]] = {
    "moe-nccl-annotated": lambda: moe_run(ranks=4, steps=3, layers=2, seed=1),
    "moe-nccl-overlap": lambda: moe_run(ranks=4, steps=3, layers=2, seed=2, overlap=True),
    "moe-deepep-overlap": lambda: moe_run(
        ranks=4, steps=3, layers=2, seed=3, overlap=True, comm="deepep"
    ),
    "moe-imbalanced": lambda: moe_run(
        ranks=8, steps=3, layers=2, seed=4, metadata=True, imbalance=2.0, hot_rank=5
    ),
    "dlrm": lambda: dlrm_run(ranks=4, steps=3, seed=5),
    "dlrm-imbalanced": lambda: dlrm_run(ranks=4, steps=3, seed=6, metadata=True, imbalance=1.5),
}
_DOCS: dict[str, tuple[RunSpec, dict[str, Any]]] = {}


def _run(name: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[RunSpec, dict[str, Any]]:
    if name not in _DOCS:
        spec = RUNS[name]()
        folder = tmp_path_factory.mktemp(name)
        write_run(spec, folder)
        _DOCS[name] = (spec, analyze_json(folder))
    return _DOCS[name]


@pytest.mark.parametrize("name", list(RUNS))
def test_all_to_all_time_exposed_and_hidden_are_the_schedules(
    name: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    spec, doc = _run(name, tmp_path_factory)
    truth = expected_run(spec)
    view = doc["all_to_all"]
    assert view is not None
    for row in view["ranks"]:
        comm, exposed = truth[row["rank"]].total.by_type["AllToAll"]
        assert (row["comm_ns"], row["exposed_ns"]) == (comm, exposed)
        assert row["hidden_pct"] == pytest.approx(100 * (comm - exposed) / comm, abs=1e-9)
    # every AllToAll kernel is typed so: the annotated SendRecv ones and DeepEP's too
    by_type = {t["coll_type"]: t for t in doc["by_type"]}
    assert "SendRecv" not in by_type
    assert by_type["AllToAll"]["ranks"] == len(expected_alltoall_ns(spec))
    assert list(impossible(doc)) == []


def test_overlap_hides_the_dispatch_and_combine(tmp_path_factory: pytest.TempPathFactory) -> None:
    _, serial = _run("moe-nccl-annotated", tmp_path_factory)
    _, overlapped = _run("moe-nccl-overlap", tmp_path_factory)
    assert serial["all_to_all"]["hidden_pct"] == 0.0
    assert overlapped["all_to_all"]["hidden_pct"] > 50.0


@pytest.mark.parametrize("name", ["moe-deepep-overlap", "moe-imbalanced"])
def test_what_the_all_to_all_is_for_and_who_carried_it(
    name: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    _, doc = _run(name, tmp_path_factory)
    view = doc["all_to_all"]
    assert view["use"] == "expert"
    assert view["libraries"] == (["DeepEP"] if "deepep" in name else ["NCCL"])
    advice = [a for f in doc["findings"] if f["coll_type"] == "AllToAll" for a in f["advice"]]
    assert advice and all("DLRM" not in a for a in advice)


@pytest.mark.parametrize("name", ["dlrm", "dlrm-imbalanced"])
def test_a_dlrm_step_reads_as_an_embedding_exchange(
    name: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    _, doc = _run(name, tmp_path_factory)
    assert doc["all_to_all"]["use"] == "embedding"
    assert {t["coll_type"] for t in doc["by_type"]} == {"AllToAll", "AllReduce"}
    _no_pipeline_reading(doc)
    text = " ".join(a for f in doc["findings"] for a in (f["title"], *f["advice"]))
    assert "MoE" not in text


def _no_pipeline_reading(doc: dict[str, Any]) -> None:
    """No finding reads the all-to-all as pipeline traffic (the SendRecv advice's words)."""
    assert doc["pipelines"] == []
    assert not {f["kind"] for f in doc["findings"]} & {"pipeline_bubble", "stage_imbalance"}
    text = " ".join(a for f in doc["findings"] for a in (f["title"], *f["advice"]))
    assert "SendRecv" not in text and "virtual stages" not in text and "pipeline:" not in text


@pytest.mark.parametrize("name", ["moe-imbalanced", "dlrm-imbalanced"])
def test_token_imbalance_is_the_schedules(
    name: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    spec, doc = _run(name, tmp_path_factory)
    included = set(doc["summary"]["steps"])
    received: dict[int, int] = {}
    worst = 1.0
    instances = 0
    for inst in expected_tokens(spec):
        if inst.step not in included:
            continue
        instances += 1
        worst = max(worst, inst.ratio)
        for rank, rows in inst.received.items():
            received[rank] = received.get(rank, 0) + rows
    median = statistics.median(received.values())
    busiest = max(sorted(received), key=lambda r: received[r])
    imb = doc["all_to_all"]["imbalance"]
    assert imb["unit"] == "tokens"
    assert (imb["instances"], imb["busiest_rank"]) == (instances, busiest)
    assert imb["busiest_received"] == received[busiest]
    assert imb["median_received"] == median
    assert imb["ratio"] == pytest.approx(received[busiest] / median, rel=1e-12)
    assert imb["worst_instance_ratio"] == pytest.approx(worst, rel=1e-12)
    assert imb["imbalanced"]
    per_rank = {r["rank"]: r["received"] for r in doc["all_to_all"]["ranks"]}
    assert per_rank == received


def test_balancing_gives_back_what_the_straggler_finding_says(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """One figure: the hot rank's replay gain, in the all_to_all section and the finding."""
    _, doc = _run("moe-imbalanced", tmp_path_factory)
    imb = doc["all_to_all"]["imbalance"]
    (finding,) = [f for f in doc["findings"] if f["kind"] == "straggler"]
    assert finding["ranks"] == [5] and "token imbalance" in finding["title"]
    assert (imb["gain_ns"], imb["gain_pct"]) == (finding["cost_ns"], finding["recoverable_pct"])
    assert imb["gain_pct"] > 5.0
    assert any("load-balancing" in a or "load balancing" in a for a in finding["advice"])


def test_wait_and_transfer_split_each_matched_kernel(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """The hot rank's peers wait for it at the all-to-alls: their wait is large, its own not;
    each rank's matched kernel time is its wait plus its transfer (metrics.md §7a)."""
    _, doc = _run("moe-imbalanced", tmp_path_factory)
    rows = {r["rank"]: r for r in doc["all_to_all"]["ranks"]}
    for r in rows.values():
        assert r["wait_ns"] + r["transfer_ns"] == r["matched_ns"]
        # one stream: the kernels' union is their sum, of which the matched ones are a part
        assert 0 < r["matched_ns"] <= r["comm_ns"]
    others = [rows[r]["wait_ns"] for r in rows if r != 5]
    assert min(others) > 20 * rows[5]["wait_ns"]


def test_deepseek_ep64_deepep_kernels_are_all_to_all_mostly_hidden(shared_traces: Path) -> None:
    doc = analyze_json(shared_traces / "deepseek-train-ep64")
    view = doc["all_to_all"]
    assert (view["use"], view["libraries"], view["kernels"]) == ("expert", ["DeepEP"], 36)
    assert (view["comm_ns"], view["exposed_ns"]) == (113_440_000, 4_190_000)
    assert view["hidden_pct"] == pytest.approx(96.306, abs=1e-3)
    assert view["wait_ns"] is None and "one rank" in view["wait_reason"]
    _no_pipeline_reading(doc)
    text = " ".join(a for f in doc["findings"] for a in (f["title"], *f["evidence"], *f["advice"]))
    assert "96.3 % of the all-to-all time (DeepEP kernels) hides behind compute" in text
    assert any("stream 27, which carries communication" in n["text"] for n in doc["notes"])


def test_the_gate_names_an_all_to_all_regression(tmp_path: Path) -> None:
    """AllToAll is a collective type everywhere: the CI gate's per-type budgets too."""
    base, worse = tmp_path / "overlapped", tmp_path / "serial"
    write_run(moe_run(ranks=4, steps=3, layers=2, seed=2, overlap=True), base)
    write_run(moe_run(ranks=4, steps=3, layers=2, seed=2), worse)
    result = CliRunner().invoke(app, ["check", str(worse), "-b", str(base), "-f", "json"])
    assert result.exit_code == 1, result.stderr
    verdicts = json.loads(result.stdout)
    assert "exposed_comm.AllToAll" in verdicts["regressed"]
    (row,) = [f for f in verdicts["figures"] if f["figure"] == "exposed_comm.AllToAll"]
    assert row["verdict"] == "regressed" and row["current"] > row["baseline"]
