"""What a comparison of runs needs of one run (metrics.md §18): its headline figures as the
analysis reported them, every rank's included steps with their partition, its matched
collective instances (the Report's ``collective_steps``), its median rank's kernels per step
(``kernel_steps``) and its projection. Built here from
a Report, analyzed now or read back from its saved ``analyze --format json`` document
(``run.saved``): both compare alike.
"""

from __future__ import annotations

from dataclasses import dataclass

from tracecomm.analysis.collective_steps import CollectiveStep
from tracecomm.analysis.kernels import RunKernelSteps
from tracecomm.analysis.projection import ProjectedSize, Projection
from tracecomm.analysis.report import Report
from tracecomm.engine.model import Figures, TypeFigures


@dataclass(frozen=True)
class StepRecord:
    """One included step of one rank (a trace without steps: its analysis window, step None)."""

    rank: int
    step: int | None
    cpu_span_ns: int | None
    figures: Figures
    by_type: tuple[TypeFigures, ...]
    idle_by_cause: dict[str, int] | None


@dataclass(frozen=True)
class ModelRecord:
    flops_per_step: float | None
    flops_per_token: float | None
    tokens_per_step: int | None
    source: str | None


@dataclass(frozen=True)
class ProjectionRecord:
    """metrics.md §11 of the run: the sizes it projected to (the measured one first)."""

    measured_world: int
    scaling: str
    rank: int
    step: int
    sizes: tuple[ProjectedSize, ...]


@dataclass(frozen=True)
class RunRecord:
    label: str  # the input as given
    source: str  # how it was analyzed: "traces", "summaries"; "analyze JSON": not recorded
    world_size: int | None
    ranks_analyzed: int
    median_rank: int | None
    rate_steps: tuple[int, ...]  # the steps step time is taken over (metrics.md §8)
    steps: tuple[StepRecord, ...]
    step_time_ns: int | None
    device_count: int
    model: ModelRecord
    tokens_per_s: float | None
    mfu: float | None
    recoverable_pct: float | None  # metrics.md §6: the replay's, else the first-order one
    recoverable_by: str | None  # "replay" / "first-order"
    avg_power_w: float | None
    energy_per_step_j: float | None
    tokens_per_j: float | None
    partial: bool
    # the Report's collective_steps; None: a saved document written before them
    collectives: tuple[CollectiveStep, ...] | None
    projection: ProjectionRecord | str | None = None  # None: not asked for
    # the Report's kernel_steps (the median rank's kernels per step); None: none, or a saved
    # document written before them
    kernels: RunKernelSteps | None = None
    warnings: tuple[str, ...] = ()
    frameworks: tuple[str, ...] = ()  # the labels of the frameworks its traces name (§14a)


def record_of_report(report: Report, label: str) -> RunRecord:
    """The run to compare, of a Report analyzed now or read from its saved document (alike:
    its source is what the ranks were read from, which a saved document records)."""
    tp = report.throughput
    st = report.stragglers
    recoverable = st.recoverable_pct if st is not None else None
    energy = tp.energy if tp is not None else None
    flops = tp.flops if tp is not None else None
    return RunRecord(
        label=label,
        source=report.read_from or UNRECORDED,
        world_size=report.summary.world_size,
        ranks_analyzed=report.summary.ranks_analyzed,
        median_rank=report.summary.median_rank,
        rate_steps=tp.steps if tp is not None else (),
        steps=_steps(report),
        step_time_ns=tp.step_time_ns if tp is not None else None,
        device_count=tp.device_count if tp is not None else report.summary.ranks_analyzed,
        model=model_record(
            flops.per_step if flops else None,
            flops.per_token if flops else None,
            flops.tokens_per_step if flops else None,
            flops.source if flops else None,
        ),
        tokens_per_s=tp.tokens_per_s if tp is not None else None,
        mfu=tp.mfu if tp is not None else None,
        recoverable_pct=recoverable,
        recoverable_by=st.recoverable_basis if st is not None and recoverable is not None else None,
        avg_power_w=energy.avg_power_w if energy is not None else None,
        energy_per_step_j=energy.energy_per_step_j if energy is not None else None,
        tokens_per_j=energy.tokens_per_j if energy is not None else None,
        partial=report.partial,
        collectives=report.collective_steps,
        kernels=report.kernel_steps,
        projection=None if report.projection is None else projection_record(report.projection),
        frameworks=tuple(f.label for f in report.frameworks.detected) if report.frameworks else (),
        warnings=report.warnings
        + tuple(
            f"rank {m.rank if m.rank is not None else '?'} missing: {m.reason}"
            for m in report.missing_ranks
        ),
    )


def recoverable_by(replayed: float | None, first_order: float | None) -> str | None:
    """Which estimate a record's recoverable share is: the replay's where it reproduces the
    run, else the first-order one (metrics.md §6)."""
    if replayed is not None:
        return "replay"
    return "first-order" if first_order is not None else None


def model_record(
    per_step: float | None, per_token: float | None, tokens: int | None, source: str | None
) -> ModelRecord:
    if per_token is None and per_step is not None and tokens:
        per_token = per_step / tokens
    return ModelRecord(per_step, per_token, tokens, source)


# the source of a saved document written before the Report recorded what its ranks were read from
UNRECORDED = "analyze JSON"


def projection_record(projection: Projection | None) -> ProjectionRecord | str:
    """A run's projection to compare, or why there is none."""
    p = projection
    if p is None:
        return (
            "the saved report holds no projection (write it with "
            "`tracecomm project RUN --to N,… -f json`)"
        )
    if p.reason is not None:
        return p.reason
    if p.sizes is None or p.measured_world is None or p.rank is None or p.step is None:
        return "the saved report's projection is incomplete"
    return ProjectionRecord(p.measured_world, p.scaling or "strong", p.rank, p.step, p.sizes)


def _steps(report: Report) -> tuple[StepRecord, ...]:
    out = []
    for rank in report.ranks:
        included = rank.included_steps
        whole = rank.window
        if not rank.steps and whole is not None:  # no ProfilerStep: one window (§2)
            out.append(
                StepRecord(rank.rank, None, None, whole.figures, whole.by_type, whole.idle_by_cause)
            )
        for s in included:
            if s.window is not None:
                w = s.window
                out.append(
                    StepRecord(
                        rank.rank, s.step, s.cpu_span_ns, w.figures, w.by_type, w.idle_by_cause
                    )
                )
    return tuple(out)
