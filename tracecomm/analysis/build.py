"""One Report, built by processors: the base report from the per-rank results, then each
processor adds what it owns, reading the partial report and the request. Nothing patches the
report afterwards; renderers only display it.

A processor is a small function ``(report, context) -> report``; their order is the order in
which the figures depend on each other (matching before stragglers, stragglers before the
timeline's choice of ranks, throughput before the projection's MFU). What a processor computes
for the others but the report does not state (the matched instances, the what-if's working
values, the export's events) it leaves in the context's ``Side``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from msgspec.structs import replace

from tracecomm.analysis.alltoall import all_to_all_view
from tracecomm.analysis.bandwidth import bandwidth
from tracecomm.analysis.collective_steps import collective_steps as steps_of
from tracecomm.analysis.crossrank import ranks_cross_rank
from tracecomm.analysis.framework import detect_frameworks
from tracecomm.analysis.kernels import kernel_view, run_kernel_steps
from tracecomm.analysis.model import RunData, Side
from tracecomm.analysis.options import AnalysisOptions
from tracecomm.analysis.pipeline_view import pipeline_views
from tracecomm.analysis.projection import (
    Projection,
    fit_links,
    no_projection,
    project,
    projection_basis,
)
from tracecomm.analysis.ranks import base_report
from tracecomm.analysis.report import Report
from tracecomm.analysis.stragglers import rank_stragglers
from tracecomm.analysis.throughput import throughput
from tracecomm.analysis.timeline import run_timeline, typical_step


@dataclass(frozen=True)
class Context:
    data: RunData
    options: AnalysisOptions
    side: Side = field(default_factory=Side)


@dataclass(frozen=True)
class Analysis:
    """What one analysis built: the Report, and what only a live run has besides it."""

    report: Report
    side: Side


Processor = Callable[[Report, Context], Report]


def cross_rank(report: Report, ctx: Context) -> Report:
    side = ctx.side
    side.matching = ranks_cross_rank(report.ranks, side.breakdowns, ctx.options.align_clocks)
    found = side.matching.report() if side.matching is not None else None
    return replace(report, cross_rank=found)


def collective_steps(report: Report, ctx: Context) -> Report:
    """The matched instances per step, type, group and size bucket (what compare diffs)."""
    m = ctx.side.matching
    found = steps_of(m.aligned if m is not None else None, report.summary.world_size)
    return replace(report, collective_steps=found)


def stragglers(report: Report, ctx: Context) -> Report:
    found, ctx.side.what_if = rank_stragglers(
        report.ranks, ctx.side.breakdowns, ctx.side.matching, ctx.options.detail_instances
    )
    return replace(report, stragglers=found)


def step_rate(report: Report, ctx: Context) -> Report:
    """Step time, tokens/s and MFU (metrics.md §8)."""
    model = ctx.data.model
    rate = throughput(
        report.ranks,
        ctx.side.results,
        report.summary.world_size,
        ctx.data.flops,
        model.dtype if model is not None else "bf16",
        model.peak_tflops if model is not None else None,
    )
    warnings = report.warnings + (rate.warnings if rate else ())
    return replace(report, throughput=rate, warnings=warnings)


def kernels(report: Report, ctx: Context) -> Report:
    """metrics.md §15–§16: the ranks' kernel views across ranks, the roofline with peaks."""
    return replace(report, kernels=kernel_view(report.ranks, ctx.side.results))


def kernel_steps(report: Report, ctx: Context) -> Report:
    """metrics.md §18: the median rank's kernels per step, what compare diffs by kernel."""
    found = run_kernel_steps(ctx.side.results, report.summary.median_rank)
    return replace(report, kernel_steps=found)


def link_bandwidth(report: Report, ctx: Context) -> Report:
    m = ctx.side.matching
    found = bandwidth(m.aligned, ctx.options.link_gbps) if m is not None else None
    return replace(report, bandwidth=found)


def all_to_all(report: Report, ctx: Context) -> Report:
    """metrics.md §7a: after the stragglers, whose what-if prices the token imbalance, and the
    step time it is priced in."""
    th = report.throughput
    found = all_to_all_view(
        report.ranks,
        ctx.side.breakdowns,
        ctx.side.matching,
        ctx.side.what_if,
        report.summary.world_size,
        th.step_time_ns if th is not None else None,
    )
    return replace(report, all_to_all=found)


def pipelines(report: Report, ctx: Context) -> Report:
    views = pipeline_views(
        report.ranks,
        ctx.side.breakdowns,
        ctx.side.matching,
        ctx.options.pp_stages,
        ctx.options.microbatches,
    )
    return replace(report, pipelines=views)


def hta_compat(report: Report, ctx: Context) -> Report:
    """--compat hta (metrics.md §9): HTA's own figures, HTA reading the files itself."""
    hta, compat = ctx.data.hta, ctx.options.compat
    if compat is None or hta is None:
        return report
    paths = {r.rank: r.path for r in report.ranks}
    return replace(report, hta_compat=hta(paths, compat))


def nccl(report: Report, ctx: Context) -> Report:
    return replace(report, nccl=ctx.data.nccl, warnings=report.warnings + ctx.data.nccl_warnings)


def timeline(report: Report, ctx: Context) -> Report:
    if not ctx.options.timeline:
        return report
    return replace(
        report, timeline=run_timeline(report, ctx.options.timeline_ranks, ctx.side.results)
    )


def export(report: Report, ctx: Context) -> Report:
    """metrics.md §17: the chosen ranks' and steps' events for ``tracecomm export``."""
    if not ctx.options.export:
        return report
    from tracecomm.analysis.export import trace_export  # the export's modules: export only

    ctx.side.export = trace_export(
        report,
        ctx.side,
        ctx.options.export_ranks,
        ctx.options.export_steps,
        ctx.data.export_reader,
    )
    return report


def replay_basis(report: Report, ctx: Context) -> Report:
    """metrics.md §11's input: the median rank's typical step, as the first pass took it, and
    the link model of the matched instances."""
    median = report.summary.median_rank
    rank = next((r for r in report.ranks if r.rank == median), None)
    step = typical_step(rank) if rank is not None else None
    result = ctx.side.results.get(median) if median is not None else None
    views = result.views if result is not None else None
    work = views.replay if views is not None and views.typical_step == step else None
    fits = fit_links(ctx.side.matching.aligned) if ctx.side.matching is not None else ()
    found = projection_basis(median if rank is not None else None, step, work, fits)
    return replace(report, projection_basis=found)


def projection(report: Report, ctx: Context) -> Report:
    if ctx.options.project_to is None:
        return report
    found = project_report(report, ctx.options.project_to, ctx.options.weak)
    return replace(report, projection=found)


def frameworks(report: Report, ctx: Context) -> Report:
    """metrics.md §14a: which framework ran the job, for the findings' advice."""
    found = detect_frameworks(ctx.side.breakdowns, ctx.options.declared_framework)
    return replace(report, frameworks=found)


def bottom_line(report: Report, ctx: Context) -> Report:
    """After every figure a finding draws on (the projection is none of them)."""
    from tracecomm.analysis.findings import findings, step_parts

    parts = step_parts(report)
    aligned = ctx.side.matching.aligned if ctx.side.matching is not None else None
    return replace(report, step_parts=parts, findings=findings(report, parts, aligned))


PROCESSORS: tuple[Processor, ...] = (
    cross_rank,
    collective_steps,
    stragglers,
    step_rate,
    kernels,
    kernel_steps,
    link_bandwidth,
    all_to_all,
    pipelines,
    hta_compat,
    nccl,
    timeline,
    frameworks,
    bottom_line,  # the findings: every figure they draw on is in by now; export marks them
    export,
    replay_basis,
    projection,
)


def build(
    data: RunData, options: AnalysisOptions, processors: Sequence[Processor] = PROCESSORS
) -> Analysis:
    report, results = base_report(data)
    ctx = Context(data, options, Side(results))
    for process in processors:
        report = process(report, ctx)
    return Analysis(report, ctx.side)


def build_report(
    data: RunData, options: AnalysisOptions, processors: Sequence[Processor] = PROCESSORS
) -> Report:
    return build(data, options, processors).report


def project_report(report: Report, targets: tuple[int, ...], weak: bool) -> Projection:
    """metrics.md §11 from the report's basis (the median rank's typical step and the link
    fits); a reason when it cannot be done. ``targets`` empty: N/2, 2N, 4N, 8N and 16N. Of a
    run analyzed now or of its saved document alike (``compare`` projects the first run to the
    others' sizes once it knows them)."""
    basis = report.projection_basis
    if basis is None:
        return no_projection(
            "the document holds no projection basis (written before schema version 3): "
            "analyze the run again"
        )
    if basis.reason is not None or basis.events is None or basis.fits is None:
        return no_projection(basis.reason or "the projection basis is incomplete")
    assert basis.rank is not None and basis.step is not None
    world = report.summary.world_size or report.summary.ranks_analyzed
    targets = targets or tuple(
        size for size in (world // 2, 2 * world, 4 * world, 8 * world, 16 * world) if size >= 1
    )
    mfu = report.throughput.mfu if report.throughput is not None else None
    return project(
        basis.events.frame(), basis.fits, world, targets, weak, basis.rank, basis.step, mfu
    )
