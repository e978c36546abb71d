"""The Report: plain data that every renderer reads and none computes; and what the run hands
the analysis to build it (``RunData``). The per-rank values live in ``analysis.rank`` and are
named here too."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any, Protocol

from msgspec import Meta

from tracecomm.analysis.finding import Finding, StepParts
from tracecomm.analysis.rank import (
    FileFailure,
    MedianFigures,
    MissingRank,
    RankNote,
    RankReport,
    RankResult,
    RankTimeline,
    RunTimeline,
    StepSummary,
)
from tracecomm.colltypes import CollType
from tracecomm.doc import Doc, NonNegative, Percent, Positive
from tracecomm.engine.model import Figures

if TYPE_CHECKING:  # annotations only: the per-rank worker imports this module, and must stay lean
    import polars as pl

    from tracecomm.analysis.alltoall import AllToAllView
    from tracecomm.analysis.bandwidth import Bandwidth
    from tracecomm.analysis.crossrank import CrossRank
    from tracecomm.analysis.export_model import TraceExport
    from tracecomm.analysis.framework import Frameworks
    from tracecomm.analysis.kernels import KernelView
    from tracecomm.analysis.pipeline_view import PipelineView
    from tracecomm.analysis.projection import Projection
    from tracecomm.analysis.stragglers import Stragglers
    from tracecomm.analysis.throughput import Throughput
    from tracecomm.compat.hta import HtaFigures
    from tracecomm.engine.export import RankExport
    from tracecomm.mfu.inputs import ModelFlops, ModelInputs
    from tracecomm.nccl.diagnose import NcclSummary


class TypeSummary(Doc, frozen=True):
    """One collective type over all analyzed ranks (sums of per-rank analysis windows)."""

    coll_type: CollType
    kernels: NonNegative
    ranks: Positive
    comm_ns: NonNegative
    exposed_comm_ns: NonNegative


class RunSummary(Doc, frozen=True):
    """The run at a glance: the ranks analyzed, the steps, the sums over ranks."""

    ranks_analyzed: Positive
    world_size: int | None
    timelines: tuple[str, ...]
    steps: tuple[int, ...]  # step numbers included on at least one rank
    median_rank: int | None
    worst_rank: int | None
    worst_by: str  # what "worst" ranks by, in words
    slowest_first: Annotated[
        tuple[int, ...], Meta(description="ranks ordered by worst_by, slowest first")
    ]  # ranks ordered by that measure, slowest first
    total: Annotated[
        Figures | None, Meta(description="sum over ranks of their analysis windows")
    ]  # sum over ranks of their analysis windows
    idle_by_cause: Annotated[
        dict[str, NonNegative] | None,
        Meta(
            description=(
                "idle ns per cause summed over the ranks' analysis windows (GPU "
                "timelines); null when no rank has a GPU timeline"
            )
        ),
    ] = None  # sum over ranks (GPU timelines), §10
    idle_by_cause_pct: Annotated[
        dict[str, Percent] | None,
        Meta(
            description=(
                "each cause's share of idle_by_cause's total, in % (metrics.md §10); "
                "null without idle time"
            )
        ),
    ] = None  # each cause's share of that idle time


__all__ = [
    "FileFailure",
    "Finding",
    "MedianFigures",
    "MissingRank",
    "RankFiles",
    "RankNote",
    "RankReport",
    "RankResult",
    "RankTimeline",
    "Report",
    "RunData",
    "RunSummary",
    "RunTimeline",
    "StepParts",
    "StepSummary",
    "TypeSummary",
]


@dataclass(frozen=True)
class Report:
    tool_version: str
    inputs: tuple[str, ...]
    options: dict[str, Any]
    summary: RunSummary
    rank_reports: tuple[RankReport, ...]  # by rank; ``ranks`` is the same as a polars frame
    type_summaries: tuple[TypeSummary, ...]  # by collective type; ``by_type`` as a frame
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
    step_parts: StepParts | None = None  # the bottom line (metrics.md §14): one step's parts
    findings: tuple[Finding, ...] = ()  # and what costs the most, costliest first
    kernels: KernelView | None = None  # §15–§16: top kernels, launches, graphs, roofline
    export: TraceExport | None = None  # §17: the chosen ranks' and steps' events (export)
    all_to_all: AllToAllView | None = None  # §7a: all-to-all / expert parallelism
    frameworks: Frameworks | None = None  # §14a: which framework ran it, from the trace's names

    @property
    def partial(self) -> bool:
        """Some rank is missing or was only partly readable."""
        return bool(self.missing) or any(r.partial for r in self.rank_reports)

    # The tables as polars frames, for notebooks (analysis.frames): built on each access.

    @property
    def ranks(self) -> pl.DataFrame:
        """One row per analyzed rank: window figures and per-step medians."""
        from tracecomm.analysis.frames import ranks_frame

        return ranks_frame(self.rank_reports)

    @property
    def steps(self) -> pl.DataFrame:
        """One row per rank and profiler step."""
        from tracecomm.analysis.frames import steps_frame

        return steps_frame(self.rank_reports)

    @property
    def by_type(self) -> pl.DataFrame:
        """One row per collective type, summed over ranks."""
        from tracecomm.analysis.frames import by_type_frame

        return by_type_frame(self.type_summaries)

    @property
    def straggler_ranks(self) -> pl.DataFrame:
        """metrics.md §6 per rank, largest root delay first."""
        from tracecomm.analysis.frames import straggler_frame

        return straggler_frame(self.stragglers)

    @property
    def collectives(self) -> pl.DataFrame:
        """Every matched collective instance per rank, clock-aligned."""
        from tracecomm.analysis.frames import collectives_frame

        return collectives_frame(self.cross_rank)


class RankFiles(Protocol):
    """What the analysis may ask of the run's trace files again (one step of a rank, HTA's
    figures): the run reads them where they are, on its executor, and hands back plain values."""

    def step_timeline(self, rank: RankReport, role: str, step: int) -> RankTimeline: ...

    def step_work(self, rank: RankReport, step: int) -> pl.DataFrame | str: ...

    def hta_figures(self, paths: Mapping[int, str], version: str) -> tuple[HtaFigures, ...]: ...

    def rank_export(self, rank: RankReport, steps: tuple[int, ...]) -> RankExport | str: ...


@dataclass(frozen=True)
class RunData:
    """What the run gathered for the analysis: the per-rank results and the run's own inputs."""

    results: tuple[RankResult, ...]
    failures: tuple[FileFailure, ...]
    inputs: tuple[str, ...]
    options: dict[str, Any]  # the options as the report records them
    model: ModelInputs | None = None  # the model inputs in effect (flags over settings file)
    flops: ModelFlops | None = None  # model FLOPs per step, from them
    run_warnings: tuple[str, ...] = ()  # the run's own: power logs skipped, cache entries
    nccl: NcclSummary | None = None  # NCCL logs and Flight Recorder dumps, diagnosed
    nccl_warnings: tuple[str, ...] = ()
    files: RankFiles | None = None  # None: the trace files cannot be read again
