"""The report agrees with itself (tracecomm.analysis.invariants): every invariant holds on the
bundled fixtures, on a generated run of each shape the generator makes and on every real trace
in ../shared; and each invariant fails on a report broken the way it guards against."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest
from msgspec.structs import replace

import tracecomm
from tests.conftest import REPO, SAMPLE_RUN
from tracecomm.analysis.invariants import CHECKS, violations
from tracecomm.analysis.pipeline_view import StageBubble, overloaded
from tracecomm.analysis.report import Report
from tracecomm.engine.model import Figures
from tracecomm.synth.__main__ import _parser, _spec
from tracecomm.synth.family import member
from tracecomm.synth.family import names as family_names
from tracecomm.synth.writer import write_run

SHARED_TRACES = REPO.parent / "shared" / "data" / "traces"
# every shape the generator makes, with the problems that exercise each section
SHAPES = {
    "fsdp": "",
    "fsdp-healthy": "--healthy",
    "fsdp-host-bound": "--ranks 4 --host-bound 300 --loader-stall 2000",
    "dp-tp": "--layout dp-tp --dp 2 --tp 4",
    "dp-pp": "--layout dp-pp --dp 2 --pp 4 --microbatches 8",
    "dp-pp-stage": "--layout dp-pp --dp 2 --pp 4 --microbatches 8 --imbalanced-stage 2:1.3",
    "dp-pp-straggler": "--layout dp-pp --dp 2 --pp 2 --microbatches 4 --straggler 3:0.3",
    "moe-imbalanced": "--layout moe --ranks 4 --layers 2 --metadata --imbalance 2",
    "moe-deepep-overlap": "--layout moe --ranks 4 --layers 2 --ep-comm deepep --overlap",
    "dlrm": "--layout dlrm --ranks 4 --metadata --imbalance 1.5",
}


SHARED_NSYS = REPO.parent / "shared" / "data" / "nsys"


def _shared_runs() -> list[Path]:
    """Every shared trace folder, and each Nsight Systems export on its own (they are three
    different jobs)."""
    traces = (
        sorted(p for p in SHARED_TRACES.iterdir() if p.is_dir()) if SHARED_TRACES.is_dir() else []
    )
    exports = sorted(SHARED_NSYS.glob("*.sqlite")) if SHARED_NSYS.is_dir() else []
    return traces + exports


def both(report: Report) -> list[str]:
    """The invariants over the live Report and over it saved as JSON and read back, which is
    the same Report (its types are the document)."""
    back = msgspec.json.decode(msgspec.json.encode(report), type=Report)
    assert back == report
    return violations(report) + violations(back)


@pytest.fixture(scope="module")
def sample() -> Report:
    return tracecomm.analyze(SAMPLE_RUN)


@pytest.mark.parametrize("name", ["sample-run", "gloo-run"])
def test_the_fixtures_agree_with_themselves(name: str) -> None:
    assert both(tracecomm.analyze(REPO / "fixtures" / name)) == []


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_every_generated_shape_agrees_with_itself(
    shape: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    out = tmp_path_factory.mktemp(shape) / "run"
    write_run(_spec(_parser().parse_args([str(out), *SHAPES[shape].split()])), out)
    report = tracecomm.analyze(out)
    assert both(report) == []
    assert report.step_parts is not None  # the invariants had something to check


@pytest.mark.parametrize("name", family_names())
def test_every_straggler_family_member_agrees_with_itself(
    name: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The straggler family (tracecomm.synth.family) at 8 ranks: host candidates, the mean
    step's what-if and the root-delay heat map beside every other section."""
    out = tmp_path_factory.mktemp(name) / "run"
    write_run(member(name, 8).job, out)
    report = tracecomm.analyze(out)
    assert both(report) == []
    assert report.stragglers is not None and report.stragglers.flagged  # a cause was found


@pytest.mark.parametrize("run", _shared_runs(), ids=lambda p: p.name)
def test_every_real_trace_agrees_with_itself(run: Path) -> None:
    assert both(tracecomm.analyze(run)) == []


def test_the_shared_traces_are_all_checked() -> None:
    if not SHARED_TRACES.is_dir():
        pytest.skip("../shared/data/traces is not present")
    assert {p.name for p in _shared_runs()} >= {"bytedance-straggler-SE", "deepseek-train-ep64"}
    if SHARED_NSYS.is_dir():
        assert {p.name for p in _shared_runs()} >= {"mfu_2gpu_before.sqlite", "mock.sqlite"}


# --- each invariant fails on a report broken the way it guards against -----------------------


def _broken_partition(r: Report) -> Report:
    rank = r.ranks[0]
    window = rank.window
    assert window is not None
    figures = _changed(window.figures, idle_ns=window.figures.idle_ns + 1)
    return replace(r, ranks=(replace(rank, window=replace(window, figures=figures)), *r.ranks[1:]))


def _changed(f: Figures, **times: int) -> Figures:
    """A partition with other times (its shares set from them again)."""
    return replace(f, **times, overlap_pct=None, busy_pct=None)


def _broken_types(r: Report) -> Report:
    assert r.step_parts is not None
    by_type = dict(r.step_parts.exposed_comm_by_type_ns)
    first = next(iter(by_type))
    by_type[first] //= 2  # a type's median over ranks: no longer adds up with the others
    return replace(r, step_parts=replace(r.step_parts, exposed_comm_by_type_ns=by_type))


def _broken_parts(r: Report) -> Report:
    assert r.step_parts is not None
    return replace(r, step_parts=replace(r.step_parts, idle_ns=r.step_parts.idle_ns + 10_000))


def _broken_share(r: Report) -> Report:
    assert r.step_parts is not None
    pct = dict(r.step_parts.exposed_comm_by_type_pct)
    first = next(iter(pct))
    pct[first] *= 3  # a share of another base than the figure beside it
    return replace(r, step_parts=replace(r.step_parts, exposed_comm_by_type_pct=pct))


def _broken_range(r: Report) -> Report:
    assert r.step_parts is not None
    return replace(r, step_parts=replace(r.step_parts, busy_pct=112.5))


def _broken_finding(r: Report) -> Report:
    f = next(f for f in r.findings if f.kind == "exposed_comm")
    broken = replace(f, cost_ns=(f.cost_ns or 0) + 1_000_000)
    return replace(r, findings=tuple(broken if x is f else x for x in r.findings))


def _overcounted(r: Report) -> Report:
    """The straggler's wait counted twice: a finding costing the whole step beside the rest."""
    assert r.step_parts is not None
    f = next(f for f in r.findings if f.severity == "cost")
    broken = replace(f, cost_ns=2 * r.step_parts.step_ns, cost_pct=100.0)
    return replace(r, findings=tuple(broken if x is f else x for x in r.findings))


def _broken_step_time(r: Report) -> Report:
    assert r.step_parts is not None
    return replace(r, step_parts=replace(r.step_parts, step_ns=r.step_parts.step_ns + 53_000))


def _kernels_past_their_step(r: Report) -> Report:
    """A kernel exposed for as long as it ran, beside the others: the step's busy time twice."""
    table = r.kernel_steps
    assert table is not None
    first = table.kernels[0]
    doubled = tuple(e + 10**9 for e in first.exposed_ns or ())
    broken = replace(first, time_ns=doubled, exposed_ns=doubled)
    return replace(r, kernel_steps=replace(table, kernels=(broken, *table.kernels[1:])))


BROKEN = {
    "partitions add up": _broken_partition,
    "types add up": _broken_types,
    "step parts add up": _broken_parts,
    "shares are their figures": _broken_share,
    "shares in range": _broken_range,
    "findings cost their parts": _broken_finding,
    "findings fit the step": _overcounted,
    "one step time": _broken_step_time,
    "kernels fit their steps": _kernels_past_their_step,
}


def test_every_invariant_has_a_broken_report() -> None:
    assert set(BROKEN) | {"stages named are heaviest", "all-to-all is its type"} == set(CHECKS)


def test_the_all_to_all_invariant_fails_on_a_broken_report(tmp_path: Path) -> None:
    out = tmp_path / "moe"
    write_run(_spec(_parser().parse_args([str(out), *SHAPES["moe-imbalanced"].split()])), out)
    report = tracecomm.analyze(out)
    check = CHECKS["all-to-all is its type"]
    assert check(report) == []
    view = report.all_to_all
    assert view is not None and view.imbalance is not None
    row = view.ranks[0]
    broken_rank = replace(
        view, ranks=(replace(row, exposed_ns=row.exposed_ns + 1), *view.ranks[1:])
    )
    assert check(replace(report, all_to_all=broken_rank)) != []
    assert row.wait_ns is not None
    broken_wait = replace(view, ranks=(replace(row, wait_ns=row.wait_ns + 1), *view.ranks[1:]))
    assert check(replace(report, all_to_all=broken_wait)) != []
    gain = view.imbalance.gain_ns or 0
    broken_gain = replace(view, imbalance=replace(view.imbalance, gain_ns=gain + 1))
    assert check(replace(report, all_to_all=broken_gain)) != []


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_each_invariant_fails_on_a_broken_report(name: str, sample: Report) -> None:
    assert CHECKS[name](sample) == []
    assert CHECKS[name](BROKEN[name](sample)) != []


def test_the_summary_total_is_the_ranks_summed(sample: Report) -> None:
    total = sample.summary.total
    assert total is not None
    broken = replace(sample.summary, total=_changed(total, compute_ns=total.compute_ns + 1))
    assert any("summary.total" in v for v in violations(replace(sample, summary=broken)))


def test_an_impossible_mfu_is_flagged_or_refused(sample: Report) -> None:
    assert sample.throughput is not None
    high = replace(sample, throughput=replace(sample.throughput, mfu=1.4))
    assert CHECKS["shares in range"](high) != []


# --- the stage a pipeline names is the stage with the most compute ---------------------------


def _stages(*computes: int) -> tuple[StageBubble, ...]:
    return tuple(StageBubble(i, 2 * i, 10.0, c) for i, c in enumerate(computes))


def test_the_verdict_names_the_heaviest_stage_not_the_first_over_the_line() -> None:
    # stage 2 is 14 % over the others' median, stage 3 36 %: stage 3 is the overloaded one
    found = overloaded(_stages(1000, 1000, 1140, 1360))
    assert found is not None and found[0].stage == 3 and round(found[1]) == 36


def test_balanced_stages_name_none() -> None:
    assert overloaded(_stages(1000, 1010, 1040, 1000)) is None


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory: pytest.TempPathFactory) -> Report:
    out = tmp_path_factory.mktemp("pp") / "run"
    flags = "--layout dp-pp --dp 2 --pp 4 --microbatches 8 --imbalanced-stage 2:1.3"
    write_run(_spec(_parser().parse_args([str(out), *flags.split()])), out)
    return tracecomm.analyze(out)


def test_the_pipeline_verdict_and_the_finding_name_one_stage(pipeline: Report) -> None:
    assert pipeline.pipelines and all(v.overloaded_stage == 2 for v in pipeline.pipelines)
    stages = {f.stage for f in pipeline.findings if f.kind == "stage_imbalance"}
    assert stages == {2}
    check = CHECKS["stages named are heaviest"]
    assert check(pipeline) == []
    view = pipeline.pipelines[0]
    wrong = replace(view, overloaded_stage=1, verdict=view.verdict.replace("stage 2", "stage 1"))
    assert check(replace(pipeline, pipelines=(wrong, *pipeline.pipelines[1:]))) != []


def test_figures_of_an_empty_window_are_not_shares() -> None:
    assert Figures(0, 0, 0, 0, 0, 0, 0).overlap_pct is None


def test_an_impossible_mfu_is_shown_only_as_impossible() -> None:
    """3.2e15 FLOPs per step on the sample is 2,032 % MFU: the report keeps the figure as
    evidence, marks it impossible, says why first, and passes every invariant."""
    from tracecomm.render.bottom_line import _time_line

    report = tracecomm.analyze(SAMPLE_RUN, model_flops_per_step=3.2e15)
    th = report.throughput
    assert th is not None and th.mfu is not None and th.mfu > 20
    assert th.mfu_possible is False and all(g.mfu_pct is None for g in th.gaps)
    assert report.findings[0].kind == "impossible_mfu"
    assert violations(report) == []
    screen = _time_line(report).plain
    assert "MFU –" in screen and "impossible: 2,032.1 %; see finding 1" in screen
    assert "MFU 2032" not in screen


def test_the_step_time_analyzed_gated_and_compared_is_one_number(sample: Report) -> None:
    from tracecomm.analysis.runrecord import record_of_report
    from tracecomm.check.figures import from_report

    assert sample.throughput is not None and sample.step_parts is not None
    step = sample.throughput.step_time_ns
    assert sample.step_parts.step_ns == step
    assert from_report(sample, "run").step_time_ns == step
    assert record_of_report(sample, "run").step_time_ns == step


def test_a_ranks_mean_step_is_its_window_over_its_steps(sample: Report) -> None:
    rank = sample.ranks[0]
    mean, window, steps = rank.step_mean, rank.window, rank.steps_included
    assert mean is not None and window is not None
    assert abs(mean.window_ns * steps - window.figures.window_ns) <= steps
    broken = replace(rank, step_mean=replace(mean, idle_ns=mean.idle_ns + 50_000))
    report = replace(sample, ranks=(broken, *sample.ranks[1:]))
    assert any("mean step" in v for v in CHECKS["partitions add up"](report))
