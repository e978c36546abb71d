"""The bottom line (metrics.md §14): on generated runs with one known problem each, the top
finding names it, where it is and what it costs, within 10 % of the generator's truth; a healthy
run has nothing above 2 % of the step.

The truth is the generator's: the schedule's own figures (expected.py) where the finding is one
of them, and otherwise what the problem adds to the step time, measured against the same run
without it (same seed, same shapes)."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from pathlib import Path

import pytest

import tracecomm
from tracecomm.analysis.findings import MIN_COST_PCT
from tracecomm.analysis.report import Report
from tracecomm.synth.__main__ import _parser, _spec
from tracecomm.synth.expected import expected_run
from tracecomm.synth.schedule import RunSpec
from tracecomm.synth.writer import write_run


def generated(tmp_path: Path, name: str, flags: str) -> tuple[RunSpec, Report]:
    """The run ``python -m tracecomm.synth OUT flags`` writes, and its report."""
    out = tmp_path / name
    spec = _spec(_parser().parse_args([str(out), *flags.split()]))
    write_run(spec, out)
    return spec, tracecomm.analyze(out)


def step_ns(report: Report) -> int:
    assert report.throughput is not None and report.throughput.step_time_ns
    return report.throughput.step_time_ns


def within(value: float, truth: float, share: float = 0.10) -> bool:
    return abs(value - truth) <= share * abs(truth)


def schedule_exposed(spec: RunSpec, coll: str) -> float:
    """The schedule's exposed time of one collective type per step: each rank's median over its
    complete steps, then the mean over ranks (metrics.md §14)."""
    per_rank = [
        statistics.median(s.by_type.get(coll, (0, 0))[1] for s in rank.steps.values())
        for rank in expected_run(spec).values()
    ]
    return statistics.mean(per_rank)


def costed(report: Report, kind: str) -> Sequence[float]:
    return [f.cost_ns or 0 for f in report.findings if f.kind == kind]


@pytest.fixture(scope="module")
def healthy(tmp_path_factory: pytest.TempPathFactory) -> tuple[RunSpec, Report]:
    return generated(tmp_path_factory.mktemp("healthy"), "run", "--healthy")


def test_a_healthy_run_has_no_finding(healthy: tuple[RunSpec, Report]) -> None:
    _, report = healthy
    assert report.findings == ()
    # and not because nothing was measured: the partition is there, the step is busy
    assert report.throughput is not None and report.throughput.step_time_ns
    assert MIN_COST_PCT == 2.0


def test_a_slow_network_exposes_allgather_first(tmp_path: Path) -> None:
    spec, report = generated(tmp_path, "run", "--no-straggler --slower-network 1.5")
    top = report.findings[0]
    assert (top.kind, top.coll_type) == ("exposed_comm", "AllGather")
    assert top.ranks == tuple(range(8))
    assert top.cost_ns is not None and within(top.cost_ns, schedule_exposed(spec, "AllGather"))
    assert top.cost_pct is not None and within(top.cost_pct, 100 * top.cost_ns / step_ns(report))
    assert any("limit_all_gathers" in a or "prefetch" in a for a in top.advice)
    assert any("metrics.md §3" in e for e in top.evidence)


def test_the_exposed_allgather_is_what_it_adds_to_the_step(
    tmp_path: Path, healthy: tuple[RunSpec, Report]
) -> None:
    """One slower collective type on the healthy run: the growth of its exposed time is the
    growth of the step."""
    spec, report = generated(tmp_path, "run", "--healthy --slower-collective AllGather=1.5")
    top = report.findings[0]
    assert (top.kind, top.coll_type) == ("exposed_comm", "AllGather")
    before = schedule_exposed(healthy[0], "AllGather")
    added = step_ns(report) - step_ns(healthy[1])
    assert top.cost_ns is not None and within(top.cost_ns, schedule_exposed(spec, "AllGather"))
    assert within(top.cost_ns - before, added)


def test_host_bound_launches(tmp_path: Path, healthy: tuple[RunSpec, Report]) -> None:
    _, report = generated(tmp_path, "run", "--healthy --host-bound 150")
    top = report.findings[0]
    assert top.kind == "host_bound" and top.ranks == tuple(range(8))
    added = step_ns(report) - step_ns(healthy[1])
    assert top.cost_ns is not None and within(top.cost_ns, added)
    assert any("CUDA graphs" in a for a in top.advice)


def test_loader_stalls_between_steps(tmp_path: Path, healthy: tuple[RunSpec, Report]) -> None:
    """The stall comes before a step's first kernel, between two step windows: it is charged
    to the steps all the same."""
    _, report = generated(tmp_path, "run", "--healthy --loader-stall 3000")
    top = report.findings[0]
    assert top.kind == "dataloader" and top.ranks == tuple(range(8))
    added = step_ns(report) - step_ns(healthy[1])
    assert top.cost_ns is not None and within(top.cost_ns, added)
    assert any("num_workers" in a and "pin_memory" in a for a in top.advice)


def test_an_impossible_mfu_input_comes_first(tmp_path: Path) -> None:
    out = tmp_path / "run"
    write_run(_spec(_parser().parse_args([str(out)])), out)
    report = tracecomm.analyze(out, model_flops_per_step=1e20)
    top = report.findings[0]
    assert top.kind == "impossible_mfu" and top.severity == "input"
    assert top.cost_ns is None and top.cost_pct is None
    assert any("--model-flops-per-step" in a for a in top.advice)
    # the costed findings are still there, after it
    assert [f.severity for f in report.findings[1:]] == ["cost"] * (len(report.findings) - 1)
    plausible = tracecomm.analyze(out, model_flops_per_step=1e12)
    assert all(f.kind != "impossible_mfu" for f in plausible.findings)


def test_findings_are_ranked_by_cost_and_each_one_is_whole(tmp_path: Path) -> None:
    _, report = generated(tmp_path, "run", "--slower-network 1.5")
    costs = [f.cost_ns or 0 for f in report.findings if f.severity == "cost"]
    assert costs == sorted(costs, reverse=True) and len(costs) >= 2
    for f in report.findings:
        assert f.title and f.evidence and f.advice and f.section.startswith("metrics.md §")
        assert f.cost_pct is None or MIN_COST_PCT <= f.cost_pct <= 100
        assert f.ranks and set(f.ranks) <= set(range(8))


def test_an_imbalanced_stage(tmp_path: Path) -> None:
    """Stage 2 holds twice the layers: the top finding is that stage, costed as what the extra
    layers add to the step (against the same pipeline with stage 2 like the others); the
    ranks it makes late are not a second finding."""
    flags = "--layout dp-pp --dp 2 --pp 4 --microbatches 8 --no-straggler"
    _, balanced = generated(tmp_path, "balanced", flags)
    _, report = generated(tmp_path, "heavy", flags + " --imbalanced-stage 2:2")
    top = report.findings[0]
    assert (top.kind, top.stage, top.ranks) == ("stage_imbalance", 2, (4, 5))
    added = step_ns(report) - step_ns(balanced)
    assert top.cost_ns is not None and within(top.cost_ns, added)
    assert any("layers to its neighbours" in a for a in top.advice)
    assert not any(f.kind == "straggler" for f in report.findings)
    # the bubble that remains is the pipeline's own, with its own advice
    assert [f.kind for f in balanced.findings][:1] == ["pipeline_bubble"]
    assert all(f.kind != "exposed_comm" or f.coll_type != "SendRecv" for f in report.findings)


def test_a_straggler(tmp_path: Path, healthy: tuple[RunSpec, Report]) -> None:
    """Rank 5 computes 20 % slower on the healthy run: the top finding is that rank, on its
    host, costed by the what-if (metrics.md §6) as what the slow rank adds to the step."""
    _, report = generated(tmp_path, "run", "--healthy --straggler 5:0.2")
    top = report.findings[0]
    assert (top.kind, top.ranks, top.hosts) == ("straggler", (5,), ("node0",))
    added = step_ns(report) - step_ns(healthy[1])
    assert top.cost_ns is not None and within(top.cost_ns, added)
    assert top.recoverable_pct is not None and within(top.recoverable_pct, top.cost_pct or 0)
    assert any("rank 5's GPU on node0" in a for a in top.advice)
