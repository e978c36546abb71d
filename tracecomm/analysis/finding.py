"""The bottom line's data (built by ``analysis.findings``, metrics.md §14): one step as the
ranks spend it (the mean of their shares), and the findings."""

from __future__ import annotations

from typing import Annotated, Literal

from msgspec import Meta

from tracecomm.doc import Doc, NonNegative, Percent, Positive


class Finding(Doc, frozen=True):
    kind: str  # exposed_comm, straggler, stage_imbalance, host_bound, dataloader, sync, …
    severity: Literal["input", "cost", "uncosted"]
    title: str  # what, in one line
    cost_ns: Annotated[
        NonNegative | None,
        Meta(
            description=(
                "per step (over the basis window when step_parts.per_step is false); "
                "null when the traces cannot cost it"
            )
        ),
    ]
    cost_pct: Percent | None  # of the step time (metrics.md §8), 0–100
    recoverable_pct: Percent | None  # the share of the step a fix gives back, when known
    ranks: tuple[int, ...]  # where
    coll_type: str | None
    stage: int | None
    group: str | None
    hosts: tuple[str, ...]
    evidence: tuple[str, ...]  # why
    advice: tuple[str, ...]  # what to try
    section: Annotated[str, Meta(pattern="^metrics\\.md §[0-9]+$")]


class StepParts(Doc, frozen=True):
    """One step as the ranks spend it, as shares of the step time: what the first screen shows
    and what the findings are costed from. Each share is a rank's share of its steps (the gaps
    between steps counted with them), then the mean over ranks: the share of the job's GPU time.
    Means add up, so the parts do: compute + exposed comm + exposed memory + idle is the step,
    and the types' exposed times are the exposed total plus the time two or more types are
    exposed at once (``types_overlap_ns``), within a few ns of rounding."""

    basis: Annotated[
        str,
        Meta(
            description=(
                "what the shares are shares of: the step time (metrics.md §8), or the "
                "window it falls back to without ProfilerStep spans"
            )
        ),
    ]
    per_step: Annotated[
        bool,
        Meta(
            description=(
                "false: the basis is a whole analysis window (the traces hold no "
                "ProfilerStep), and costs are over it, not per step"
            )
        ),
    ]
    step_ns: Positive
    busy_pct: Percent  # 100 - idle_pct
    compute_ns: NonNegative
    compute_pct: Percent
    exposed_comm_ns: NonNegative
    exposed_comm_pct: Percent
    exposed_comm_by_type_ns: dict[str, NonNegative]
    exposed_comm_by_type_pct: dict[str, Percent]
    # Σ exposed_comm_by_type_ns − exposed_comm_ns: exposed time of types running at once
    types_overlap_ns: Annotated[
        NonNegative,
        Meta(
            description=(
                "sum of exposed_comm_by_type_ns - exposed_comm_ns: exposed time during which "
                "two or more types run at once (metrics.md §14)"
            )
        ),
    ]
    comm_by_type_ns: Annotated[
        dict[str, NonNegative], Meta(description="each type's communication, hidden or not")
    ]
    comm_by_type_pct: dict[str, Percent]
    comm_by_type_over_compute: Annotated[
        dict[str, float | None],
        Meta(description="comm_by_type_ns / compute_ns; null without compute"),
    ]
    exposed_memory_ns: NonNegative
    exposed_memory_pct: Percent
    idle_ns: NonNegative
    idle_pct: Percent
