"""What a comparison of runs needs of one run (metrics.md §18): its headline figures as the
analysis reported them, every rank's included steps with their partition, its matched
collective instances and its projection. Built here from a Report; ``run.saved`` builds the
same record from a saved ``analyze --format json`` document, so that both compare alike.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from tracecomm.analysis.bandwidth import size_bucket
from tracecomm.analysis.crossrank import Matching
from tracecomm.analysis.projection import ProjectedSize, Projection
from tracecomm.analysis.report import Report
from tracecomm.engine.model import Figures, TypeFigures

# one row per rank and matched collective instance (metrics.md §18): the group as it compares
# across world sizes ("world", or "N-rank groups"), nccl-tests' size bucket, the rank's kernel
# duration and the instance's transfer time (§6, clamped at 0)
COLLECTIVE_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int64(),
    "step": pl.Int64(),
    "pg": pl.String(),
    "key": pl.String(),
    "coll_type": pl.String(),
    "group": pl.String(),
    "size_bucket": pl.String(),
    "bucket_order": pl.Int64(),
    "bytes": pl.Int64(),
    "n": pl.Int64(),
    "duration_ns": pl.Int64(),
    "transfer_ns": pl.Int64(),
}
# per-kernel statistics per step (the kernel-level diff's input; not in the Report yet)
KERNEL_SCHEMA: dict[str, pl.DataType] = {
    "name": pl.String(),
    "calls_per_step": pl.Float64(),
    "time_per_step_ns": pl.Float64(),
}
WORLD_GROUP = "world"


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
    source: str  # "traces", "summaries" or "analyze JSON"
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
    # COLLECTIVE_SCHEMA rows; None when the input holds no instances (a saved analyze JSON)
    collectives: pl.DataFrame | None
    projection: ProjectionRecord | str | None = None  # None: not asked for
    kernels: pl.DataFrame | None = None  # KERNEL_SCHEMA, once per-kernel tables exist
    warnings: tuple[str, ...] = ()
    frameworks: tuple[str, ...] = ()  # the labels of the frameworks its traces name (§14a)


def record_of_report(
    report: Report, label: str, source: str, matching: Matching | None = None
) -> RunRecord:
    """The run to compare, of a Report analyzed now or read from its saved document (alike);
    ``matching``: its matched instances, when analyzed now (a saved document holds none)."""
    tp = report.throughput
    st = report.stragglers
    recoverable = st.recoverable_pct if st is not None else None
    energy = tp.energy if tp is not None else None
    flops = tp.flops if tp is not None else None
    return RunRecord(
        label=label,
        source=source,
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
        collectives=None
        if source == SAVED
        else (
            collective_rows(matching.aligned, report.summary.world_size)
            if matching is not None
            else pl.DataFrame(schema=COLLECTIVE_SCHEMA)
        ),
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


SAVED = "analyze JSON"  # a record's source when it was read from a saved document


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


def collective_rows(aligned: pl.DataFrame, world_size: int | None) -> pl.DataFrame:
    """Each rank's matched instances with what the diff by collective keys and measures."""
    if aligned.height == 0 or "bytes" not in aligned.columns:
        return pl.DataFrame(schema=COLLECTIVE_SCHEMA)
    world = world_size or int(aligned["rank"].n_unique())
    per = aligned.group_by("pg", "key").agg(
        pl.coalesce(pl.col("group_size").drop_nulls().max(), pl.col("rank").n_unique()).alias("n"),
        pl.col("bytes").drop_nulls().max().alias("bytes"),
        (pl.col("end_ns").min() - pl.col("start_ns").max()).clip(lower_bound=0).alias("transfer"),
    )
    order, name = size_bucket(pl.col("bytes"))
    return (
        aligned.select(
            "rank",
            "step",
            "pg",
            "key",
            "coll_type",
            (pl.col("end_ns") - pl.col("start_ns")).clip(lower_bound=0).alias("duration_ns"),
        )
        .join(per, on=["pg", "key"], how="left")
        .with_columns(
            pl.when(pl.col("n") >= world)
            .then(pl.lit(WORLD_GROUP))
            .otherwise(pl.format("{}-rank groups", pl.col("n")))
            .alias("group"),
            pl.when(pl.col("bytes").is_null())
            .then(pl.lit("size unknown"))
            .otherwise(name)
            .alias("size_bucket"),
            pl.when(pl.col("bytes").is_null())
            .then(pl.lit(-1))
            .otherwise(order)
            .alias("bucket_order"),
            pl.col("transfer").alias("transfer_ns"),
        )
        .select(list(COLLECTIVE_SCHEMA))
        .cast(COLLECTIVE_SCHEMA)  # type: ignore[arg-type]
    )
