"""One rank's values in the Report: what the per-rank unit sends back, the rank's report, its
timeline, and what is missing. The Report's sections build on these (``analysis.model``
holds the Report itself)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Literal

from msgspec import Meta

from tracecomm.doc import Doc, NonNegative
from tracecomm.engine.model import (
    Figures,
    KernelStats,
    MedianFigures,
    ObservedFlops,
    StepFigures,
    Timeline,
    WindowFigures,
)
from tracecomm.engine.timeline import StepTimeline

if TYPE_CHECKING:
    from tracecomm.engine.model import RankBreakdown
    from tracecomm.engine.views import RankViews
    from tracecomm.ingest.model import TraceMeta


@dataclass(frozen=True)
class RankOrigin:
    """Where a rank's events are: the file as given (a path or URL) and which of the ranks
    it holds (0 for a trace of one rank; a merged trace's or an Nsight export's ranks in the
    order the reader yields them)."""

    file: str
    index: int = 0


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
    views: RankViews | None = None  # what the later views take of it (none: no device work)
    origin: RankOrigin | None = None  # its trace (none: read from a summary)

    def device_props(self) -> dict[str, object]:
        """The properties the trace lists of the rank's most used GPU (empty when none)."""
        used = self.breakdown.devices
        return dict(self.meta.device_props.get(used[0], {})) if used else {}


@dataclass(frozen=True)
class FileFailure:
    """A file that produced no rank: unreadable, not JSON, or not a trace at all."""

    path: str
    reason: str
    not_a_trace: bool = False


class SkippedFile(Doc, frozen=True):
    """A file that is not a trace (the report lists it; the run is not partial for it)."""

    path: str
    reason: str


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


class WorstStep(Doc, frozen=True):
    """The rank's included step with the longest window."""

    step: int
    figures: Figures


RankSource = Literal["distributedInfo", "file name", "file order"]


class RankReport(Doc, frozen=True):
    """One analyzed rank: its file, its analysis window, its steps and its kernels. What only
    the analysis needs of it (its collectives, its work's signature) is its ``RankBreakdown``."""

    rank: NonNegative
    rank_source: RankSource
    path: str
    host: str | None
    devices: tuple[str, ...]  # names of the GPUs its kernels ran on
    timeline: Timeline
    partial: Annotated[bool, Meta(description="the file was truncated or had events repaired")]
    comm_kernels: Annotated[
        int, Meta(ge=0, description="communication kernels in the whole file, before windowing")
    ]
    device_events: NonNegative
    unlinked_events: NonNegative  # device work with no matching runtime launch
    window: WindowFigures | None  # the analysis window: first to last included step
    steps_included: NonNegative
    step_median: MedianFigures | None  # each figure's median over the included steps
    step_mean: MeanStep | None  # the analysis window over its steps
    step_worst: WorstStep | None
    steps: tuple[StepFigures, ...]
    observed: Annotated[
        ObservedFlops | None,
        Meta(
            description=(
                "FLOPs of recorded matmul / conv / attention ops (record_shapes) over "
                "the included steps, and their kernels' time: a lower bound (metrics.md"
                " §8)"
            )
        ),
    ]
    power_log: Annotated[
        str | None,
        Meta(description="the power log its GPU's samples came from, and how it was matched"),
    ]
    kernels: KernelStats | None
    notes: tuple[str, ...]

    @property
    def included_steps(self) -> tuple[StepFigures, ...]:
        return tuple(s for s in self.steps if s.included and s.window is not None)


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
