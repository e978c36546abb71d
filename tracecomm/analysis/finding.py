"""The bottom line's data (built by ``analysis.findings``, metrics.md §14): one step as the
median rank spends it, and the findings."""

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
    between steps counted with them), then the median over ranks: so the parts need not add up
    to exactly 100 %."""

    basis: str  # "the step time" (metrics.md §8), or the window it falls back to, named
    per_step: bool  # False: the basis is a whole window (no ProfilerStep), not one step
    step_ns: int
    busy_pct: float  # 100 - idle_pct
    exposed_comm_ns: int
    exposed_comm_pct: float
    exposed_comm_by_type_ns: dict[str, int]
    exposed_comm_by_type_pct: dict[str, float]
    exposed_memory_ns: int
    exposed_memory_pct: float
    idle_ns: int
    idle_pct: float
