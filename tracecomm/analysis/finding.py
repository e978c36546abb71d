"""The bottom line's data (built by ``analysis.findings``, metrics.md §14): one step as the
ranks spend it (the mean of their shares), and the findings."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Finding:
    kind: str  # exposed_comm, straggler, stage_imbalance, host_bound, dataloader, sync, …
    severity: str  # input (fix the inputs first), cost (ranked by cost), uncosted
    title: str  # what, in one line
    cost_ns: int | None  # per step (of the basis: StepParts.per_step); None: cannot tell
    cost_pct: float | None  # of the step time (metrics.md §8), 0–100
    recoverable_pct: float | None  # the share of the step a fix gives back, when known
    ranks: tuple[int, ...]  # where
    coll_type: str | None
    stage: int | None
    group: str | None
    hosts: tuple[str, ...]
    evidence: tuple[str, ...]  # why
    advice: tuple[str, ...]  # what to try
    section: str  # the metrics.md section that defines the figure


@dataclass(frozen=True)
class StepParts:
    """One step as the ranks spend it, as shares of the step time: what the first screen shows
    and what the findings are costed from. Each share is a rank's share of its steps (the gaps
    between steps counted with them), then the mean over ranks: the share of the job's GPU time.
    Means add up, so the parts do: compute + exposed comm + exposed memory + idle is the step,
    and the types' exposed times are the exposed total plus the time two or more types are
    exposed at once (``types_overlap_ns``), within a few ns of rounding."""

    basis: str  # "the step time" (metrics.md §8), or the window it falls back to, named
    per_step: bool  # False: the basis is a whole window (no ProfilerStep), not one step
    step_ns: int
    busy_pct: float  # 100 - idle_pct
    compute_ns: int
    compute_pct: float
    exposed_comm_ns: int
    exposed_comm_pct: float
    exposed_comm_by_type_ns: dict[str, int]
    exposed_comm_by_type_pct: dict[str, float]
    # Σ exposed_comm_by_type_ns − exposed_comm_ns: exposed time of types running at once
    types_overlap_ns: int
    comm_by_type_ns: dict[str, int]  # each type's communication time, hidden or not
    comm_by_type_pct: dict[str, float]
    comm_by_type_over_compute: dict[str, float | None]  # comm_by_type_ns / compute_ns
    exposed_memory_ns: int
    exposed_memory_pct: float
    idle_ns: int
    idle_pct: float
