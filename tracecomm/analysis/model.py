"""The Report: plain data that every renderer reads and none computes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # annotations only: the per-rank worker imports this module, and must stay lean
    from tracecomm.analysis.bandwidth import Bandwidth
    from tracecomm.analysis.crossrank import CrossRank
    from tracecomm.analysis.pipeline_view import PipelineView
    from tracecomm.analysis.projection import Projection
    from tracecomm.analysis.stragglers import Stragglers
    from tracecomm.analysis.throughput import Throughput
    from tracecomm.compat.hta import HtaFigures
    from tracecomm.engine.model import Figures, RankBreakdown
    from tracecomm.engine.timeline import StepTimeline
    from tracecomm.ingest.model import TraceMeta
    from tracecomm.nccl.diagnose import NcclSummary


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


@dataclass(frozen=True)
class FileFailure:
    """A file that produced no rank: unreadable, not JSON, or not a trace at all."""

    path: str
    reason: str
    not_a_trace: bool = False


@dataclass(frozen=True)
class MedianFigures:
    """Each figure's own median over the included steps (rounded to whole ns; percentages are
    medians of the per-step percentages). Being separate medians, the parts need not add up to
    the window the way one step's figures do."""

    window_ns: int
    compute_ns: int
    comm_ns: int
    overlapped_comm_ns: int
    exposed_comm_ns: int
    exposed_memory_ns: int
    idle_ns: int
    overlap_pct: float | None
    busy_pct: float | None


@dataclass(frozen=True)
class StepSummary:
    """Median of each figure over the included steps, and the slowest step's own figures."""

    steps: int
    median: MedianFigures
    worst_step: int
    worst: Figures


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


@dataclass(frozen=True)
class RankTimeline:
    rank: int
    role: str  # fastest / median / slowest (by median step time)
    timeline: StepTimeline | None
    reason: str | None = None  # why there is none


@dataclass(frozen=True)
class RunTimeline:
    """The same step on the run's fastest, median and slowest rank."""

    step: int | None
    ranks: tuple[RankTimeline, ...]
    reason: str | None = None  # why no step was chosen


@dataclass(frozen=True)
class RankNote:
    """One engine note (an excluded step, unlinked events, …) and every rank it applies to."""

    text: str
    ranks: tuple[int, ...]


@dataclass(frozen=True)
class MissingRank:
    """A rank whose file was given but could not be used (the report is partial)."""

    rank: int | None
    path: str | None
    reason: str


@dataclass(frozen=True)
class TypeSummary:
    """One collective type over all analyzed ranks (sums of per-rank analysis windows)."""

    coll_type: str
    kernels: int
    ranks: int
    comm_ns: int
    exposed_comm_ns: int


@dataclass(frozen=True)
class RunSummary:
    ranks_analyzed: int
    world_size: int | None
    timelines: tuple[str, ...]
    steps: tuple[int, ...]  # step numbers included on at least one rank
    median_rank: int | None
    worst_rank: int | None
    worst_by: str  # what "worst" ranks by, in words
    slowest_first: tuple[int, ...]  # ranks ordered by that measure, slowest first
    total: Figures | None  # sum over ranks of their analysis windows
    idle_by_cause: dict[str, int] | None = None  # sum over ranks (GPU timelines), §10


@dataclass(frozen=True)
class Report:
    tool_version: str
    inputs: tuple[str, ...]
    options: dict[str, Any]
    summary: RunSummary
    ranks: tuple[RankReport, ...]
    by_type: tuple[TypeSummary, ...]
    missing: tuple[MissingRank, ...]
    skipped: tuple[FileFailure, ...]  # files that are not traces (no traceEvents)
    absent_ranks: tuple[int, ...] = ()  # below world_size, no file at all: a warning, not an error
    warnings: tuple[str, ...] = field(default=())
    notes: tuple[RankNote, ...] = ()  # engine notes, each with the ranks it applies to
    cross_rank: CrossRank | None = None  # matching and clocks, when two or more ranks are analyzed
    stragglers: Stragglers | None = None  # metrics.md §6, from the matched instances
    throughput: Throughput | None = None  # step time, tokens/s, MFU (metrics.md §8)
    nccl: NcclSummary | None = None  # NCCL logs and Flight Recorder dumps in the run folder
    bandwidth: Bandwidth | None = None  # metrics.md §7, from matched instances with sizes
    hta_compat: tuple[HtaFigures, ...] | None = None  # --compat hta[-0.6|-0.5]
    timeline: RunTimeline | None = None  # one step of chosen ranks, for the HTML report
    # metrics.md §11 with --project: the projection, or why there is none
    projection: Projection | str | None = None
    pipelines: tuple[PipelineView, ...] = ()  # §10's pipeline view, one per send/recv group

    @property
    def partial(self) -> bool:
        """Some rank is missing or was only partly readable."""
        return bool(self.missing) or any(r.partial for r in self.ranks)
