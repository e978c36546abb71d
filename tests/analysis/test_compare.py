"""Comparing runs (metrics.md §18) on generated runs whose figures come from the schedule alone
(tracecomm.synth.series): one FSDP model at 8, 16, 32 and 64 ranks on a latency-bound network,
and a before/after pair in which the generator slowed one collective."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from tracecomm import analyze
from tracecomm.analysis.compare import (
    KERNELS_MISSING,
    Comparison,
    compare,
    diff_table,
    kernel_diff,
    kernel_family,
)
from tracecomm.analysis.kernels import RunKernelSteps, kernel_table_of
from tracecomm.analysis.runrecord import RunRecord, model_record, record_of_report
from tracecomm.engine.model import KernelStep
from tracecomm.run.request import AnalyzeOptions, request_of
from tracecomm.run.session import analyze_run
from tracecomm.synth.fsdp import fsdp_run
from tracecomm.synth.schedule import RunSpec
from tracecomm.synth.series import Deltas, before_after, deltas, scaling_series, typical
from tracecomm.synth.writer import write_run

SIZES = (8, 16, 32, 64)
TOKENS: AnalyzeOptions = {"flops_per_token": 8e8, "tokens_per_step": 1_000_000}


@pytest.fixture(scope="module")
def series(tmp_path_factory: pytest.TempPathFactory) -> dict[int, tuple[Path, RunSpec]]:
    out = tmp_path_factory.mktemp("series")
    specs = scaling_series(SIZES)
    for n, spec in specs.items():
        write_run(spec, out / f"n{n}")
    return {n: (out / f"n{n}", spec) for n, spec in specs.items()}


def record_of(run: Path, label: str, **options: Any) -> RunRecord:
    """A run to compare as compare_runs makes it: its Report and its matched instances."""
    analysis = analyze_run(request_of(run, **options))
    return record_of_report(analysis.report, label)


@pytest.fixture(scope="module")
def records(series: dict[int, tuple[Path, RunSpec]]) -> list[RunRecord]:
    # given out of order: compare orders them by world size
    return [record_of(series[n][0], f"n{n}", **TOKENS) for n in (32, 8, 64, 16)]


@pytest.fixture(scope="module")
def scaling(records: list[RunRecord]) -> Comparison:
    return compare(records)


def test_runs_are_ordered_by_world_size(scaling: Comparison) -> None:
    assert [r.world_size for r in scaling.runs] == list(SIZES)
    assert [r.label for r in scaling.runs] == [f"n{n}" for n in SIZES]
    assert scaling.order == "world size" and scaling.compared_steps is None


def test_throughput_per_gpu_drops_as_generated(scaling: Comparison) -> None:
    runs = scaling.runs
    per_gpu = [r.tokens_per_s_per_gpu for r in runs]
    assert all(v is not None for v in per_gpu)
    assert per_gpu == sorted(per_gpu, reverse=True)  # type: ignore[type-var]
    efficiency = [r.scaling_efficiency for r in runs]
    assert efficiency[0] == 1.0
    assert efficiency == sorted(efficiency, reverse=True)  # type: ignore[type-var]
    for r in runs:
        # strong scaling: (t1·N1)/(tk·Nk) is the per-GPU throughput ratio
        assert r.step_time_ns and runs[0].step_time_ns
        expected = runs[0].step_time_ns * 8 / (r.step_time_ns * r.world_size)
        assert r.scaling_efficiency == pytest.approx(expected)
        assert r.tokens_per_s_per_gpu == pytest.approx(
            runs[0].tokens_per_s_per_gpu * expected  # type: ignore[operator]
        )
    assert runs[-1].scaling_efficiency < 0.8  # type: ignore[operator]
    assert runs[-1].changes["tokens_per_s_per_gpu"].relative < -0.2  # type: ignore[operator]


def test_exposed_allgather_and_reducescatter_grow_as_generated(
    scaling: Comparison, series: dict[int, tuple[Path, RunSpec]]
) -> None:
    for r in scaling.runs:
        truth = typical(series[r.world_size][1])
        t = r.typical
        assert t is not None and t.step == truth.step
        assert t.exposed_comm_by_type_ns == truth.exposed_by_type_ns
        assert (t.window_ns, t.compute_ns, t.exposed_comm_ns, t.idle_ns) == (
            truth.window_ns,
            truth.compute_ns,
            truth.exposed_comm_ns,
            truth.idle_ns,
        )
    for coll in ("AllGather", "ReduceScatter"):
        grown = [r.typical.exposed_comm_by_type_ns[coll] for r in scaling.runs]  # type: ignore[union-attr]
        assert grown == sorted(grown) and grown[-1] > 2 * grown[0], coll


def test_the_decomposition_adds_up_to_the_ns(
    scaling: Comparison, series: dict[int, tuple[Path, RunSpec]]
) -> None:
    base = typical(series[8][1])
    for pair in scaling.pairs:
        d = pair.decomposition
        assert d is not None
        parts = d.delta_compute_ns + d.delta_exposed_comm_ns + d.delta_exposed_memory_ns
        assert d.delta_step_ns == parts + d.delta_idle_ns
        by_type = sum(d.delta_exposed_comm_by_type_ns.values()) - d.delta_types_overlap_ns
        assert d.delta_exposed_comm_ns == by_type
        assert d.delta_idle_by_cause_ns is not None
        assert sum(d.delta_idle_by_cause_ns.values()) == d.delta_idle_ns
        # against the schedule: the generated difference, to the ns
        run = scaling.runs[pair.run]
        want = deltas(base, typical(series[run.world_size][1]))
        assert d.delta_step_ns == want.step_ns
        assert d.delta_compute_ns == want.compute_ns
        assert d.delta_exposed_comm_ns == want.exposed_comm_ns
        assert d.delta_idle_ns == want.idle_ns
        assert d.delta_exposed_comm_by_type_ns == want.exposed_by_type_ns
        # the step time (§8) and the typical step differ only by what the window leaves out
        assert pair.delta_step_time_ns == d.delta_step_ns + pair.unpartitioned_ns  # type: ignore[operator]


def test_collective_rows_follow_the_network(
    scaling: Comparison, series: dict[int, tuple[Path, RunSpec]]
) -> None:
    last = scaling.pairs[-1]
    assert last.collectives.level == "instance"
    rows = {r.coll_type: r for r in last.collectives.rows}
    assert set(rows) == {"AllGather", "ReduceScatter", "AllReduce"}
    assert last.collectives.rows[0].coll_type == "AllGather"
    want = typical(series[64][1]).kernel_ns_per_step
    for coll, row in rows.items():
        assert row.group == "world"
        assert row.run is not None and row.base is not None
        assert row.run.time_per_step_ns == pytest.approx(want[coll], abs=1)
        assert row.run.calls_per_step == typical(series[64][1]).calls_per_step[coll]
        assert row.run.busbw_gbps < row.base.busbw_gbps  # type: ignore[operator]
    assert last.kernels.missing is None
    # each collective's kernel (one name per type here) changed as its collective row did
    by_class = {k.kernel_class: k for k in last.kernels.changes if k.kernel_class in rows}
    assert set(by_class) == set(rows)
    for coll, k in by_class.items():
        assert k.status == "changed"
        assert k.delta_ns == pytest.approx(rows[coll].delta_time_per_step_ns, abs=1)


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Comparison, Deltas]:
    out = tmp_path_factory.mktemp("pair")
    before, after = before_after(16, "ReduceScatter", 2.0)
    write_run(before, out / "before")
    write_run(after, out / "after")
    records = [record_of(out / name, name) for name in ("before", "after")]
    return compare(records), deltas(typical(before), typical(after))


def test_the_top_changed_collective_is_the_one_the_generator_slowed(
    pair: tuple[Comparison, Deltas],
) -> None:
    result, want = pair
    assert [r.label for r in result.runs] == ["before", "after"]  # one size: the order given
    (p,) = result.pairs
    top = p.collectives.rows[0]
    assert top.coll_type == want.most_changed_type == "ReduceScatter"
    assert top.delta_time_per_step_ns == pytest.approx(
        want.kernel_ns_per_step["ReduceScatter"],
        abs=1,
    )
    others = [r for r in p.collectives.rows if r.coll_type != "ReduceScatter"]
    assert all(abs(r.delta_time_per_step_ns) < 1 for r in others)
    d = p.decomposition
    assert d is not None
    assert d.delta_step_ns == want.step_ns > 0
    assert d.delta_exposed_comm_by_type_ns == want.exposed_by_type_ns
    assert d.delta_compute_ns == 0
    assert result.runs[1].scaling_efficiency < 1  # type: ignore[operator]


def test_a_run_compared_with_itself_shows_no_change(records: list[RunRecord]) -> None:
    one = records[0]
    result = compare([one, replace(one, label="again")])
    (p,) = result.pairs
    d = p.decomposition
    assert d is not None and d.delta_step_ns == 0
    assert all(v == 0 for v in d.delta_exposed_comm_by_type_ns.values())
    assert p.delta_step_time_ns == 0 and p.unpartitioned_ns == 0
    assert all(c.delta == 0 for c in result.runs[1].changes.values())
    assert all(r.delta_time_per_step_ns == 0 for r in p.collectives.rows)
    assert result.runs[1].scaling_efficiency == 1.0
    assert result.notes == ()


def test_runs_of_different_steps_are_compared_on_the_shared_ones(
    tmp_path: Path, records: list[RunRecord]
) -> None:
    n8 = next(r for r in records if r.world_size == 8)
    later = [s for s in n8.steps if s.step == 14]
    short = replace(n8, label="short", rate_steps=(14,), steps=tuple(later))
    result = compare([n8, short], keep_order=True)
    assert result.compared_steps == (14,)
    assert any("profiled different steps" in n for n in result.notes)
    assert [r.typical.step for r in result.runs] == [14, 14]  # type: ignore[union-attr]
    disjoint = replace(n8, label="other", rate_steps=(99,), steps=())
    assert any("share no profiled step" in n for n in compare([n8, disjoint]).notes)


def test_runs_of_different_models_say_so(records: list[RunRecord]) -> None:
    n8 = next(r for r in records if r.world_size == 8)
    bigger = replace(n8, label="bigger", model=model_record(2.4e15, None, 1_000_000, "flag"))
    result = compare([n8, bigger], keep_order=True)
    assert any("differ in model" in n for n in result.notes)
    assert result.runs[1].scaling_efficiency is None
    assert result.runs[1].scaling_efficiency_missing == "the runs differ in model"
    assert result.pairs[0].decomposition is not None  # time is still time


def test_the_first_runs_projection_is_checked_against_the_others(
    series: dict[int, tuple[Path, RunSpec]], records: list[RunRecord]
) -> None:
    from tracecomm.analysis.runrecord import projection_record

    report = analyze(series[8][0], project=True, to="16,32,64")
    n8 = replace(
        next(r for r in records if r.world_size == 8),
        projection=projection_record(report.projection),
    )
    result = compare([n8, *(r for r in records if r.world_size != 8)])
    rows = result.projection.rows
    assert [r.world_size for r in rows] == [16, 32, 64]
    for row in rows:
        measured = result.runs[row.run].typical
        assert measured is not None and row.measured_step_ns == measured.window_ns
        assert row.step_error_pct == pytest.approx(
            100 * (row.projected_step_ns - measured.window_ns) / measured.window_ns
        )
    assert rows[0].step_error_pct is not None and abs(rows[0].step_error_pct) < 1
    unprojected = compare(records)
    assert unprojected.projection.rows == () and "not projected" in str(
        unprojected.projection.missing
    )


def test_diff_table_keeps_rows_of_one_side() -> None:
    a = pl.DataFrame({"k": ["x", "y"], "v": [1.0, 5.0]})
    b = pl.DataFrame({"k": ["y", "z"], "v": [2.0, 10.0]})
    out = diff_table(a, b, ["k"], ["v"], "v")
    assert out["k"].to_list() == ["z", "y", "x"]
    assert out["delta_v"].to_list() == [10.0, -3.0, -1.0]
    assert out["v_base"].to_list() == [None, 5.0, 1.0]


def _steps(*names: tuple[str, int, int], steps: tuple[int, ...] = (1, 2)) -> RunKernelSteps:
    """(name, calls, time) in each step, in the step's order (the engine's rows, as the
    analysis turns them into the run's table)."""
    return kernel_table_of(
        0,
        [
            KernelStep(
                step=s,
                name=name,
                cls="comm" if name.startswith("nccl") else "compute",
                coll_type="AllGather" if name.startswith("nccl") else None,
                calls=calls,
                time_ns=ns,
                order=i,
            )
            for s in steps
            for i, (name, calls, ns) in enumerate(names)
        ],
    )


def test_kernel_diff_pairs_by_name_and_keeps_new_and_gone_kernels() -> None:
    assert kernel_diff(None, _steps(("gemm", 1, 1))).missing == KERNELS_MISSING
    base = _steps(("gemm", 4, 1_000), ("softmax", 2, 200), ("ncclAllGather", 1, 300))
    # a kernel inserted in the middle of the step, one removed, one slower
    run = _steps(("gemm", 4, 1_000), ("inserted", 1, 50), ("ncclAllGather", 1, 900))
    diff = kernel_diff(base, run, (1, 2), (1, 2))
    assert diff.missing is None
    assert [(k.name, k.status, k.delta_ns) for k in diff.changes] == [
        ("ncclAllGather", "changed", 600.0),
        ("softmax", "gone", -200.0),
        ("inserted", "new", 50.0),
    ]  # gemm, unchanged though it moved in the step, is left out
    gone, new = diff.changes[1], diff.changes[2]
    assert gone.calls == (2.0, None) and gone.time_ns == (200.0, None)
    assert new.calls == (None, 1.0) and new.kernel_class == "compute"
    assert diff.changes[0].kernel_class == "AllGather"
    # tables without exposed times (a document written before them): no share is made up
    assert all(k.exposed_ns == (None, None) and k.delta_exposed_ns is None for k in diff.changes)
    assert diff.delta_not_kernels_ns is None and diff.note is None
    # per step over the steps compared (the rank's own when it has none of them)
    one = kernel_diff(base, _steps(("gemm", 4, 2_000), steps=(1,)), (1, 2), (1, 2))
    assert one.changes[0].time_ns == (1_000.0, 2_000.0)
    assert kernel_diff(base, base).changes == ()
    assert [k.name for k in run.kernels] == ["gemm", "inserted", "ncclAllGather"]
    assert run.steps == (1, 2) and run.kernels[0].calls == (4, 4)


@pytest.fixture(scope="module")
def slower_allgather(tmp_path_factory: pytest.TempPathFactory) -> Comparison:
    out = tmp_path_factory.mktemp("allgather")
    before, after = before_after(16, "AllGather", 3.0)
    write_run(before, out / "before")
    write_run(after, out / "after")
    return compare([record_of(out / name, name) for name in ("before", "after")])


def test_the_top_changed_kernel_is_the_collective_made_three_times_slower(
    slower_allgather: Comparison,
) -> None:
    (p,) = slower_allgather.pairs
    changes = p.kernels.changes
    top = changes[0]
    assert top.kernel_class == "AllGather" and top.name.startswith("ncclDevKernel_AllGather")
    assert top.status == "changed" and top.calls[0] == top.calls[1] == 12
    base, run = top.time_ns
    assert base is not None and run is not None
    assert run / base == pytest.approx(3.0, rel=0.01)
    assert top.delta_ns == run - base
    assert top.delta_ns == pytest.approx(
        next(r for r in p.collectives.rows if r.coll_type == "AllGather").delta_time_per_step_ns,
        rel=1e-9,
    )
    # compute kernels that were not changed move by less than 2 % (here: not at all)
    for k in changes:
        if k.kernel_class == "compute":
            a, b = k.time_ns
            assert a and b is not None and abs(b - a) / a < 0.02, k.name
    assert all(k.status == "changed" for k in changes)


def test_a_run_compared_with_itself_has_no_kernel_change(records: list[RunRecord]) -> None:
    one = records[0]
    assert one.kernels is not None and one.kernels.kernels
    (p,) = compare([one, replace(one, label="again")]).pairs
    assert p.kernels.missing is None and p.kernels.changes == ()


# --- generated pairs with a known kernel change: one more kernel in every step ---------------

SCALE = "void tracecomm_scale<float>(float*)"
SCALE_HALF = "void tracecomm_scale<c10::Half>(c10::Half*)"
EXTRA = {
    "base": None,
    "middle": (SCALE, 150.0, "middle"),  # inserted between forward and backward
    "half": (SCALE_HALF, 90.0, "middle"),  # the same kernel for another dtype, faster
    "end": ("tracecomm_added", 150.0, "end"),  # added before the optimizer
}


@pytest.fixture(scope="module")
def extra_kernel(tmp_path_factory: pytest.TempPathFactory) -> dict[str, RunRecord]:
    out = tmp_path_factory.mktemp("extra")
    records = {}
    for name, extra in EXTRA.items():
        write_run(fsdp_run(8, steps=3, extra_kernel=extra), out / name)
        records[name] = record_of(out / name, name)
    return records


def _pair(records: dict[str, RunRecord], a: str, b: str) -> Any:
    (p,) = compare([records[a], records[b]], keep_order=True).pairs
    return p


def _unchanged_compute_within_2pct(changes: Any, made: str) -> None:
    for k in changes:
        if k.kernel_class == "compute" and k.name != made:
            a, b = k.time_ns
            assert a and b is not None and abs(b - a) / a < 0.02, k.name


@pytest.mark.parametrize("where", ["middle", "end"])
def test_a_kernel_inserted_in_the_step_is_the_top_change_and_pairs_the_rest(
    extra_kernel: dict[str, RunRecord], where: str
) -> None:
    made, us, _ = EXTRA[where] or ("", 0.0, "")
    p = _pair(extra_kernel, "base", where)
    top = p.kernels.changes[0]
    assert (top.name, top.status, top.kernel_class) == (made, "new", "compute")
    assert top.calls == (None, 1.0) and top.paired_by is None
    assert top.delta_ns == pytest.approx(us * 1e3, rel=0.02)  # 2 % compute jitter
    # on the critical path of the step: all of it exposed
    assert top.delta_exposed_ns == top.delta_ns
    # every other kernel is paired with itself, by name: nothing shifted
    rest = p.kernels.changes[1:]
    assert all(k.status == "changed" and k.paired_by == "name" for k in rest)
    base_names = {k.name for k in extra_kernel["base"].kernels.kernels}  # type: ignore[union-attr]
    assert {k.name for k in rest} <= base_names
    _unchanged_compute_within_2pct(rest, made)


def test_a_removed_kernel_is_gone(extra_kernel: dict[str, RunRecord]) -> None:
    p = _pair(extra_kernel, "middle", "base")
    top = p.kernels.changes[0]
    assert (top.name, top.status) == (SCALE, "gone")
    assert top.calls == (1.0, None) and top.time_ns[1] is None
    assert top.delta_ns == pytest.approx(-150e3, rel=0.02)
    assert all(k.status == "changed" for k in p.kernels.changes[1:])
    # the pair the other way round: the same changes, negated
    back = _pair(extra_kernel, "base", "middle")
    assert [(k.name, -k.delta_ns) for k in back.kernels.changes] == [
        (k.name, k.delta_ns) for k in p.kernels.changes
    ]


def test_names_differing_in_template_arguments_pair_and_say_so(
    extra_kernel: dict[str, RunRecord],
) -> None:
    p = _pair(extra_kernel, "middle", "half")
    top = p.kernels.changes[0]
    assert (top.name, top.baseline_name, top.paired_by) == (SCALE_HALF, SCALE, "family")
    assert top.status == "changed" and top.calls == (1.0, 1.0)
    assert top.delta_ns == pytest.approx(-60e3, rel=0.03)
    assert not any(k.status in ("new", "gone") for k in p.kernels.changes)


def test_kernel_families() -> None:
    assert kernel_family(SCALE) == kernel_family(SCALE_HALF) == "tracecomm_scale"
    named = "void at::native::(anonymous namespace)::k<float, 4>(at::TensorInfo<float>, int)"
    assert kernel_family(named) == "at::native::(anonymous namespace)::k"
    assert kernel_family("sm80_gemm_tn_lb256") == kernel_family("sm80_gemm_tn") == "sm80_gemm_tn"
    assert kernel_family("k __launch_bounds__(256, 2)") == "k"
    # what is not an argument stays: two Triton kernels, two copies, are two families
    assert kernel_family("triton_poi_fused_add_0") != kernel_family("triton_poi_fused_add_1")
    assert kernel_family("Memcpy DtoH (Device -> Pinned)") != kernel_family(
        "Memcpy HtoD (Pinned -> Device)"
    )


def test_exposed_kernel_time_adds_up_to_the_step_change(
    extra_kernel: dict[str, RunRecord], slower_allgather: Comparison
) -> None:
    for p in (
        _pair(extra_kernel, "base", "middle"),
        _pair(extra_kernel, "base", "end"),
        slower_allgather.pairs[0],
    ):
        k = p.kernels
        assert k.step_change_ns is not None and k.delta_not_kernels_ns is not None
        exposed = sum(c.delta_exposed_ns or 0.0 for c in k.changes)
        assert exposed + k.delta_not_kernels_ns == pytest.approx(k.step_change_ns)
        # what no kernel holds is idle here (no unlinked work in the steps): small
        assert abs(k.delta_not_kernels_ns) <= 0.05 * max(abs(exposed), 1.0)
        for c in k.changes:
            share = c.step_change_share_pct
            assert share is None or -100.0 <= share <= 100.0
            if share is not None:
                assert share == pytest.approx(100 * (c.delta_exposed_ns or 0) / k.step_change_ns)
    # the collective made 3x slower is exposed longer, by no more than it ran longer
    top = slower_allgather.pairs[0].kernels.changes[0]
    assert top.delta_exposed_ns is not None and 0 < top.delta_exposed_ns <= top.delta_ns
