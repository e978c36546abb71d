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
from tracecomm.analysis.alltoall import TokenImbalance as TokenImbalance
from tracecomm.analysis.bandwidth import Bandwidth as Bandwidth
from tracecomm.analysis.bandwidth import BandwidthRow as BandwidthRow
from tracecomm.analysis.crossrank import HostClock as HostClock
from tracecomm.analysis.finding import Finding as Finding
from tracecomm.analysis.finding import StepParts as StepParts
from tracecomm.analysis.framework import DetectedFramework as DetectedFramework
from tracecomm.analysis.framework import Frameworks as Frameworks
from tracecomm.analysis.model import TypeSummary as TypeSummary
from tracecomm.analysis.pipeline_view import StageBubble as StageBubble
from tracecomm.analysis.projection import ProjectedSize as ProjectedSize
from tracecomm.analysis.rank import MeanStep
from tracecomm.analysis.rank import MissingRank as MissingRank
from tracecomm.analysis.stragglers import GroupTypeDelay as GroupTypeDelay
from tracecomm.analysis.whatif import Candidate as Candidate
from tracecomm.compat.hta import HtaFigures as HtaFigures
from tracecomm.doc import NCCL_SCHEMA_VERSION, SCHEMA_VERSION, NonNegative, Percent, Positive
from tracecomm.engine.model import Figures, KernelStats, MedianFigures, ObservedFlops
from tracecomm.engine.model import StepFigures as Step
from tracecomm.engine.model import TypeFigures as TypeFigures
from tracecomm.engine.model import WindowFigures as Window
from tracecomm.engine.timeline import ExposedSpan as ExposedSpan
from tracecomm.mfu.inputs import ModelFlops as ModelFlops
from tracecomm.mfu.peaks import Peak as Peak

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


class Summary(_Doc, frozen=True):
    """The run at a glance: the ranks analyzed, the steps, the sums over ranks."""

    ranks_analyzed: Positive
    world_size: int | None
    timelines: list[Literal["gpu", "cpu"]]
    steps: list[int]
    median_rank: int | None
    worst_rank: int | None
    worst_by: str
    slowest_first: Annotated[
        list[int], Meta(description="ranks ordered by worst_by, slowest first")
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
    ]
    idle_by_cause_pct: Annotated[
        dict[str, Percent] | None,
        Meta(
            description=(
                "each cause's share of idle_by_cause's total, in % (metrics.md §10); "
                "null without idle time"
            )
        ),
    ]


class SkippedFile(_Doc, frozen=True):
    """A file that is not a trace."""

    path: str
    reason: str


class Note(_Doc, frozen=True):
    """An engine note and the ranks it applies to."""

    text: str
    ranks: list[int]


# Matching across ranks and clocks (metrics.md §4-§5).


class Mismatch(_Doc, frozen=True):
    group: str
    members: list[int]
    unmatched: int
    first_instance: str
    missing_ranks: list[int]
    sizes_disagree: bool
    counts: dict[str, int]


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


class StragglerRank(_Doc, frozen=True):
    rank: int
    times_last: Annotated[
        int,
        Meta(
            description=(
                "instances the rank alone arrived last at, groups whose order of "
                "arrival the pipeline schedule sets left out"
            )
        ),
    ]
    times_last_share: float | None
    delay_caused_per_step_ns: int
    inherited_delay_per_step_ns: Annotated[
        int,
        Meta(
            description=(
                "part of delay caused that the rank had collected waiting in other "
                "groups' collectives since its previous call in the group; not counted "
                "in root_delay_ns"
            )
        ),
    ]
    wait_per_step_ns: int
    compute_per_step_ns: int | None
    compute_excess_ns: int
    stage_excess_ns: Annotated[
        int,
        Meta(
            description=(
                "compute per step over the median of the other stages of its pipeline "
                "(the chain of send/recv peers); 0 outside pipelines"
            )
        ),
    ]
    compute_ratio: float | None
    root_delay_ns: int
    flagged: bool
    gain_ns: Annotated[
        NonNegative | None,
        Meta(
            description=(
                "what-if gain of fixing this rank alone: measured median step − the "
                "step replayed with its work at its peers' median (metrics.md §6); null"
                " when the rank was not replayed"
            )
        ),
    ]
    fix: Annotated[
        str | None,
        Meta(
            description=(
                'the flagged candidate the rank belongs to ("rank 5", "stage 1", '
                '"replica 3"); null when none'
            )
        ),
    ]


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


class Instance(_Doc, frozen=True):
    group: str
    key: str
    coll_type: str
    step: int | None
    ranks: int
    last_rank: Annotated[
        int | None,
        Meta(
            description=(
                "the rank that alone started last; null when the latest start is shared"
                " (nobody held the others)"
            )
        ),
    ]
    arrival_skew_ns: int
    transfer_ns: int
    delay_caused_ns: int


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


class Device(_Doc, frozen=True):
    name: str
    ranks: int
    peak: Peak | None


class Gap(_Doc, frozen=True):
    ranks: list[int]
    busy_pct: float
    mfu_pct: float | None
    compute_pct: float
    compute_below_peak_pct: float
    exposed_comm_pct: float
    exposed_comm_by_type_pct: dict[str, float]
    exposed_memory_pct: float
    idle_pct: float


class Energy(_Doc, frozen=True):
    gpus: int
    logs: list[str]
    energy_per_step_j: Annotated[
        float,
        Meta(description="median over steps of the sum over GPUs of each step window's energy"),
    ]
    compute_j_per_step: float
    exposed_comm_j_per_step: float
    exposed_memory_j_per_step: float
    idle_j_per_step: float
    avg_power_w: Annotated[float, Meta(description="per GPU over the analysis windows")]
    tokens_per_j: float | None
    missing: str | None
    idle_pct: Annotated[Percent | None, Meta(description="share of energy_per_step_j, in %")]
    exposed_comm_pct: Annotated[
        Percent | None, Meta(description="share of energy_per_step_j, in %")
    ]
    exposed_memory_pct: Annotated[
        Percent | None, Meta(description="share of energy_per_step_j, in %")
    ]


class ObservedThroughput(_Doc, frozen=True):
    ranks: int
    flops_per_step: float
    tflops_while_running: float
    coverage_pct: float
    hfu_lower_bound: float | None
    by_family: dict[str, int]
    attention_causal_unknown_flops: int


class Throughput(_Doc, frozen=True):
    steps: Annotated[
        list[int],
        Meta(
            description=(
                "the steps step time is taken over (the first profiled one dropped when"
                " there are more than two)"
            )
        ),
    ]
    step_time_ns: int | None
    worst_step_ns: int | None
    worst_step: int | None
    dtype: str
    devices: list[Device]
    device_count: Annotated[
        int, Meta(description="one device per rank: world_size, else the analyzed ranks")
    ]
    assumed_ranks: Annotated[
        int, Meta(description="ranks without a trace, assumed to run the most common device")
    ]
    peak_total_tflops: float | None
    flops: ModelFlops | None
    tokens_per_s: float | None
    achieved_tflops_per_device: float | None
    mfu: Annotated[float | None, Meta(description="a fraction of the summed dense peak")]
    mfu_possible: Annotated[
        bool | None,
        Meta(
            description=(
                "false: MFU over 100 % or over a group's compute share, so the FLOPs input "
                "is wrong (shown only as impossible); null without MFU"
            )
        ),
    ]
    hfu: Annotated[
        float | None, Meta(description="with full activation recompute (model config only)")
    ]
    gaps: list[Gap]
    missing: Annotated[str | None, Meta(description="why MFU is not computed")]
    warnings: list[str]
    energy: Energy | None
    observed: Annotated[
        ObservedThroughput | None,
        Meta(description="observed TFLOP/s from recorded shapes: a lower bound, not MFU"),
    ]


# NCCL logs and Flight Recorder dumps (metrics.md §12); also ``tracecomm nccl --format json``.


class NcclDiagnostic(_Doc, frozen=True):
    rule: Annotated[
        str,
        Meta(
            description=(
                "transport_fallback, version_mismatch, fewer_channels, nvls, collnet, "
                "warn, hang, desync, watchdog_stuck"
            )
        ),
    ]
    severity: Literal["error", "warning", "info"]
    message: str
    ranks: list[int]
    hosts: list[str]
    evidence: Annotated[
        list[str],
        Meta(description="the log lines that prove the finding, control characters escaped"),
    ]
    pg: Annotated[str | None, Meta(description="process group (hang, desync)")]
    seq: int | None
    op: str | None


class FrDivergence(_Doc, frozen=True):
    pg: str
    seq: int
    op: str
    sizes: str
    missing_ranks: list[int]
    stuck_ranks: list[int]
    sizes_disagree: bool


class NcclVersion(_Doc, frozen=True):
    """one version and everyone the logs show running it"""

    version: Annotated[
        str, Meta(description="as printed: 2.19.3+cuda12.3, 2.21.5-HEAD:9a0e6a1, 2.20.5")
    ]
    library: Literal["NCCL", "RCCL"]
    hosts: list[str]
    processes: Annotated[list[str], Meta(description="host:pid")]
    ranks: Annotated[list[int], Meta(description="global ranks")]
    sources: Annotated[
        list[Literal["bare", "info", "torch", "banner"]],
        Meta(
            description=(
                "bare: the ≤2.21 line (rank 0 only); info: 2.22+ per process; torch: "
                "ProcessGroupNCCL's environment dump; banner: RCCL's"
            )
        ),
    ]
    files: Annotated[
        list[str], Meta(description="the log files that print it (several logs read at once)")
    ] = []


class NcclRankTimeout(_Doc, frozen=True):
    rank: int
    seq: int
    op_type: str | None
    numel_in: int | None
    numel_out: int | None
    timeout_ms: int | None
    ran_ms: int | None
    last_enqueued_seq: int | None
    last_started_seq: int | None
    last_completed_seq: int | None
    pg_inferred: Annotated[
        bool, Meta(description="the rank's lines name no group: joined to this one by its seq")
    ]


class NcclPgTimeout(_Doc, frozen=True):
    """the watchdog's view of one process group"""

    pg: Annotated[
        str,
        Meta(
            description=(
                "the group as the log names it (PG ID 2 PG GUID 9, PG 1), or 'process "
                "group not named in the log'"
            )
        ),
    ]
    pg_id: str | None
    pg_guid: str | None
    pg_name: str | None
    pg_desc: str | None
    seq: Annotated[int, Meta(description="the earliest stuck seq")]
    op_type: str | None
    numel_in: int | None
    numel_out: int | None
    timed_out_ranks: list[int]
    ranks_are_global: Annotated[
        bool, Meta(description="false: ranks within the group (the lines name no global rank)")
    ]
    ranks: list[NcclRankTimeout]
    last_enqueued_seq: int | None
    last_completed_seq: int | None
    desync: Annotated[bool, Meta(description="ranks stuck at different seqs")]
    never_joined: list[int]


class NcclSummary(_Doc, frozen=True):
    """NCCL debug logs and Flight Recorder dumps (metrics.md §12): what they say about the job, and
    the diagnostics"""

    files: list[str]
    lines: int
    nccl_lines: int
    unknown_lines: int
    processes: Annotated[
        int,
        Meta(
            description=(
                "distinct host:pid of NCCL lines, or distinct ranks of PyTorch lines when more"
            )
        ),
    ]
    hosts: list[str]
    ranks: Annotated[dict[str, int], Meta(description="host:pid -> global rank")]
    versions: list[NcclVersion]
    networks: Annotated[dict[str, list[str]], Meta(description="network -> hosts")]
    transports: dict[str, int]
    colls: int
    warns: dict[str, int]
    watchdog_events: int
    watchdog_timeouts: list[NcclPgTimeout]
    flight_recorder_dumps: int
    diagnostics: list[NcclDiagnostic]
    hang: list[FrDivergence]


class NcclDocument(_Doc, frozen=True):
    """`tracecomm nccl LOG... --format json`"""

    kind: Literal["tracecomm-nccl"]
    schema_version: Literal[2]
    nccl: NcclSummary | None
    warnings: list[str]


# Bandwidth (metrics.md §7) and HTA's own figures (metrics.md §9).


# One step of chosen ranks, for the HTML report.


class Segment(_Doc, frozen=True):
    start_ns: NonNegative
    end_ns: NonNegative
    cls: Literal["compute", "comm", "memory"]
    coll_type: str | None
    kernels: Positive
    name: str | None


class Lane(_Doc, frozen=True):
    device: int | None
    stream: int | None
    segments: list[Segment]


class RankTimeline(_Doc, frozen=True):
    step: int
    start_ns: int
    window_ns: int
    resolution_ns: int
    lanes: list[Lane]
    exposed: list[ExposedSpan]


class TimelineRank(_Doc, frozen=True):
    rank: int
    role: Literal["fastest", "median", "slowest", "straggler", "chosen"]
    timeline: RankTimeline | None
    reason: str | None


class Timeline(_Doc, frozen=True):
    step: int | None
    ranks: list[TimelineRank]
    reason: str | None


# The scaling projection (metrics.md §11).


class Fit(_Doc, frozen=True):
    coll_type: str
    alpha_ns: float
    bus_gbps: float | None
    instances: int
    sizes: int
    fit_error_pct: float
    note: str | None


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


class Pipeline(_Doc, frozen=True):
    group: str
    stages: int
    stages_source: str
    microbatches: int | None
    microbatches_source: str
    textbook_bubble_pct: float | None
    span_ns: int
    steps: int
    per_stage: list[StageBubble]
    overloaded_stage: Annotated[
        NonNegative | None,
        Meta(
            description=(
                "the stage computing the most, when over 5 % more than the other stages' "
                "median (metrics.md §10): the stage the verdict and the finding name"
            ),
        ),
    ]
    overloaded_excess_pct: Annotated[
        Annotated[float, Meta(ge=0)] | None,
        Meta(description="its compute over the others' median, % more"),
    ]
    slow_rank: Annotated[
        NonNegative | None,
        Meta(description="a rank slower than its stage in the other pipelines"),
    ]
    balanced: Annotated[bool, Meta(description="no overloaded stage and no slow rank of its own")]
    verdict: str
    waits_for: Annotated[
        list[int],
        Meta(
            description=(
                "a balanced pipeline: the slow ranks of other pipelines it waits for at the "
                "data-parallel collectives"
            )
        ),
    ] = []
    shown_as: Annotated[
        str | None,
        Meta(
            description=(
                "the pipeline whose view stands for this one (the same verdict, the longest "
                "span): views show one pipeline per distinct verdict; null: it stands for itself"
            )
        ),
    ] = None


# The kernel view across ranks (metrics.md §15-§16).


class RunKernelTop(_Doc, frozen=True):
    name: str
    ranks: int
    count: int
    total_ns: int
    share_pct: float | None
    count_per_step: float
    ns_per_step: float
    median_ns: int
    p95_ns: int
    max_ns: int


class RunKernelGroup(_Doc, frozen=True):
    cls: str
    coll_type: str | None
    ranks: int
    events: int
    total_ns: int
    top: list[RunKernelTop]


class RunShortKernels(_Doc, frozen=True):
    threshold_ns: int
    kernels: int
    total_ns: int
    all_kernels: int
    all_ns: int
    share_of_kernels_pct: float | None
    share_of_time_pct: float | None


class RunStarvingOp(_Doc, frozen=True):
    op: str | None
    ranks: int
    gaps: int
    starved_ns: int
    share_of_host_bound_pct: float | None
    kernel: str


class RunLaunches(_Doc, frozen=True):
    launches: int
    per_step_median: int
    graph_launches: int
    delay_median_ns: int | None
    delay_p95_ns: int | None
    delay_max_ns: int | None
    host_bound_ns: int
    starving: list[RunStarvingOp]


class RunGraphs(_Doc, frozen=True):
    ranks: int
    graph_launches: int
    replayed: int
    replayed_ns: int
    by_method: dict[str, int]
    unattributed: int
    captured_launches: int
    captures: int


class RooflineRow(_Doc, frozen=True):
    device: str
    op: str
    family: str
    dtype: str
    shapes: str
    ranks: int
    count: int
    flops: int
    bytes: int
    kernel_ns: int
    achieved_tflops: float | None
    achieved_gbps: float | None
    intensity: float
    peak_tflops: float | None
    peak_gbps: float | None
    ridge: float | None
    pct_of_peak_flops: float | None
    pct_of_peak_bandwidth: float | None
    bound: Literal["compute", "memory", None]
    note: str | None


class KernelView(_Doc, frozen=True):
    """the kernel view across ranks (metrics.md §15-§16): each rank's top kernels summed, short
    kernels, launches and the ops that starve the GPU, CUDA/HIP graphs, the roofline of the
    recorded ops against the device's peaks"""

    ranks: int
    steps: int
    groups: list[RunKernelGroup]
    short: RunShortKernels
    launches: RunLaunches
    graphs: RunGraphs | None
    roofline: list[RooflineRow]


# The bottom line (metrics.md §14).


# The whole document.


# All-to-all and expert parallelism (metrics.md §7a).


class AllToAll(_Doc, frozen=True):
    use: Annotated[
        Literal["expert", "embedding"] | None,
        Meta(
            description=(
                "what the all-to-all is for, from the trace's names: MoE token dispatch / "
                "combine, or a DLRM embedding exchange; null when the names do not say"
            )
        ),
    ]
    libraries: list[str]
    kernels: NonNegative
    comm_ns: NonNegative
    exposed_ns: NonNegative
    hidden_pct: Percent | None
    wait_ns: int | None
    transfer_ns: int | None
    wait_reason: str | None
    ranks: list[AllToAllRank]
    imbalance: TokenImbalance | None
    imbalance_reason: str | None


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
