"""Runs side by side (metrics.md §18): the scaling table, where the time went between two runs,
the largest changes by collective and by kernel, and the first run's projection against what
the other runs measured.

Every figure is computed here, from ``RunRecord``s (``analysis.runrecord``); renderers only
display the ``Comparison``.

The decomposition adds up by construction: each run's **typical step** is one real step window
of one rank (the median rank's step, among the steps compared, whose window is the lower
median), whose partition (§3) adds up to its window exactly; the differences of its parts add
up to the difference of the windows, in integer ns.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import polars as pl

from tracecomm.analysis.collective_steps import CollectiveStep
from tracecomm.analysis.kernels import RunKernelSteps
from tracecomm.analysis.runrecord import ProjectionRecord, RunRecord, StepRecord
from tracecomm.engine.idle import IDLE_CAUSES

TYPE_LEVEL_GROUP = "all groups"
TYPE_LEVEL_BUCKET = "all sizes"
KERNELS_MISSING = (
    "no per-kernel statistics: a CPU timeline, no included step with device work, or a saved "
    "analyze JSON written before kernel_steps (analyze the run again)"
)
_SAME_MODEL_TOLERANCE = 0.005  # FLOPs per token within 0.5 %: the same model


RELATIVE_LIMIT = 10.0  # ±1,000 %: past it a relative change is left out (Change)


@dataclass(frozen=True)
class Change:
    """One figure of a run against the first run: ``delta`` = run − first, ``relative`` =
    delta / first (None when the first is 0, or so near 0 that the ratio passes ±1,000 %:
    +202,857.7 % of a near-zero idle says only that the first run had almost none)."""

    delta: float
    relative: float | None


@dataclass(frozen=True)
class TypicalStep:
    """One real step window (metrics.md §18): its partition (§3) adds up to ``window_ns``."""

    rank: int
    step: int | None  # None: a trace without steps, its analysis window
    window_ns: int
    compute_ns: int
    exposed_comm_ns: int
    exposed_memory_ns: int
    idle_ns: int
    comm_ns: int
    busy_pct: float | None
    compute_pct: float | None
    exposed_comm_pct: float | None
    exposed_memory_pct: float | None
    idle_pct: float | None
    exposed_comm_by_type_ns: dict[str, int]
    exposed_comm_by_type_pct: dict[str, float]
    # Σ exposed per type − exposed comm: time two types were exposed at once (two streams)
    types_overlap_ns: int
    idle_by_cause_ns: dict[str, int] | None  # GPU timelines (§10); adds up to idle_ns
    idle_by_cause_pct: dict[str, float] | None  # each cause's share of the window


@dataclass(frozen=True)
class ComparedRun:
    """One run's row of the table (metrics.md §18)."""

    label: str
    source: str
    world_size: int  # the run's world size, else its analyzed ranks (world_size_known False)
    world_size_known: bool
    ranks_analyzed: int
    steps: tuple[int, ...]  # the steps its step time is taken over (§8)
    typical_steps: tuple[int, ...]  # the steps its typical step was chosen from
    step_time_ns: int | None  # §8, as analyze prints it
    tokens_per_step: int | None
    tokens_per_s: float | None
    tokens_per_s_per_gpu: float | None
    scaling_efficiency: float | None  # a fraction; the first run is 1.0
    scaling_efficiency_missing: str | None
    mfu: float | None  # a fraction in 0–1
    mfu_missing: str | None  # why there is none (no FLOPs, no peak, or impossible)
    typical: TypicalStep | None
    straggler_recoverable_pct: float | None
    straggler_estimate: str | None  # "replay" / "first-order"
    avg_power_w: float | None
    energy_per_step_j: float | None
    tokens_per_j: float | None
    flops_per_token: float | None
    partial: bool
    changes: dict[str, Change] = field(default_factory=dict)  # against the first run


@dataclass(frozen=True)
class Decomposition:
    """Δ typical step = Δcompute + Δexposed comm + Δexposed memory + Δidle, exactly;
    Δexposed comm = Σ Δexposed per type − Δtypes overlap; Δidle = Σ Δidle per cause."""

    delta_step_ns: int
    delta_compute_ns: int
    delta_exposed_comm_ns: int
    delta_exposed_memory_ns: int
    delta_idle_ns: int
    delta_exposed_comm_by_type_ns: dict[str, int]
    delta_types_overlap_ns: int
    delta_idle_by_cause_ns: dict[str, int] | None


@dataclass(frozen=True)
class CollectiveFigures:
    """One collective row of one run, per step and member rank (metrics.md §18)."""

    calls_per_step: float
    time_per_step_ns: float  # kernel time, waiting included
    transfer_per_step_ns: float | None  # §6 transfer: moving data (instance rows only)
    bytes_median: float | None
    busbw_gbps: float | None  # §7, median over instances
    # time − transfer: waiting for the other ranks and starting up (instance rows only)
    wait_per_step_ns: float | None = None


@dataclass(frozen=True)
class CollectiveChange:
    coll_type: str
    group: str  # "world", "N-rank groups"; "all groups" at the type level
    size_bucket: str  # §7's buckets, "size unknown"; "all sizes" at the type level
    base: CollectiveFigures | None  # None: not in the first run of the pair
    run: CollectiveFigures | None
    delta_time_per_step_ns: float
    delta_calls_per_step: float
    # "changed", "same" (calls and time per step equal), "new" (not in the first run),
    # "gone" (not in the run)
    status: str = "changed"


@dataclass(frozen=True)
class CollectiveDiff:
    level: str  # "instance" (type, group, size bucket) or "type"
    rows: tuple[CollectiveChange, ...]  # largest |Δ time per step| first
    note: str | None = None


@dataclass(frozen=True)
class KernelChange:
    """One kernel name in two runs (metrics.md §18), per step of each run's median rank; the
    pairs are (first run, run)."""

    name: str
    kernel_class: str  # "compute", "memory", or the collective type of a comm kernel
    status: str  # "changed", "new" (not in the first run), "gone" (not in the run)
    calls: tuple[float | None, float | None]  # per step; None: not in that run
    time_ns: tuple[float | None, float | None]  # per step, the calls' durations summed
    delta_ns: float  # time per step: run − first (a missing side counts 0)
    # per step, the part of time_ns on the step's partition (§3); None: not in that run, or
    # a document written before exposed times were kept
    exposed_ns: tuple[float | None, float | None] = (None, None)
    delta_exposed_ns: float | None = None  # run − first (a missing side counts 0)
    # 100 · delta_exposed_ns / KernelDiff.step_change_ns: the share of the step change it
    # explains; None without exposed times, without a step change, or past ±100 %
    step_change_share_pct: float | None = None
    paired_by: str | None = None  # "name", "family" (template arguments…); None: new / gone
    baseline_name: str | None = None  # paired by family: the first run's name


@dataclass(frozen=True)
class KernelDiff:
    changes: tuple[KernelChange, ...]  # largest |delta_ns| first; unchanged kernels left out
    missing: str | None  # why there is no diff by kernel
    # the kernel tables' rank's mean step window, run − first, over the steps read
    step_change_ns: float | None = None
    # step_change_ns − Σ delta_exposed_ns: what no kernel of the table holds (idle, and
    # unlinked work); with the kernels' exposed changes it adds up to the step change
    delta_not_kernels_ns: float | None = None
    note: str | None = None


@dataclass(frozen=True)
class PairComparison:
    """Run ``run`` against run ``baseline`` (indices into ``Comparison.runs``)."""

    baseline: int
    run: int
    delta_step_time_ns: int | None  # §8 step time
    decomposition: Decomposition | None
    # Δ step time (§8) − Δ typical step: what the partition of one step window does not hold
    # (the slowest rank's CPU span against the median rank's GPU window, gaps between steps)
    unpartitioned_ns: int | None
    collectives: CollectiveDiff
    kernels: KernelDiff
    missing: str | None = None  # why there is no decomposition


@dataclass(frozen=True)
class ProjectionCheck:
    """The first run's projection (§11) at another run's world size, against that run."""

    run: int
    world_size: int
    projected_step_ns: int
    measured_step_ns: int | None  # the run's typical step window (the projection's kind)
    step_error_pct: float | None
    projected_exposed_comm_ns: int
    measured_exposed_comm_ns: int | None
    exposed_comm_error_pct: float | None
    projected_exposed_comm_by_type_ns: dict[str, int]
    measured_exposed_comm_by_type_ns: dict[str, int]
    projected_relative_throughput: float
    measured_relative_throughput: float | None  # from the §8 step times
    throughput_error_pct: float | None
    projected_mfu: float | None
    measured_mfu: float | None


@dataclass(frozen=True)
class ProjectionComparison:
    measured_world: int | None
    scaling: str | None
    rows: tuple[ProjectionCheck, ...]
    missing: str | None  # why no run can be checked
    note: str | None = None


@dataclass(frozen=True)
class Comparison:
    scaling: str  # "strong" / "weak"
    order: str  # "world size" / "as given"
    compared_steps: tuple[int, ...] | None  # the steps every run shares, when used
    runs: tuple[ComparedRun, ...]
    pairs: tuple[PairComparison, ...]  # each run against the first
    projection: ProjectionComparison
    notes: tuple[str, ...]
    warnings: tuple[str, ...] = ()

    @property
    def partial(self) -> bool:
        return any(r.partial for r in self.runs)


def compare(
    records: Sequence[RunRecord], weak: bool = False, keep_order: bool = False
) -> Comparison:
    """``records``: two or more runs; records by world size (stable) unless ``keep_order``."""
    if len(records) < 2:
        raise ValueError("a comparison needs two or more runs")
    records = ordered(records, keep_order)
    notes: list[str] = []
    shared = _shared_steps(records, notes)
    typicals = [_typical(r, shared) for r in records]
    same_model = _same_model(records, notes)
    _same_framework(records, notes)
    _token_notes(records, weak, notes)
    runs = [
        _run_figures(r, t, records[0], shared, weak, same_model)
        for r, t in zip(records, typicals, strict=True)
    ]
    runs = [replace(r, changes=_changes(runs[0], r)) if i else r for i, r in enumerate(runs)]
    pairs = tuple(_pair(records, runs, 0, k) for k in range(1, len(records)))
    if any(p.collectives.level == "type" for p in pairs) and any(
        r.collectives is None for r in records
    ):
        notes.append(
            "a saved analyze JSON written before collective_steps holds no collective "
            "instances: collectives are compared by type (their time in the partition, "
            "metrics.md §3; analyze the run again to compare them by instance)"
        )
    overlapping = [r.label for r in runs if r.typical is not None and r.typical.types_overlap_ns]
    if overlapping:
        notes.append(
            "collective types were exposed at the same time (two streams) in "
            + ", ".join(overlapping)
            + ": their exposed times add up to more than the exposed communication "
            "(types_overlap_ns makes up the difference)"
        )
    notes += [
        f"{r.label}: {r.world_size} ranks analyzed, world size unknown"
        for r in runs
        if not r.world_size_known
    ]
    warnings = tuple(f"{r.label}: {w}" for r in records for w in r.warnings)
    return Comparison(
        scaling="weak" if weak else "strong",
        order="as given" if keep_order else "world size",
        compared_steps=shared,
        runs=tuple(runs),
        pairs=pairs,
        projection=_projection(records, runs, weak),
        notes=tuple(notes),
        warnings=warnings,
    )


def ordered(records: Sequence[RunRecord], keep_order: bool = False) -> list[RunRecord]:
    """By world size (stable: runs of one size keep the order given), or as given."""
    return list(records) if keep_order else sorted(records, key=_world)


def _world(r: RunRecord) -> int:
    return r.world_size or r.ranks_analyzed


def _shared_steps(records: Sequence[RunRecord], notes: list[str]) -> tuple[int, ...] | None:
    """The step-time steps every run shares, when the runs differ in them; None: each run
    uses its own (they are the same, or nothing is shared)."""
    sets = [set(r.rate_steps) for r in records if r.rate_steps]
    if len(sets) < len(records) or all(s == sets[0] for s in sets):
        return None
    common = set.intersection(*sets)
    if not common:
        notes.append(
            "the runs share no profiled step: each run's typical step is chosen from its own steps"
        )
        return None
    steps = tuple(sorted(common))
    notes.append(
        f"the runs profiled different steps: typical steps and collectives are compared on "
        f"steps {_steps_text(steps)}, the ones every run has; step time, MFU, tokens, energy "
        "and the straggler share are each run's own (metrics.md §8)"
    )
    return steps


def _steps_text(steps: Sequence[int]) -> str:
    return ", ".join(str(s) for s in steps)


def _typical(record: RunRecord, shared: tuple[int, ...] | None) -> TypicalStep | None:
    candidates = set(shared if shared is not None else record.rate_steps)
    by_rank: dict[int, list[StepRecord]] = {}
    for s in record.steps:
        by_rank.setdefault(s.rank, []).append(s)
    order = sorted(by_rank, key=lambda r: (r != record.median_rank, r))
    for rank in order:
        steps = by_rank[rank]
        usable = [s for s in steps if s.step in candidates] if candidates else steps
        if usable:
            ranked = sorted(usable, key=lambda s: (s.figures.window_ns, s.step or 0))
            return _typical_of(ranked[(len(ranked) - 1) // 2])
    return None


def _typical_of(s: StepRecord) -> TypicalStep:
    f = s.figures
    by_type: dict[str, int] = {}
    for t in s.by_type:
        by_type[t.coll_type] = by_type.get(t.coll_type, 0) + t.exposed_comm_ns

    def share(ns: int) -> float | None:
        return min(100.0, max(0.0, 100.0 * ns / f.window_ns)) if f.window_ns else None

    causes = (
        {c: s.idle_by_cause.get(c, 0) for c in IDLE_CAUSES} if s.idle_by_cause is not None else None
    )
    return TypicalStep(
        rank=s.rank,
        step=s.step,
        window_ns=f.window_ns,
        compute_ns=f.compute_ns,
        exposed_comm_ns=f.exposed_comm_ns,
        exposed_memory_ns=f.exposed_memory_ns,
        idle_ns=f.idle_ns,
        comm_ns=f.comm_ns,
        busy_pct=share(f.window_ns - f.idle_ns),
        compute_pct=share(f.compute_ns),
        exposed_comm_pct=share(f.exposed_comm_ns),
        exposed_memory_pct=share(f.exposed_memory_ns),
        idle_pct=share(f.idle_ns),
        exposed_comm_by_type_ns=dict(sorted(by_type.items())),
        exposed_comm_by_type_pct={
            t: v for t, ns in sorted(by_type.items()) if (v := share(ns)) is not None
        },
        types_overlap_ns=max(0, sum(by_type.values()) - f.exposed_comm_ns),
        idle_by_cause_ns=causes,
        idle_by_cause_pct=None
        if causes is None
        else {c: v for c, ns in causes.items() if (v := share(ns)) is not None},
    )


def _same_framework(records: Sequence[RunRecord], notes: list[str]) -> None:
    """Runs whose traces name different frameworks (metrics.md §14a): a before / after of a
    change of framework is a fair question, but it should be said."""
    known = [(r.label, r.frameworks) for r in records if r.frameworks]
    if len(known) < 2 or len({frameworks for _, frameworks in known}) == 1:
        return
    notes.append(
        "the runs were written by different frameworks ("
        + "; ".join(f"{label}: {' + '.join(frameworks)}" for label, frameworks in known)
        + "): their findings advise different knobs (metrics.md §14a)"
    )


def _same_model(records: Sequence[RunRecord], notes: list[str]) -> bool:
    known = [(r.label, r.model.flops_per_token) for r in records if r.model.flops_per_token]
    if len(known) < 2:
        return True
    base_label, base = known[0]
    differ = [(label, v) for label, v in known[1:] if abs(v - base) > _SAME_MODEL_TOLERANCE * base]
    if differ:
        notes.append(
            f"the runs differ in model (FLOPs per token: {base_label} {base:.4g}, "
            + ", ".join(f"{label} {v:.4g}" for label, v in differ)
            + "): times, MFU and the decomposition are compared as measured; scaling efficiency "
            "is left out (it needs the same model)"
        )
    return not differ


def _token_notes(records: Sequence[RunRecord], weak: bool, notes: list[str]) -> None:
    base = records[0]
    t1 = base.model.tokens_per_step
    if not t1:
        return
    for r in records[1:]:
        tk = r.model.tokens_per_step
        if not tk:
            continue
        expected = t1 * _world(r) / _world(base) if weak else t1
        if abs(tk - expected) > 1e-9 * expected:
            kind = "weak" if weak else "strong"
            other = "--weak" if not weak else "strong scaling (no --weak)"
            notes.append(
                f"{r.label}: {tk:,} tokens per step against {t1:,} in {base.label}: not {kind} "
                f"scaling of the same batch; with the per-rank batch kept, use {other}"
            )


def _run_figures(
    r: RunRecord,
    typical: TypicalStep | None,
    first: RunRecord,
    shared: tuple[int, ...] | None,
    weak: bool,
    same_model: bool,
) -> ComparedRun:
    world = _world(r)
    tps = r.tokens_per_s
    efficiency, missing = _efficiency(r, first, weak, same_model)
    return ComparedRun(
        label=r.label,
        source=r.source,
        world_size=world,
        world_size_known=r.world_size is not None,
        ranks_analyzed=r.ranks_analyzed,
        steps=r.rate_steps,
        typical_steps=shared if shared is not None else r.rate_steps,
        step_time_ns=r.step_time_ns,
        tokens_per_step=r.model.tokens_per_step,
        tokens_per_s=tps,
        tokens_per_s_per_gpu=tps / r.device_count if tps is not None and r.device_count else None,
        scaling_efficiency=efficiency,
        scaling_efficiency_missing=missing,
        mfu=r.mfu if r.mfu is not None and r.mfu <= 1 else None,
        mfu_missing=(
            "it needs the model's FLOPs and the devices' peak"
            if r.mfu is None
            else f"{100 * r.mfu:.1f} % is over 100 %: the model FLOPs are too high (per step, "
            "for the whole job)"
            if r.mfu > 1
            else None
        ),
        typical=typical,
        straggler_recoverable_pct=r.recoverable_pct,
        straggler_estimate=r.recoverable_by,
        avg_power_w=r.avg_power_w,
        energy_per_step_j=r.energy_per_step_j,
        tokens_per_j=r.tokens_per_j,
        flops_per_token=r.model.flops_per_token,
        partial=r.partial,
    )


def _efficiency(
    r: RunRecord, first: RunRecord, weak: bool, same_model: bool
) -> tuple[float | None, str | None]:
    """Strong: (t₁·N₁)/(tₖ·Nₖ); weak: t₁/tₖ; t the §8 step time, N the world size."""
    if not same_model:
        return None, "the runs differ in model"
    if not r.step_time_ns or not first.step_time_ns:
        return None, "no step time (it needs ProfilerStep annotations)"
    if weak:
        return first.step_time_ns / r.step_time_ns, None
    return (first.step_time_ns * _world(first)) / (r.step_time_ns * _world(r)), None


def _changes(first: ComparedRun, run: ComparedRun) -> dict[str, Change]:
    a, b = _flat(first), _flat(run)
    out = {}
    for name in a.keys() | b.keys():
        x, y = a.get(name), b.get(name)
        if x is None and y is None:
            continue
        if (x is None) != (y is None):
            # present in one run only: an exposed type or an idle cause counts as 0 there
            if not name.startswith(("exposed_comm.", "idle.")):
                continue
            x, y = x or 0.0, y or 0.0
        assert x is not None and y is not None
        relative = (y - x) / x if x else None
        if relative is not None and abs(relative) > RELATIVE_LIMIT:
            relative = None  # a first run with (almost) none of it: the difference says more
        out[name] = Change(y - x, relative)
    return dict(sorted(out.items()))


def _flat(r: ComparedRun) -> dict[str, float]:
    """The figures a change is given for, by name (the JSON's names)."""
    values: dict[str, float | None] = {
        "step_time_ns": r.step_time_ns,
        "tokens_per_s": r.tokens_per_s,
        "tokens_per_s_per_gpu": r.tokens_per_s_per_gpu,
        "mfu": r.mfu,
        "straggler_recoverable_pct": r.straggler_recoverable_pct,
        "avg_power_w": r.avg_power_w,
        "energy_per_step_j": r.energy_per_step_j,
        "tokens_per_j": r.tokens_per_j,
    }
    t = r.typical
    if t is not None:
        values |= {
            "typical_step_ns": t.window_ns,
            "busy_pct": t.busy_pct,
            "compute_ns": t.compute_ns,
            "exposed_comm_ns": t.exposed_comm_ns,
            "exposed_memory_ns": t.exposed_memory_ns,
            "idle_ns": t.idle_ns,
        }
        values |= {f"exposed_comm.{k}": v for k, v in t.exposed_comm_by_type_ns.items()}
        values |= {f"idle.{k}": v for k, v in (t.idle_by_cause_ns or {}).items() if v}
    return {k: float(v) for k, v in values.items() if v is not None}


def decompose(base: TypicalStep, run: TypicalStep) -> Decomposition:
    """The parts' differences: they add up to the windows' difference exactly (§3 holds for
    each window)."""
    types = sorted(base.exposed_comm_by_type_ns.keys() | run.exposed_comm_by_type_ns.keys())
    causes = (
        {c: (run.idle_by_cause_ns.get(c, 0) - base.idle_by_cause_ns.get(c, 0)) for c in IDLE_CAUSES}
        if base.idle_by_cause_ns is not None and run.idle_by_cause_ns is not None
        else None
    )
    return Decomposition(
        delta_step_ns=run.window_ns - base.window_ns,
        delta_compute_ns=run.compute_ns - base.compute_ns,
        delta_exposed_comm_ns=run.exposed_comm_ns - base.exposed_comm_ns,
        delta_exposed_memory_ns=run.exposed_memory_ns - base.exposed_memory_ns,
        delta_idle_ns=run.idle_ns - base.idle_ns,
        delta_exposed_comm_by_type_ns={
            t: run.exposed_comm_by_type_ns.get(t, 0) - base.exposed_comm_by_type_ns.get(t, 0)
            for t in types
        },
        delta_types_overlap_ns=run.types_overlap_ns - base.types_overlap_ns,
        delta_idle_by_cause_ns=causes,
    )


def _pair(
    records: Sequence[RunRecord], runs: Sequence[ComparedRun], i: int, k: int
) -> PairComparison:
    a, b = runs[i], runs[k]
    decomposition = (
        decompose(a.typical, b.typical) if a.typical is not None and b.typical is not None else None
    )
    delta_step = (
        b.step_time_ns - a.step_time_ns
        if a.step_time_ns is not None and b.step_time_ns is not None
        else None
    )
    return PairComparison(
        baseline=i,
        run=k,
        delta_step_time_ns=delta_step,
        decomposition=decomposition,
        unpartitioned_ns=(
            delta_step - decomposition.delta_step_ns
            if delta_step is not None and decomposition is not None
            else None
        ),
        collectives=collective_diff(records[i], records[k], a.typical_steps, b.typical_steps),
        kernels=kernel_diff(
            records[i].kernels,
            records[k].kernels,
            a.typical_steps,
            b.typical_steps,
            (
                table_step_ns(records[i], a.typical_steps),
                table_step_ns(records[k], b.typical_steps),
            ),
        ),
        missing=None if decomposition is not None else "a run has no analyzed step window",
    )


# --- the diff by collective --------------------------------------------------------------------

_ROW_KEYS = ["coll_type", "group", "size_bucket"]
_ROW_VALUES = [
    "calls_per_step",
    "time_per_step_ns",
    "transfer_per_step_ns",
    "bytes_median",
    "busbw_gbps",
]


def collective_diff(
    base: RunRecord, run: RunRecord, base_steps: Sequence[int], run_steps: Sequence[int]
) -> CollectiveDiff:
    """By (type, group, size bucket) from the matched instances when both runs have them, else
    by type from the partition; rows only in one run are kept (the other side None)."""
    note = None
    if _has_instances(base) and _has_instances(run):
        assert base.collectives is not None and run.collectives is not None
        a = instance_table(base.collectives, base_steps)
        b = instance_table(run.collectives, run_steps)
        level = "instance"
    else:
        a, b = type_table(base.steps, base_steps), type_table(run.steps, run_steps)
        level = "type"
        lacking = [
            r.label for r in (base, run) if r.collectives is not None and not _has_instances(r)
        ]
        if lacking:
            note = (
                f"{', '.join(lacking)}: no matched collective instances (one rank, a CPU "
                "timeline, or traces without collective metadata): compared by type"
            )
    joined = diff_table(a, b, _ROW_KEYS, _ROW_VALUES, "time_per_step_ns")
    rows = tuple(
        CollectiveChange(
            coll_type=row["coll_type"],
            group=row["group"],
            size_bucket=row["size_bucket"],
            base=_figures(row, "base"),
            run=_figures(row, "run"),
            delta_time_per_step_ns=row["delta_time_per_step_ns"],
            delta_calls_per_step=(row["calls_per_step_run"] or 0.0)
            - (row["calls_per_step_base"] or 0.0),
            status=_row_status(row),
        )
        for row in joined.iter_rows(named=True)
    )
    return CollectiveDiff(level, rows, note)


def _has_instances(record: RunRecord) -> bool:
    """Matched instances to diff by group and size (a run without communication has none to
    have)."""
    if record.collectives is None:
        return False
    return len(record.collectives) > 0 or not any(s.by_type for s in record.steps)


def _row_status(row: dict[str, Any]) -> str:
    if row["calls_per_step_base"] is None:
        return "new"
    if row["calls_per_step_run"] is None:
        return "gone"
    same = all(row[f"{v}_base"] == row[f"{v}_run"] for v in ("calls_per_step", "time_per_step_ns"))
    return "same" if same else "changed"


def _figures(row: dict[str, Any], side: str) -> CollectiveFigures | None:
    if row[f"calls_per_step_{side}"] is None:
        return None
    values = {v: row[f"{v}_{side}"] for v in _ROW_VALUES}
    transfer = values["transfer_per_step_ns"]
    wait = None if transfer is None else max(0.0, values["time_per_step_ns"] - transfer)
    return CollectiveFigures(**values, wait_per_step_ns=wait)


def instance_table(rows: Sequence[CollectiveStep], steps: Sequence[int]) -> pl.DataFrame:
    """Per (type, group, size bucket), per step and member rank: calls, kernel time and
    transfer time; the instances' median size and §7 bus bandwidth. ``rows``: the Report's
    ``collective_steps``; ``steps``: the steps compared (none: every step they have)."""
    wanted = set(steps)
    used = [r for r in rows if r.step in wanted] if steps else list(rows)
    n_steps = max(1, len(steps)) if steps else max(1, len({r.step for r in rows}))
    if not used:
        return _empty_table()
    by_key: dict[tuple[str, str, str], list[CollectiveStep]] = {}
    for r in used:
        by_key.setdefault((r.coll_type, r.group, r.size_bucket), []).append(r)
    out = []
    for (coll_type, group, bucket), parts in by_key.items():
        per = len({rank for r in parts for rank in r.ranks}) * n_steps
        out.append(
            {
                "coll_type": coll_type,
                "group": group,
                "size_bucket": bucket,
                "calls_per_step": sum(r.kernels for r in parts) / per,
                "time_per_step_ns": sum(r.kernel_ns for r in parts) / per,
                "transfer_per_step_ns": sum(r.transfer_ns for r in parts) / per,
                "bytes_median": pl.Series(
                    [b for r in parts for b in r.bytes], dtype=pl.Int64
                ).median(),
                "busbw_gbps": pl.Series(
                    [v for r in parts for v in r.busbw_gbps], dtype=pl.Float64
                ).median(),
            }
        )
    return pl.DataFrame(
        out,
        schema={**dict.fromkeys(_ROW_KEYS, pl.String), **dict.fromkeys(_ROW_VALUES, pl.Float64)},
    )


def type_table(steps: Sequence[StepRecord], chosen: Sequence[int]) -> pl.DataFrame:
    """Per collective type, per rank and step of the partition (§3): kernels and |U(comm_t)|."""
    wanted = set(chosen)
    records = [s for s in steps if not wanted or s.step in wanted]
    if not records:
        return _empty_table()
    frame = pl.DataFrame(
        {
            "coll_type": [t.coll_type for s in records for t in s.by_type],
            "kernels": [t.kernels for s in records for t in s.by_type],
            "comm_ns": [t.comm_ns for s in records for t in s.by_type],
        },
        schema={"coll_type": pl.String, "kernels": pl.Int64, "comm_ns": pl.Int64},
    )
    count = len(records)
    return (
        frame.group_by("coll_type")
        .agg(
            (pl.col("kernels").sum() / count).alias("calls_per_step"),
            (pl.col("comm_ns").sum() / count).alias("time_per_step_ns"),
        )
        .select(
            "coll_type",
            pl.lit(TYPE_LEVEL_GROUP).alias("group"),
            pl.lit(TYPE_LEVEL_BUCKET).alias("size_bucket"),
            "calls_per_step",
            "time_per_step_ns",
            *(pl.lit(None, dtype=pl.Float64).alias(v) for v in _ROW_VALUES[2:]),
        )
    )


def _empty_table() -> pl.DataFrame:
    return pl.DataFrame(
        schema={**dict.fromkeys(_ROW_KEYS, pl.String), **dict.fromkeys(_ROW_VALUES, pl.Float64)}
    )


def diff_table(
    base: pl.DataFrame, run: pl.DataFrame, keys: list[str], values: list[str], by: str
) -> pl.DataFrame:
    """Rows of two tables side by side (``<value>_base``, ``<value>_run``; a row one table lacks
    has nulls there), with ``delta_<by>`` (a missing side counts 0), largest |delta| first."""
    a = base.rename({v: f"{v}_base" for v in values})
    b = run.rename({v: f"{v}_run" for v in values})
    joined = a.join(b, on=keys, how="full", coalesce=True)
    delta = pl.col(f"{by}_run").fill_null(0.0) - pl.col(f"{by}_base").fill_null(0.0)
    return (
        joined.with_columns(delta.alias(f"delta_{by}"))
        .with_columns(pl.col(f"delta_{by}").abs().alias("_size"))
        .sort(["_size", *keys], descending=[True, *([False] * len(keys))])
        .drop("_size")
    )


KERNEL_SCHEMA: dict[str, pl.DataType] = {
    "name": pl.String(),
    "kernel_class": pl.String(),
    "calls": pl.Float64(),
    "time_ns": pl.Float64(),
    "exposed_ns": pl.Float64(),
    "first": pl.Int64(),
}
SHARE_PAST_CHANGE = (
    "shares of the step change past ±100 % are left out (null): other kernels, or idle, "
    "moved the other way"
)


def _used_columns(kernels: RunKernelSteps, steps: Sequence[int]) -> list[int]:
    """The table's columns of the steps compared that the rank has (none of them: all)."""
    wanted = set(steps)
    return [i for i, s in enumerate(kernels.steps) if s in wanted] or list(
        range(len(kernels.steps))
    )


def kernel_table(kernels: RunKernelSteps, steps: Sequence[int]) -> pl.DataFrame:
    """Per kernel name (the whole name), per step of the steps compared that the rank has (none
    of them: each of its steps): its calls, summed time and exposed time (null in a document
    written before it), and ``first``, its place in the rank's table (the order names first
    ran). Repeated calls of a name in a step add up, wherever they occur in it."""
    used = _used_columns(kernels, steps)
    n = max(1, len(used))
    sums: dict[str, list[float]] = {}
    classes: dict[str, tuple[int, str]] = {}
    first: dict[str, int] = {}
    exposed_known = all(k.exposed_ns is not None for k in kernels.kernels)
    for place, k in enumerate(kernels.kernels):
        calls = sum(k.calls[i] for i in used)
        if not calls:
            continue  # not in the steps compared
        time = sum(k.time_ns[i] for i in used)
        exposed = sum(k.exposed_ns[i] for i in used) if k.exposed_ns is not None else 0
        row = sums.setdefault(k.name, [0.0, 0.0, 0.0])
        row[0] += calls
        row[1] += time
        row[2] += exposed
        first.setdefault(k.name, place)
        cls = (k.coll_type or "comm") if k.cls == "comm" else k.cls
        # a name in two classes (rare): the class it spends the most time in
        if k.name not in classes or classes[k.name][0] < time:
            classes[k.name] = (time, cls)
    return pl.DataFrame(
        {
            "name": list(sums),
            "kernel_class": [classes[name][1] for name in sums],
            "calls": [c / n for c, _, _ in sums.values()],
            "time_ns": [t / n for _, t, _ in sums.values()],
            "exposed_ns": [e / n if exposed_known else None for _, _, e in sums.values()],
            "first": [first[name] for name in sums],
        },
        schema=KERNEL_SCHEMA,
    )


def table_step_ns(record: RunRecord, steps: Sequence[int]) -> float | None:
    """The mean step window of the kernel table's rank over the steps its table is read on
    (``kernel_table``): the step the kernels' exposed times are a part of."""
    if record.kernels is None:
        return None
    table = record.kernels
    on = {table.steps[i] for i in _used_columns(table, steps)}
    windows = [s.figures.window_ns for s in record.steps if s.rank == table.rank and s.step in on]
    return sum(windows) / len(windows) if windows else None


def kernel_family(name: str) -> str:
    """A kernel's name without what a build or a dtype changes and the kernel keeps: template
    arguments (``<…>``, nested), the parameter list, a leading ``void`` and a launch-bounds
    suffix (``__launch_bounds__(256)``, ``_lb256``)."""
    out: list[str] = []
    depth = 0
    for ch in name:
        if ch == "<":
            depth += 1
        elif ch == ">" and depth:
            depth -= 1
        elif not depth:
            out.append(ch)
    bare = _LAUNCH_BOUNDS.sub("", "".join(out).strip())
    return _without_parameters(bare).removeprefix("void ").strip()


def _without_parameters(name: str) -> str:
    """The name without its trailing parameter list, ``(…)`` balanced: ``ns::(anonymous
    namespace)::k(float*, int)`` keeps its namespace."""
    if not name.endswith(")"):
        return name
    depth = 0
    for i in range(len(name) - 1, -1, -1):
        depth += {")": 1, "(": -1}.get(name[i], 0)
        if depth == 0:
            return name[:i].rstrip() if i else name
    return name


_LAUNCH_BOUNDS = re.compile(r"(?:\s*__launch_bounds__\s*\(.*\)|_lb_?\d+)$")


def kernel_diff(
    base: RunKernelSteps | None,
    run: RunKernelSteps | None,
    base_steps: Sequence[int] = (),
    run_steps: Sequence[int] = (),
    step_ns: tuple[float | None, float | None] = (None, None),
) -> KernelDiff:
    """The diff by kernel (metrics.md §18): the two runs' kernel tables paired by whole name,
    so that a kernel inserted anywhere in the step is ``new`` and leaves the pairing of the
    rest as it was; then a name left unpaired in each run whose family (``kernel_family``) is
    the same, in the order they first ran (``paired_by`` "family"). A name with the same
    calls, time and exposed time in both is left out (a run against itself has no change).
    ``step_ns``: each run's mean step window of its table's rank over the steps read
    (``table_step_ns``), the step change the exposed times are a share of."""
    if base is None or run is None:
        return KernelDiff((), KERNELS_MISSING)
    a = kernel_table(base, base_steps)
    b = kernel_table(run, run_steps)
    pairs = _pair_by_name(a, b) + _pair_by_family(a, b)
    step_change = (
        step_ns[1] - step_ns[0] if step_ns[0] is not None and step_ns[1] is not None else None
    )
    changes = [c for p in pairs if (c := _change(*p, step_change)) is not None]
    changes.sort(key=lambda c: (-abs(c.delta_ns), c.name))
    shares = [c.step_change_share_pct for c in changes]
    exposed = any(c.exposed_ns != (None, None) for c in changes)
    left_out = bool(exposed and step_change) and any(
        s is None and c.delta_exposed_ns is not None for s, c in zip(shares, changes, strict=True)
    )
    known = [c.delta_exposed_ns for c in changes]
    rest = (
        step_change - sum(d or 0.0 for d in known)
        if step_change is not None and all(d is not None for d in known)
        else None
    )
    return KernelDiff(
        tuple(changes),
        None,
        step_change_ns=step_change,
        delta_not_kernels_ns=rest,
        note=SHARE_PAST_CHANGE if left_out else None,
    )


_Side = dict[str, Any] | None


def _pair_by_name(a: pl.DataFrame, b: pl.DataFrame) -> list[tuple[_Side, _Side, str]]:
    mine = {r["name"]: r for r in b.iter_rows(named=True)}
    return [(r, mine[r["name"]], "name") for r in a.iter_rows(named=True) if r["name"] in mine]


def _pair_by_family(a: pl.DataFrame, b: pl.DataFrame) -> list[tuple[_Side, _Side, str]]:
    """Names in one run only, paired within their class and family in the order they first
    ran; the rest new or gone."""
    names_b = set(b["name"].to_list())
    names_a = set(a["name"].to_list())
    gone = sorted(
        (r for r in a.iter_rows(named=True) if r["name"] not in names_b), key=lambda r: r["first"]
    )
    new = sorted(
        (r for r in b.iter_rows(named=True) if r["name"] not in names_a), key=lambda r: r["first"]
    )
    families: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in new:
        families.setdefault((r["kernel_class"], kernel_family(r["name"])), []).append(r)
    out: list[tuple[_Side, _Side, str]] = []
    for r in gone:
        waiting = families.get((r["kernel_class"], kernel_family(r["name"])))
        if waiting:
            out.append((r, waiting.pop(0), "family"))
        else:
            out.append((r, None, "name"))
    paired = {id(run) for _, run, how in out if how == "family"}
    out += [(None, r, "name") for r in new if id(r) not in paired]
    return out


def _change(base: _Side, run: _Side, how: str, step_change: float | None) -> KernelChange | None:
    def get(side: _Side, key: str) -> float | None:
        return None if side is None else side[key]

    calls = (get(base, "calls"), get(run, "calls"))
    time = (get(base, "time_ns"), get(run, "time_ns"))
    exposed = (get(base, "exposed_ns"), get(run, "exposed_ns"))
    if base is None:
        status = "new"
    elif run is None:
        status = "gone"
    elif calls[0] == calls[1] and time[0] == time[1] and exposed[0] == exposed[1] and how == "name":
        return None
    else:
        status = "changed"
    delta_exposed = None
    if (base is None or exposed[0] is not None) and (run is None or exposed[1] is not None):
        delta_exposed = (exposed[1] or 0.0) - (exposed[0] or 0.0)
    share = None
    if delta_exposed is not None and step_change:
        share = 100.0 * delta_exposed / step_change
        share = share if abs(share) <= 100.0 else None
    named = run if run is not None else base
    assert named is not None
    return KernelChange(
        name=named["name"],
        kernel_class=named["kernel_class"],
        status=status,
        calls=calls,
        time_ns=time,
        delta_ns=(time[1] or 0.0) - (time[0] or 0.0),
        exposed_ns=exposed,
        delta_exposed_ns=delta_exposed,
        step_change_share_pct=share,
        paired_by=how if base is not None and run is not None else None,
        baseline_name=base["name"] if how == "family" and base is not None else None,
    )


# --- the first run's projection against the others ---------------------------------------------


def _projection(
    records: Sequence[RunRecord], runs: Sequence[ComparedRun], weak: bool
) -> ProjectionComparison:
    p = records[0].projection
    if p is None:
        return ProjectionComparison(None, None, (), f"{records[0].label}: not projected")
    if isinstance(p, str):
        return ProjectionComparison(None, None, (), f"{records[0].label}: {p}")
    return _checks(p, runs, weak)


def _checks(p: ProjectionRecord, runs: Sequence[ComparedRun], weak: bool) -> ProjectionComparison:
    sizes = {s.world_size: s for s in p.sizes[1:]}  # the first row replays the measured size
    first = runs[0]
    rows = []
    for k, r in enumerate(runs[1:], start=1):
        s = sizes.get(r.world_size)
        if s is None or r.world_size == p.measured_world:
            continue
        t = r.typical
        measured_tp = None
        if first.step_time_ns and r.step_time_ns:
            measured_tp = first.step_time_ns / r.step_time_ns
            if weak:
                measured_tp *= r.world_size / first.world_size
        rows.append(
            ProjectionCheck(
                run=k,
                world_size=r.world_size,
                projected_step_ns=s.step_ns,
                measured_step_ns=t.window_ns if t else None,
                step_error_pct=_error(s.step_ns, t.window_ns if t else None),
                projected_exposed_comm_ns=s.exposed_comm_total_ns,
                measured_exposed_comm_ns=t.exposed_comm_ns if t else None,
                exposed_comm_error_pct=_error(
                    s.exposed_comm_total_ns, t.exposed_comm_ns if t else None
                ),
                projected_exposed_comm_by_type_ns=dict(sorted(s.exposed_comm_ns.items())),
                measured_exposed_comm_by_type_ns=t.exposed_comm_by_type_ns if t else {},
                projected_relative_throughput=s.relative_throughput,
                measured_relative_throughput=measured_tp,
                throughput_error_pct=_error(s.relative_throughput, measured_tp),
                projected_mfu=s.mfu,
                measured_mfu=r.mfu,
            )
        )
    missing = note = None
    if not rows:
        missing = (
            f"the projection of {first.label} covers no other run's world size "
            f"(it projected to {', '.join(str(n) for n in sizes) or 'none'})"
        )
    mode = "weak" if weak else "strong"
    if p.scaling != mode:
        note = f"the projection assumed {p.scaling} scaling; the comparison, {mode}"
    return ProjectionComparison(p.measured_world, p.scaling, tuple(rows), missing, note)


def _error(projected: float, measured: float | None) -> float | None:
    if measured is None or measured == 0 or not math.isfinite(projected):
        return None
    return 100.0 * (projected - measured) / measured
