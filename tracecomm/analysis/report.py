"""The Report: the one artifact an analysis builds, every renderer reads and ``analyze --format
json`` saves. Its types are the saved document (``msgspec`` writes and reads them; the JSON
Schema tracecomm/schema/report.schema.json is generated from them): a saved run reads back into
the same Report and renders the same. What the processors need besides it (frames, the
what-if's working values) is ``analysis.model.Side``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal

import msgspec
from msgspec import Meta, structs

from tracecomm.analysis.alltoall import AllToAllView
from tracecomm.analysis.bandwidth import Bandwidth
from tracecomm.analysis.collective_steps import CollectiveStep
from tracecomm.analysis.crossrank import CrossRank
from tracecomm.analysis.finding import Finding, StepParts
from tracecomm.analysis.framework import Frameworks
from tracecomm.analysis.kernels import KernelView, RunKernelSteps
from tracecomm.analysis.model import RunSummary, TypeSummary
from tracecomm.analysis.pipeline_view import PipelineView
from tracecomm.analysis.projection import Projection, ProjectionBasis
from tracecomm.analysis.rank import MissingRank, RankNote, RankReport, RunTimeline, SkippedFile
from tracecomm.analysis.stragglers import Stragglers
from tracecomm.analysis.throughput import Throughput
from tracecomm.compat.hta import HtaFigures
from tracecomm.doc import Doc
from tracecomm.nccl.diagnose import NcclSummary

if TYPE_CHECKING:
    import polars as pl


class Tool(Doc, frozen=True):
    """The tool that wrote the document."""

    name: Literal["tracecomm"]
    version: str


class Report(Doc, frozen=True, kw_only=True):
    """One analysis of one run (metrics.md): its ranks and, across them, every section."""

    schema_version: int  # doc.SCHEMA_VERSION: a saved document of another is refused
    tool: Tool
    inputs: tuple[str, ...]
    read_from: Annotated[
        Literal["traces", "summaries"] | None,
        Meta(
            description=(
                "what the ranks were read from: trace files, or the summaries `tracecomm "
                "ingest` wrote; null: a document written before it"
            )
        ),
    ] = None
    options: dict[str, Any]  # the options as given (the flags, the settings file's)
    summary: RunSummary
    ranks: tuple[RankReport, ...]  # by rank
    by_type: tuple[TypeSummary, ...]  # by collective type
    missing_ranks: tuple[MissingRank, ...]
    absent_ranks: tuple[int, ...] = ()  # below world_size, no file at all: a warning, not an error
    skipped_files: tuple[SkippedFile, ...] = ()  # files that are not traces (no traceEvents)
    warnings: tuple[str, ...] = ()
    notes: tuple[RankNote, ...] = ()  # engine notes, each with the ranks it applies to
    cross_rank: CrossRank | None = None  # matching and clocks, when two or more ranks are analyzed
    stragglers: Stragglers | None = None  # metrics.md §6, from the matched instances
    throughput: Throughput | None = None  # step time, tokens/s, MFU (metrics.md §8)
    nccl: NcclSummary | None = None  # NCCL logs and Flight Recorder dumps in the run folder
    bandwidth: Bandwidth | None = None  # metrics.md §7, from matched instances with sizes
    hta_compat: tuple[HtaFigures, ...] | None = None  # --compat hta[-0.6|-0.5]
    timeline: RunTimeline | None = None  # one step of chosen ranks, for the HTML report
    # metrics.md §11 with --project: the projection, or (reason) why there is none
    projection: Projection | None = None
    pipelines: tuple[PipelineView, ...] = ()  # §10's pipeline view, one per send/recv group
    kernels: KernelView | None = None  # §15–§16: top kernels, launches, graphs, roofline
    step_parts: StepParts | None = None  # the bottom line (metrics.md §14): one step's parts
    findings: tuple[Finding, ...] = ()  # and what costs the most, costliest first
    partial: Annotated[bool, Meta(description="a rank is missing or was only partly readable")] = (
        False
    )
    all_to_all: AllToAllView | None = None  # §7a: all-to-all / expert parallelism
    frameworks: Frameworks | None = None  # §14a: which framework ran it, from the trace's names
    collective_steps: Annotated[
        tuple[CollectiveStep, ...] | None,
        Meta(
            description=(
                "the matched instances (§4) per step, collective type, group and size bucket: "
                "what compare diffs by collective (§18); empty: none matched; null: a document "
                "written before it"
            )
        ),
    ] = None
    kernel_steps: Annotated[
        RunKernelSteps | None,
        Meta(
            description=(
                "every kernel name per included step of the median rank: what compare diffs "
                "by kernel (§18); null: no device work, or a document written before it"
            )
        ),
    ] = None
    # §11: what the projection replays (the median rank's typical step, the link fits): a
    # saved document projects to any size as its run does
    projection_basis: ProjectionBasis | None = None

    # The tables as polars frames, for notebooks (analysis.frames): built on each call.

    def ranks_frame(self) -> pl.DataFrame:
        """One row per analyzed rank: window figures and per-step medians."""
        from tracecomm.analysis.frames import ranks_frame

        return ranks_frame(self.ranks)

    def steps_frame(self) -> pl.DataFrame:
        """One row per rank and profiler step."""
        from tracecomm.analysis.frames import steps_frame

        return steps_frame(self.ranks)

    def by_type_frame(self) -> pl.DataFrame:
        """One row per collective type, summed over ranks."""
        from tracecomm.analysis.frames import by_type_frame

        return by_type_frame(self.by_type)

    def straggler_frame(self) -> pl.DataFrame:
        """metrics.md §6 per rank, largest root delay first."""
        from tracecomm.analysis.frames import straggler_frame

        return straggler_frame(self.stragglers)


def report_json(report: Report, top: int | None = None) -> bytes:
    """The saved document: msgspec writing the Report's own types, two-space indented (``top``:
    list only that many straggler ranks and what-if candidates, ``--top``)."""
    st = report.stragglers
    if top is not None and st is not None:
        shown = structs.replace(st, ranks=st.ranks[:top], candidates=st.candidates[:top])
        report = structs.replace(report, stragglers=shown)
    return msgspec.json.format(msgspec.json.encode(report), indent=2)


def report_document(report: Report, top: int | None = None) -> dict[str, Any]:
    """The saved document as JSON values (the HTML page embeds them)."""
    out: dict[str, Any] = msgspec.json.decode(report_json(report, top))
    return out
