"""Plain values the engine returns: per-rank figures in integer ns."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import polars as pl

Timeline = Literal["gpu", "cpu"]


@dataclass(frozen=True)
class Figures:
    """The partition of one window (metrics.md §3)."""

    window_ns: int
    compute_ns: int
    comm_ns: int
    overlapped_comm_ns: int
    exposed_comm_ns: int
    exposed_memory_ns: int
    idle_ns: int

    @property
    def busy_ns(self) -> int:
        return self.window_ns - self.idle_ns

    @property
    def overlap_pct(self) -> float | None:
        return None if self.comm_ns == 0 else 100.0 * self.overlapped_comm_ns / self.comm_ns

    @property
    def busy_pct(self) -> float | None:
        return None if self.window_ns == 0 else 100.0 * self.busy_ns / self.window_ns


@dataclass(frozen=True)
class TypeFigures:
    """One collective type inside a window; types may overlap each other (two streams)."""

    coll_type: str
    kernels: int
    comm_ns: int
    exposed_comm_ns: int


@dataclass(frozen=True)
class EnergyFigures:
    """Joules the rank's GPU drew over a window, split like the partition (metrics.md §3):
    compute + exposed comm + exposed memory + idle = total."""

    joules: float
    compute_j: float
    exposed_comm_j: float
    exposed_memory_j: float
    idle_j: float


@dataclass(frozen=True)
class WindowFigures:
    start_ns: int
    end_ns: int
    figures: Figures
    by_type: tuple[TypeFigures, ...]
    energy: EnergyFigures | None = None  # with a power log covering the window
    # metrics.md §10: idle ns per cause (engine.idle.IDLE_CAUSES); GPU timelines only
    idle_by_cause: dict[str, int] | None = None


@dataclass(frozen=True)
class StepFigures:
    """One ProfilerStep: its window when it launched device work, and whether it is analyzed."""

    step: int
    complete: bool
    included: bool
    incomplete_reason: str | None
    window: WindowFigures | None
    cpu_span_ns: int | None = None  # the ProfilerStep#N annotation's own length (MFU's t_step)
    # first start and last end of the compute kernels launched in the step (own clock)
    compute_span: tuple[int, int] | None = None


@dataclass(frozen=True)
class ObservedFlops:
    """FLOPs of the recorded matmul / conv / attention ops over the included steps, and the
    time their kernels ran (mfu.md §8): a lower bound on what the GPU executed."""

    flops: int
    kernel_ns: int  # sum of the counted ops' kernel durations
    compute_kernel_ns: int  # sum of every compute kernel's duration: coverage = the share
    ops: int
    by_family: dict[str, int]  # matmul / conv / attention -> FLOPs
    attention_causal_unknown_flops: int  # counted as a full square: the trace does not say
    unrecognized_ops: int  # shapes that fit no formula

    @property
    def coverage(self) -> float | None:
        return self.kernel_ns / self.compute_kernel_ns if self.compute_kernel_ns else None

    @property
    def tflops_while_running(self) -> float | None:
        """FLOPs / the counted kernels' time (1 FLOP per ns = 1e-3 TFLOP/s)."""
        return self.flops / self.kernel_ns / 1e3 if self.kernel_ns else None


@dataclass(frozen=True)
class KernelRow:
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


@dataclass(frozen=True)
class KernelGroup:
    """A class of device work (compute; comm of one collective type; memory) and its top
    kernels by summed time."""

    cls: str
    coll_type: str | None
    events: int
    names: int  # distinct names
    total_ns: int  # summed durations (not a union: kernels on two streams both count)
    top: tuple[KernelRow, ...]


@dataclass(frozen=True)
class DurationBucket:
    below_ns: int | None  # upper bound, exclusive; None: the last, unbounded bucket
    kernels: int
    total_ns: int


@dataclass(frozen=True)
class ShortKernels:
    """Kernels (compute and comm) shorter than ``threshold_ns``: too short to hide their own
    launch cost."""

    threshold_ns: int
    kernels: int  # of them
    total_ns: int
    all_kernels: int
    all_ns: int
    per_step: float
    buckets: tuple[DurationBucket, ...]

    @property
    def share_of_kernels_pct(self) -> float | None:
        return 100.0 * self.kernels / self.all_kernels if self.all_kernels else None

    @property
    def share_of_time_pct(self) -> float | None:
        return 100.0 * self.total_ns / self.all_ns if self.all_ns else None


@dataclass(frozen=True)
class StarvingOp:
    """A CPU op whose launches came after the GPU had gone idle (host-bound gaps, §10)."""

    op: str | None  # None: the launch names no CPU op
    gaps: int
    starved_ns: int  # summed length of those gaps
    kernel: str  # the kernel that most often ended them


@dataclass(frozen=True)
class LaunchStats:
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


@dataclass(frozen=True)
class GraphOp:
    """An op that launched graphs in the included steps, and the work its replays ran."""

    op: str | None
    launches: int
    kernels: int
    kernel_ns: int


@dataclass(frozen=True)
class GraphStats:
    """CUDA / HIP graphs of the rank (metrics.md §16)."""

    graph_launches: int  # in the included steps
    replayed: int  # device events graphs replayed in the included steps
    replayed_ns: int
    by_method: dict[str, int]  # how they were tied to their launch -> events
    unattributed: int  # events with graph ids that no launch could be found for (whole file)
    captured_launches: int  # kernel launches made during a capture (whole file): ran nothing
    captures: int
    ops: tuple[GraphOp, ...]


@dataclass(frozen=True)
class OpShape:
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


@dataclass(frozen=True)
class KernelStats:
    """Inside the included steps (metrics.md §15): top kernels per class, short kernels,
    launches, graphs and the recorded ops' FLOPs and bytes. Small: top rows only."""

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
    comm_libraries: tuple[str, ...] = ()  # "NCCL", "DeepEP", … whose kernels ran (§1a)
    all_to_all_use: str | None = None  # "expert" / "embedding": what its all-to-alls are for
    frameworks: tuple[FrameworkMark, ...] = ()  # the names that say which framework ran it

    @property
    def included_steps(self) -> tuple[StepFigures, ...]:
        return tuple(s for s in self.steps if s.included and s.window is not None)
