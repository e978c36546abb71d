"""One rank's values in the Report: what the per-rank unit sends back, the rank's report, its
timeline, and what is missing. The Report's sections build on these (``analysis.model``
holds the Report itself)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any

from msgspec import Meta

from tracecomm.doc import Doc, NonNegative
from tracecomm.engine.model import Figures, MedianFigures
from tracecomm.engine.timeline import StepTimeline

if TYPE_CHECKING:
    from tracecomm.engine.model import RankBreakdown
    from tracecomm.ingest.model import TraceMeta


@dataclass(frozen=True)
class RankResult:
    """What the per-rank unit (parse + breakdown) sends back: small, picklable."""

    path: str
    meta: TraceMeta
    breakdown: RankBreakdown
    warnings: tuple[str, ...]
    truncated: bool
    repaired_events: int
    first_event_abs_ns: int | None  # absolute time of the first event, when the file tells
    power_source: str | None = None  # the power log its GPU's samples came from
    cache_problem: str | None = None  # why its --cache entry could not be used (parsed again)


@dataclass(frozen=True)
class FileFailure:
    """A file that produced no rank: unreadable, not JSON, or not a trace at all."""

    path: str
    reason: str
    not_a_trace: bool = False


class MeanStep(Doc, frozen=True):
    """The rank's analysis window over its included steps: its mean step, the gaps between
    steps counted with them (the HTML's per-rank bars). Each figure rounded to whole ns, so
    the parts add up to ``window_ns`` within a few ns."""

    window_ns: NonNegative
    compute_ns: NonNegative
    exposed_comm_ns: NonNegative
    exposed_memory_ns: NonNegative
    idle_ns: NonNegative
    exposed_comm_by_type_ns: dict[str, NonNegative]  # types may overlap (two streams), §3
    idle_by_cause_ns: dict[str, NonNegative] | None  # GPU timelines (§10)
    comm_ns: Annotated[
        NonNegative, Meta(description="all communication per step, hidden or not (§3)")
    ]


@dataclass(frozen=True)
class StepSummary:
    """Median of each figure over the included steps, the slowest step's own figures, and the
    mean step (the analysis window over the steps)."""

    steps: int
    median: MedianFigures
    worst_step: int
    worst: Figures
    mean: MeanStep | None = None  # None: the rank has no analysis window


@dataclass(frozen=True)
class RankReport:
    rank: int
    rank_source: str  # "distributedInfo" | "file name" | "file order"
    path: str
    host: str | None
    devices: tuple[str, ...]
    breakdown: RankBreakdown
    step_summary: StepSummary | None
    partial: bool  # truncated file or repaired events: figures may be low
    device_props: dict[str, Any] = field(default_factory=dict)  # of its (most used) GPU
    power_source: str | None = None  # the power log of its GPU, when one matched


class RankTimeline(Doc, frozen=True):
    rank: int
    role: str  # fastest / median / slowest (by median step window), straggler, chosen
    timeline: StepTimeline | None
    reason: str | None = None  # why there is none


class RunTimeline(Doc, frozen=True):
    """The same step on the run's fastest, median and slowest rank."""

    step: int | None
    ranks: tuple[RankTimeline, ...]
    reason: str | None = None  # why no step was chosen


class RankNote(Doc, frozen=True):
    """One engine note (an excluded step, unlinked events, …) and every rank it applies to."""

    text: str
    ranks: tuple[int, ...]


class MissingRank(Doc, frozen=True):
    """A rank whose file was given but could not be used (the report is partial)."""

    rank: int | None
    path: str | None
    reason: str
