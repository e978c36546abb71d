"""Plain values the engine returns: per-rank figures in integer ns."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Literal

import polars as pl
from msgspec import Meta

from tracecomm.colltypes import CollType
from tracecomm.doc import Doc, NonNegative, derive

Timeline = Literal["gpu", "cpu"]


class _Partition(Doc, frozen=True):
    window_ns: NonNegative
    compute_ns: NonNegative
    comm_ns: NonNegative
    overlapped_comm_ns: NonNegative
    exposed_comm_ns: NonNegative
    exposed_memory_ns: NonNegative
    idle_ns: NonNegative

    @property
    def busy_ns(self) -> int:
        return self.window_ns - self.idle_ns


# the partition's times, in the document's order (the CSV columns, the sums over ranks)
PARTITION_FIELDS: tuple[str, ...] = _Partition.__struct_fields__
_OVERLAP = "100 * overlapped_comm / comm; null when comm = 0"
_BUSY = "100 * |U(compute ∪ comm ∪ memory)| / window; null for an empty window"


class Figures(_Partition, frozen=True):
    """The partition of one window (metrics.md §3): compute + exposed_comm + exposed_memory +
    idle = window. The shares are set from the times (also when a document is read)."""

    overlap_pct: Annotated[float | None, Meta(description=_OVERLAP)] = None
    busy_pct: Annotated[float | None, Meta(description=_BUSY)] = None

    def __post_init__(self) -> None:
        comm, window = self.comm_ns, self.window_ns
        derive(self, "overlap_pct", 100.0 * self.overlapped_comm_ns / comm if comm else None)
        derive(self, "busy_pct", 100.0 * self.busy_ns / window if window else None)


class MedianFigures(_Partition, frozen=True):
    """Each figure's own median over the included steps (rounded to whole ns; percentages are
    medians of the per-step percentages). Being separate medians, the parts need not add up to
    the window the way one step's figures do."""

    overlap_pct: Annotated[float | None, Meta(description=_OVERLAP)]
    busy_pct: Annotated[float | None, Meta(description=_BUSY)]


class TypeFigures(Doc, frozen=True):
    """One collective type inside a window; types may overlap each other (two streams)."""

    coll_type: CollType
    kernels: NonNegative
    comm_ns: NonNegative
    exposed_comm_ns: NonNegative


class EnergyFigures(Doc, frozen=True):
    """Joules the rank's GPU drew over a window, split like the partition (metrics.md §3):
    compute + exposed comm + exposed memory + idle = total."""

    joules: float
    compute_j: float
    exposed_comm_j: float
    exposed_memory_j: float
    idle_j: float


class WindowFigures(Doc, frozen=True):
    """A span of one rank's timeline (its analysis window, or one step's) and its partition."""

    start_ns: int
    end_ns: int
    figures: Figures
    by_type: tuple[TypeFigures, ...]
    energy: Annotated[
        EnergyFigures | None,
        Meta(
            description=(
                "joules the rank's GPU drew in the window, from a power log, split like"
                " the partition; null without a covering log"
            )
        ),
    ] = None
    idle_by_cause: Annotated[
        dict[str, NonNegative] | None,
        Meta(
            description=(
                "metrics.md §10: idle ns of the window per cause (engine.idle.IDLE_CAUSES; sync"
                " and dataloader are checked before host_bound); they add up to "
                "figures.idle_ns. null on CPU timelines"
            )
        ),
    ] = None


class StepFigures(Doc, frozen=True):
    """One ProfilerStep: its window when it launched device work, and whether it is analyzed."""

    step: int
    complete: bool
    included: bool
    incomplete_reason: str | None
    cpu_span_ns: Annotated[
        int | None,
        Meta(description="length of the ProfilerStep#N annotation itself (the step time MFU uses)"),
    ]
    window: WindowFigures | None


class ObservedFlops(Doc, frozen=True):
    """FLOPs of the recorded matmul / conv / attention ops over the included steps, and the
    time their kernels ran (metrics.md §8): a lower bound on what the GPU executed."""

    flops: int
    kernel_ns: int  # sum of the counted ops' kernel durations
    compute_kernel_ns: int  # sum of every compute kernel's duration: coverage = the share
    ops: int
    by_family: dict[str, int]  # matmul / conv / attention -> FLOPs
    attention_causal_unknown_flops: int  # counted as a full square: the trace does not say
    unrecognized_ops: int  # shapes that fit no formula
    coverage: float | None = None  # kernel_ns / compute_kernel_ns
    tflops_while_running: float | None = None  # flops / kernel_ns (1 FLOP per ns = 1e-3 TFLOP/s)

    def __post_init__(self) -> None:
        kernel, compute = self.kernel_ns, self.compute_kernel_ns
        derive(self, "coverage", kernel / compute if compute else None)
        derive(self, "tflops_while_running", self.flops / kernel / 1e3 if kernel else None)


class KernelRow(Doc, frozen=True):
    """One kernel name of one group over the included steps (metrics.md §15). Durations are
    order statistics of the kernel's own durations: ``median_ns`` the lower median (rank
    ⌊(n−1)/2⌋ of n, 0-based), ``p95_ns`` the nearest-rank 95th percentile (rank ⌈0.95·n⌉−1)."""

    name: str
    count: int
    total_ns: int  # sum of its durations
    median_ns: int
    p95_ns: int
    max_ns: int
    share_pct: float | None  # of the group's summed kernel time
    count_per_step: float
    ns_per_step: float


class KernelGroup(Doc, frozen=True):
    """A class of device work (compute; comm of one collective type; memory) and its top
    kernels by summed time."""

    cls: str
    coll_type: str | None
    events: int
    names: int  # distinct names
    total_ns: int  # summed durations (not a union: kernels on two streams both count)
    top: tuple[KernelRow, ...]


class DurationBucket(Doc, frozen=True):
    below_ns: int | None  # upper bound, exclusive; None: the last, unbounded bucket
    kernels: int
    total_ns: int


class ShortKernels(Doc, frozen=True):
    """Kernels (compute and comm) shorter than ``threshold_ns``: too short to hide their own
    launch cost."""

    threshold_ns: int
    kernels: int  # of them
    total_ns: int
    all_kernels: int
    all_ns: int
    per_step: float
    buckets: tuple[DurationBucket, ...]
    share_of_kernels_pct: float | None = None  # set from the counts
    share_of_time_pct: float | None = None

    def __post_init__(self) -> None:
        kernels, ns = self.all_kernels, self.all_ns
        derive(self, "share_of_kernels_pct", 100.0 * self.kernels / kernels if kernels else None)
        derive(self, "share_of_time_pct", 100.0 * self.total_ns / ns if ns else None)


class StarvingOp(Doc, frozen=True):
    """A CPU op whose launches came after the GPU had gone idle (host-bound gaps, §10)."""

    op: str | None  # None: the launch names no CPU op
    gaps: int
    starved_ns: int  # summed length of those gaps
    kernel: str  # the kernel that most often ended them


class LaunchStats(Doc, frozen=True):
    """Kernel launches of the included steps, and how long their work waited for the GPU."""

    launches: int  # kernel launch calls (graph launches included), captures excluded
    per_step_median: int  # lower median over the included steps
    graph_launches: int
    delayed: int  # device events launched directly (not by a graph) with a known launch
    delay_median_ns: int | None  # GPU start − CPU launch start, lower median
    delay_p95_ns: int | None
    delay_max_ns: int | None
    host_bound_ns: int  # the analysis window's host-bound idle (§10)
    starving: tuple[StarvingOp, ...]


class GraphOp(Doc, frozen=True):
    """An op that launched graphs in the included steps, and the work its replays ran."""

    op: str | None
    launches: int
    kernels: int
    kernel_ns: int


class GraphStats(Doc, frozen=True):
    """CUDA / HIP graphs of the rank (metrics.md §16)."""

    graph_launches: int  # in the included steps
    replayed: int  # device events graphs replayed in the included steps
    replayed_ns: int
    by_method: dict[str, int]  # how they were tied to their launch -> events
    unattributed: int  # events with graph ids that no launch could be found for (whole file)
    captured_launches: int  # kernel launches made during a capture (whole file): ran nothing
    captures: int
    ops: tuple[GraphOp, ...]


class OpShape(Doc, frozen=True):
    """Recorded matmul / conv / attention ops of one shape and dtype: their FLOPs, the bytes
    they must move at the least, and their kernels' time (the roofline, §15)."""

    op: str
    family: str
    dtype: str
    shapes: str  # Input Dims as JSON text
    count: int
    flops: int
    bytes: int
    kernel_ns: int


class KernelStep(Doc, frozen=True):
    """One kernel name in one included step of one rank (metrics.md §15, §18): what compare
    diffs by kernel. ``order``: the position of the name's first kernel among the step's
    names, by start (0 first). ``exposed_ns``: the part of ``time_ns`` on the step's
    partition (§3): not hidden behind a kernel of a higher class (compute hides comm, both
    hide memory), concurrent kernels of its class sharing it evenly."""

    step: int
    name: str
    cls: Annotated[str, Meta(description="compute, comm or memory (metrics.md §1)")]
    coll_type: Annotated[str | None, Meta(description="comm: its collective type")]
    calls: NonNegative
    time_ns: Annotated[NonNegative, Meta(description="the calls' durations summed")]
    order: NonNegative
    exposed_ns: Annotated[
        NonNegative | None,
        Meta(description="of time_ns, the part on the step's partition (§3); null: not kept"),
    ] = None


class KernelStats(Doc, frozen=True):
    """The rank's kernel and launch view over its included steps (metrics.md §15-§16): top
    kernels per class, short kernels, launches, graphs and the recorded ops' FLOPs and bytes.
    Small: top rows only. Null on CPU timelines or without an included step."""

    steps: int
    events: int
    groups: tuple[KernelGroup, ...]
    short: ShortKernels
    launches: LaunchStats
    graphs: GraphStats | None
    ops: tuple[OpShape, ...]


@dataclass(frozen=True)
class FrameworkMark:
    """A name in the trace that only one framework writes (engine.framework, metrics.md §14a):
    ``framework`` is its key (``megatron``, ``fsdp2``, ...), ``name`` the name as found."""

    framework: str
    name: str


@dataclass(frozen=True)
class RankBreakdown:
    """Everything the engine knows about one rank, before any cross-rank analysis."""

    timeline: Timeline
    window: WindowFigures | None  # the analysis window: first to last included step
    steps: tuple[StepFigures, ...]
    comm_kernels: int  # whole file, before windowing
    device_events: int
    unlinked_events: int  # device work with no matching runtime launch
    notes: tuple[str, ...]
    # comm kernels keyed for cross-rank matching (engine.collectives.INSTANCE_SCHEMA)
    collectives: pl.DataFrame | None = field(default=None, compare=False, repr=False)
    # digest of the compute kernel names of the first included step, in order: ranks doing the
    # same work (data-parallel peers) share it
    work_signature: str | None = None
    devices: tuple[int, ...] = ()  # device ids the rank's kernels ran on, most used first
    observed: ObservedFlops | None = None  # with record_shapes traces
    kernels: KernelStats | None = None  # GPU timelines with an included step (§15)
    # every kernel name per included step (§18's diff by kernel); None: CPU timelines
    kernel_steps: tuple[KernelStep, ...] | None = None
    comm_libraries: tuple[str, ...] = ()  # "NCCL", "DeepEP", … whose kernels ran (§1a)
    all_to_all_use: str | None = None  # "expert" / "embedding": what its all-to-alls are for
    frameworks: tuple[FrameworkMark, ...] = ()  # the names that say which framework ran it
    # per included step: the first start and last end of its compute kernels (own clock)
    compute_spans: dict[int, tuple[int, int]] = field(default_factory=dict)

    @property
    def included_steps(self) -> tuple[StepFigures, ...]:
        return tuple(s for s in self.steps if s.included and s.window is not None)
