"""The Report: plain data that every renderer reads and none computes; and what the run hands
the analysis to build it (``RunData``). The per-rank values live in ``analysis.rank`` and are
named here too."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any, Literal, Protocol

from msgspec import Meta

from tracecomm.analysis.finding import Finding, StepParts
from tracecomm.analysis.rank import (
    FileFailure,
    MedianFigures,
    MissingRank,
    RankNote,
    RankOrigin,
    RankReport,
    RankResult,
    RankTimeline,
    RunTimeline,
)
from tracecomm.colltypes import CollType
from tracecomm.doc import Doc, NonNegative, Percent, Positive
from tracecomm.engine.model import Figures

if TYPE_CHECKING:  # annotations only: the per-rank worker imports this module, and must stay lean
    from tracecomm.analysis.crossrank import Matching
    from tracecomm.analysis.export_model import TraceExport
    from tracecomm.analysis.whatif import WhatIf
    from tracecomm.compat.hta import HtaFigures
    from tracecomm.engine.export import RankExport
    from tracecomm.engine.model import RankBreakdown
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
    ]
    total: Annotated[Figures | None, Meta(description="sum over ranks of their analysis windows")]
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
    "ExportReader",
    "FileFailure",
    "Finding",
    "HtaReader",
    "MedianFigures",
    "MissingRank",
    "RankNote",
    "RankReport",
    "RankResult",
    "RankTimeline",
    "RunData",
    "RunSummary",
    "RunTimeline",
    "StepParts",
    "TypeSummary",
]


class ExportReader(Protocol):
    """The export's ranks, chosen by the analysis, read again (each file once): each one's
    events of ``steps``, or why there are none (``run.worker.exports_of_file``)."""

    def __call__(
        self, origins: Mapping[int, RankOrigin], steps: tuple[int, ...]
    ) -> dict[int, RankExport | str]: ...


class HtaReader(Protocol):
    """``--compat hta``: HTA's own figures of each rank's file, by the rules of one release
    (HTA reads the files itself, where they are)."""

    def __call__(self, paths: Mapping[int, str], version: str) -> tuple[HtaFigures, ...]: ...


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
    hta: HtaReader | None = None  # None: the trace files are not where HTA can read them
    export_reader: ExportReader | None = None
    read_from: Literal["traces", "summaries"] = "traces"  # ``tracecomm ingest``'s summaries


@dataclass
class Side:
    """What the processors hand each other besides the report: each rank's breakdown (its
    collectives, the signature of its work), the matched instances, the what-if's working values
    and the export's events. Filled once, in processor order, by the processor that computes
    each; never saved, never read by a renderer (a saved document renders the same without
    it)."""

    results: dict[int, RankResult] = field(default_factory=dict)  # by rank
    matching: Matching | None = None
    what_if: WhatIf | None = None
    export: TraceExport | None = None

    def breakdown(self, rank: int) -> RankBreakdown:
        return self.results[rank].breakdown

    @property
    def breakdowns(self) -> dict[int, RankBreakdown]:
        return {rank: r.breakdown for rank, r in self.results.items()}
