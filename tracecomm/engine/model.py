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

    @property
    def included_steps(self) -> tuple[StepFigures, ...]:
        return tuple(s for s in self.steps if s.included and s.window is not None)
