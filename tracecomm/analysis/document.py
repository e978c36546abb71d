"""The analyze document, typed: every key ``render.document.report_document`` writes, with the
constraints a reader may rely on (times whole and not negative, shares in 0–100, the names a
field can take). A saved ``analyze --format json`` document is read into ``ReportDocument``
(``run.saved.load_saved_report``); the JSON Schemas tracecomm/schema/report.schema.json and
nccl.schema.json are generated from these types (``python -m tracecomm.schema``), and the tests
convert every document the writer makes into them and back, value for value.

Adding a field to the document is one edit here (then ``python -m tracecomm.schema``); a
reader that must tell old documents from new ones reads ``SCHEMA_VERSION``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from msgspec import Meta, Struct

from tracecomm.analysis.alltoall import AllToAllRank as AllToAllRank
from tracecomm.analysis.alltoall import AllToAllView as AllToAll
from tracecomm.analysis.alltoall import TokenImbalance as TokenImbalance
from tracecomm.analysis.bandwidth import Bandwidth as Bandwidth
from tracecomm.analysis.bandwidth import BandwidthRow as BandwidthRow
from tracecomm.analysis.crossrank import GroupMismatch as Mismatch
from tracecomm.analysis.crossrank import HostClock as HostClock
from tracecomm.analysis.finding import Finding as Finding
from tracecomm.analysis.finding import StepParts as StepParts
from tracecomm.analysis.framework import DetectedFramework as DetectedFramework
from tracecomm.analysis.framework import Frameworks as Frameworks
from tracecomm.analysis.kernels import KernelView as KernelView
from tracecomm.analysis.kernels import RooflineRow as RooflineRow
from tracecomm.analysis.kernels import RunGraphs as RunGraphs
from tracecomm.analysis.kernels import RunKernelGroup as RunKernelGroup
from tracecomm.analysis.kernels import RunLaunches as RunLaunches
from tracecomm.analysis.kernels import RunShortKernels as RunShortKernels
from tracecomm.analysis.kernels import RunStarvingOp as RunStarvingOp
from tracecomm.analysis.model import RunSummary as Summary
from tracecomm.analysis.model import TypeSummary as TypeSummary
from tracecomm.analysis.pipeline_view import PipelineView as Pipeline
from tracecomm.analysis.pipeline_view import StageBubble as StageBubble
from tracecomm.analysis.projection import LinkFit as Fit
from tracecomm.analysis.projection import ProjectedSize as ProjectedSize
from tracecomm.analysis.rank import MeanStep
from tracecomm.analysis.rank import MissingRank as MissingRank
from tracecomm.analysis.rank import RankNote as Note
from tracecomm.analysis.rank import RunTimeline as Timeline
from tracecomm.analysis.stragglers import GroupTypeDelay as GroupTypeDelay
from tracecomm.analysis.stragglers import InstanceRecord as Instance
from tracecomm.analysis.stragglers import RankStraggle as StragglerRank
from tracecomm.analysis.throughput import Throughput as Throughput
from tracecomm.analysis.whatif import Candidate as Candidate
from tracecomm.compat.hta import HtaFigures as HtaFigures
from tracecomm.doc import NCCL_SCHEMA_VERSION, SCHEMA_VERSION, NonNegative, Percent
from tracecomm.engine.model import Figures, KernelStats, MedianFigures, ObservedFlops
from tracecomm.engine.model import StepFigures as Step
from tracecomm.engine.model import TypeFigures as TypeFigures
from tracecomm.engine.model import WindowFigures as Window
from tracecomm.engine.timeline import ExposedSpan as ExposedSpan
from tracecomm.mfu.inputs import ModelFlops as ModelFlops
from tracecomm.mfu.peaks import Peak as Peak
from tracecomm.nccl.diagnose import NcclDocument as NcclDocument
from tracecomm.nccl.diagnose import NcclSummary as NcclSummary

__all__ = ["NCCL_SCHEMA_VERSION", "SCHEMA_VERSION", "Step", "TypeFigures", "Window"]


class _Doc(Struct, forbid_unknown_fields=True, frozen=True):
    """A part of the document: every field required, no other field allowed, read-only (each
    part says ``frozen=True`` again for the type checker, which does not inherit it)."""


# One rank: its analysis window, its steps, its kernels (metrics.md §3, §15-§16).


# A rank's windows, steps and kernels are the engine's own types (metrics.md §3, §15-§16).


class WorstStep(_Doc, frozen=True):
    """The rank's included step with the longest window."""

    step: int
    figures: Figures


class Rank(_Doc, frozen=True):
    """One analyzed rank: its file, its analysis window, its steps and its kernels."""

    rank: NonNegative
    rank_source: Literal["distributedInfo", "file name", "file order"]
    path: str
    host: str | None
    devices: list[str]
    timeline: Literal["gpu", "cpu"]
    partial: Annotated[bool, Meta(description="the file was truncated or had events repaired")]
    comm_kernels: Annotated[
        int, Meta(ge=0, description="communication kernels in the whole file, before windowing")
    ]
    device_events: NonNegative
    unlinked_events: NonNegative
    window: Window | None
    steps_included: NonNegative
    step_median: MedianFigures | None
    step_mean: MeanStep | None
    step_worst: WorstStep | None
    steps: list[Step]
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
    notes: list[str]


# The run: what was read, what was skipped, the sums over ranks.


class Tool(_Doc, frozen=True):
    """The tool that wrote the document."""

    name: Literal["tracecomm"]
    version: str


class SkippedFile(_Doc, frozen=True):
    """A file that is not a trace."""

    path: str
    reason: str


# Matching across ranks and clocks (metrics.md §4-§5).


class Clocks(_Doc, frozen=True):
    aligned: bool
    reference_rank: int | None
    hosts: list[HostClock]


class CrossRank(_Doc, frozen=True):
    instances: NonNegative
    matched: NonNegative
    unmatched: NonNegative
    point_to_point: Annotated[
        int, Meta(ge=0, description="send/recv kernels: paired by peer, not matched by group here")
    ]
    p2p_paired: Annotated[
        int, Meta(ge=0, description="send/recv pairs found on both sides (by peer and order)")
    ]
    p2p_unpaired: Annotated[
        int,
        Meta(ge=0, description="sends or recvs whose other side is not in the analyzed traces"),
    ]
    unsynchronized: Annotated[
        int,
        Meta(
            ge=0,
            description=(
                "matched instances whose members' kernels do not overlap once every "
                "member arrived (no rendezvous of these ranks): left out of the "
                "straggler figures and the replay"
            ),
        ),
    ]
    keyed_by: dict[str, Literal["seq", "ordinal"]]
    mismatches: list[Mismatch]
    clocks: Clocks


# Stragglers and the replay's what-if (metrics.md §6).


class Replay(_Doc, frozen=True):
    measured_step_ns: NonNegative
    step_ns: Annotated[
        int, Meta(ge=0, description="the median step replayed with the recorded work")
    ]
    reproduction_error_pct: Annotated[float, Meta(ge=0)]
    tolerance_pct: Annotated[float, Meta(ge=0)]
    reproduces: Annotated[
        bool,
        Meta(
            description=(
                "the replayed step is within the tolerance of the measured one: only "
                "then does the replay decide"
            )
        ),
    ]
    shared_waits: Annotated[
        int,
        Meta(ge=0, description="synchronized collective instances and send/recv pairs replayed"),
    ]
    step_if_no_straggler_ns: NonNegative | None
    recoverable_pct: Percent | None
    by_peers: Annotated[
        list[int],
        Meta(description="flagged ranks whose work came from their peers, position by position"),
    ]
    by_scaling: Annotated[
        list[int],
        Meta(
            description=(
                "flagged ranks whose own work was scaled to the target compute (a whole"
                " stage; a rank without shape-alike peers)"
            )
        ),
    ]
    reason: Annotated[
        str | None, Meta(description="why the replay does not decide, when it does not")
    ]
    mean_step_ns: Annotated[
        NonNegative | None,
        Meta(
            description=(
                "the recorded work's mean step (median over ranks of each rank's mean over "
                "its included steps): the base of the candidates' total_recoverable_pct"
            ),
        ),
    ] = None


class StepDelay(_Doc, frozen=True):
    rank: int
    step: int
    delay_caused_ns: Annotated[
        int, Meta(description="the delay the rank alone caused in the step, inherited included")
    ]
    root_delay_ns: Annotated[
        int | None,
        Meta(
            description=(
                "what the rank caused itself in the step (the heat map): max(compute "
                "excess over its peers, over the other stages) + delay caused − inherited"
            )
        ),
    ] = None


class Stragglers(_Doc, frozen=True, kw_only=True):
    ranks: Annotated[
        list[StragglerRank],
        Meta(
            description=(
                "flagged ranks first (by the gain of the candidate that flags them), "
                "then by replay gain and root delay; by root delay when the first-order"
                " figures decide"
            )
        ),
    ]
    flagged: list[int]
    flag_basis: Annotated[
        Literal["replay gain", "root delay"],
        Meta(
            description=(
                "what ranks and flags: the replay's gains when the replay reproduces "
                "the measured step, else the first-order root delay"
            )
        ),
    ]
    median_step_ns: int | None
    threshold_ns: Annotated[
        int | None,
        Meta(
            description=(
                "the gain (or root delay, see flag_basis) a flagged candidate exceeds: "
                "max(5 % of the median step, 3 × the median rank's)"
            )
        ),
    ]
    step_if_no_straggler_ns: Annotated[
        int | None,
        Meta(
            description=(
                "the median step with every flagged candidate fixed: the dependency "
                "replay's what-if where the replay reproduces the run, else the "
                "first-order estimate (recoverable_basis says which)"
            )
        ),
    ]
    recoverable_pct: Annotated[
        Percent | None,
        Meta(description="100 · (median step − step_if_no_straggler_ns) / median step"),
    ]
    recoverable_basis: Annotated[
        Literal["replay", "replay (mean step)", "first-order"],
        Meta(
            description=(
                "what step_if_no_straggler_ns and recoverable_pct come from: the replay of "
                "the ranks' median step; the replay of their mean step (replay."
                "mean_step_ns), when a flagged candidate is slow in some steps only and the "
                "median step hides it; or the first-order estimate"
            )
        ),
    ] = "first-order"
    first_order_step_ns: Annotated[
        int | None,
        Meta(
            description=(
                "the fast estimate: the median step minus the largest gain among the"
                " flagged ranks (the larger of their compute / stage excess and the "
                "delay they alone caused, per step), never below the longest rank's own"
                " work once fixed; never the headline where the replay reproduces the run"
            )
        ),
    ] = None
    first_order_recoverable_pct: Percent | None = None
    step_if_no_straggler_replay_ns: Annotated[
        int | None,
        Meta(
            description=(
                "dependency-replay estimate with every flagged candidate fixed at once "
                "(null when the replay could not run or did not reproduce the measured "
                "step)"
            )
        ),
    ]
    recoverable_pct_replay: Percent | None
    replay: Annotated[
        Replay | None,
        Meta(
            description=(
                "the dependency replay (metrics.md §6): its self-check and its what-if "
                "with every flagged candidate fixed"
            )
        ),
    ]
    candidates: Annotated[
        list[Candidate],
        Meta(
            description=(
                "what-if candidates (ranks, pipeline stages, data-parallel replicas) by"
                " replay gain, largest first; empty when the replay does not decide"
            )
        ),
    ]
    by_group_type: Annotated[
        list[GroupTypeDelay],
        Meta(
            description=(
                "delay per process group and collective type over the included steps, largest first"
            )
        ),
    ]
    instances: Annotated[
        list[Instance],
        Meta(description="every matched collective instance (empty unless --detail instances)"),
    ]
    delay_by_step: list[StepDelay]
    slowest_instances: Annotated[
        list[Instance],
        Meta(
            description=(
                "the 10 instances that took longest from the first member's arrival to the "
                "earliest end (the wait for the last member, arrival_skew_ns, plus the "
                "transfer, transfer_ns), slowest first"
            )
        ),
    ] = []


# Step time, MFU and energy (metrics.md §8).


# NCCL logs and Flight Recorder dumps (metrics.md §12); also ``tracecomm nccl --format json``.


# Bandwidth (metrics.md §7) and HTA's own figures (metrics.md §9).


# One step of chosen ranks, for the HTML report.


# The scaling projection (metrics.md §11).


class Projection(_Doc, frozen=True):
    reason: str | None
    measured_world: int | None
    rank: int | None
    step: int | None
    scaling: Literal["strong", "weak", None]
    fits: list[Fit] | None
    sizes: list[ProjectedSize] | None
    turning_point: int | None
    assumptions: list[str] | None
    notes: list[str] | None


# The pipeline view (metrics.md §10).


# The kernel view across ranks (metrics.md §15-§16).


# The bottom line (metrics.md §14).


# The whole document.


# All-to-all and expert parallelism (metrics.md §7a).


class ReportDocument(_Doc, frozen=True):
    """Output of `tracecomm analyze --format json`. Times are integer nanoseconds."""

    schema_version: Literal[2]  # SCHEMA_VERSION
    tool: Tool
    inputs: list[str]
    options: dict[str, Any]
    summary: Summary
    ranks: list[Rank]
    by_type: list[TypeSummary]
    missing_ranks: list[MissingRank]
    absent_ranks: Annotated[
        list[int], Meta(description="ranks below world_size with no trace file")
    ]
    skipped_files: list[SkippedFile]
    warnings: list[str]
    notes: Annotated[
        list[Note],
        Meta(
            description=(
                "engine notes (excluded steps, unlinked events, fallbacks), each with "
                "the ranks it applies to"
            )
        ),
    ]
    cross_rank: Annotated[
        CrossRank | None,
        Meta(
            description=(
                "collective instances matched across ranks (metrics.md §4) and per-host"
                " clock offsets (§5); null with fewer than two GPU ranks"
            )
        ),
    ]
    stragglers: Annotated[
        Stragglers | None,
        Meta(
            description=(
                "metrics.md §6 on clock-aligned matched instances; null without matched"
                " instances on two or more ranks"
            )
        ),
    ]
    throughput: Annotated[
        Throughput | None,
        Meta(
            description=(
                "step time, tokens/s and MFU (metrics.md §8); null without a step that "
                "has a ProfilerStep span"
            )
        ),
    ]
    nccl: Annotated[
        NcclSummary | None,
        Meta(description="null when the run folder holds no NCCL log or Flight Recorder dump"),
    ]
    bandwidth: Annotated[
        Bandwidth | None,
        Meta(
            description=(
                "bandwidth per collective type and message size (metrics.md §7); null "
                "without matched instances"
            )
        ),
    ]
    hta_compat: Annotated[
        list[HtaFigures] | None,
        Meta(
            description=(
                "--compat hta / hta-0.6 / hta-0.5: HolisticTraceAnalysis's overlap % "
                "and temporal breakdown (µs) by the definitions of release hta_version "
                "(0.6.1 or 0.5.0), reproduced (tracecomm/compat/hta.py, metrics.md §9);"
                " null without the flag"
            )
        ),
    ]
    timeline: Annotated[
        Timeline | None,
        Meta(
            description=(
                "one step (the median rank's median step) of the fastest, median and "
                "slowest rank by median step window, plus the worst flagged straggler, "
                "or of the ranks chosen with --timeline-ranks; times from the step "
                "window's start (ns). Present with --detail timeline and in the HTML "
                "report, null otherwise"
            )
        ),
    ]
    projection: Annotated[
        Projection | None,
        Meta(
            description=(
                "metrics.md §11 (with --project or `tracecomm project`): fitted "
                "alpha-beta per collective type and the replayed step at each world "
                "size, the measured size first; null when not asked for; only `reason` "
                "set when it could not be made"
            )
        ),
    ]
    pipelines: Annotated[
        list[Pipeline],
        Meta(
            description=(
                "pipeline view (metrics.md §10), one per pipeline (the chain of "
                "send/recv peers, whatever its groups are called): stages in order, "
                "micro-batches, measured bubble per stage (share of the pipeline's "
                "compute span with no compute on that stage, median over steps) next to"
                " the textbook 1F1B bubble"
            )
        ),
    ]
    kernels: KernelView | None
    step_parts: Annotated[
        StepParts | None,
        Meta(
            description=(
                "one step as the median rank spends it, in shares of the step time "
                "(metrics.md §14): each figure the median over ranks of each rank's "
                "median step, idle between steps charged to the steps; null without "
                "steps or windows"
            )
        ),
    ]
    findings: Annotated[
        list[Finding],
        Meta(
            description=(
                "the bottom line (metrics.md §14): problems ranked by what they cost "
                "per step, each with where, why and what to try; input problems first, "
                "uncosted ones last"
            )
        ),
    ]
    partial: Annotated[
        bool, Meta(description="some rank's file was unusable or only partly readable")
    ]
    all_to_all: Annotated[
        AllToAll | None,
        Meta(
            description=(
                "all-to-all and expert parallelism (metrics.md §7a): hidden share, wait vs "
                "transfer per rank, token imbalance; null when no rank ran an all-to-all"
            )
        ),
    ] = None
    frameworks: Annotated[
        Frameworks | None,
        Meta(
            description=(
                "which framework ran the job (metrics.md §14a), from names only it writes "
                "(annotations, kernel and process group names): the findings' advice is "
                "its knobs; null when the traces name none"
            )
        ),
    ] = None
