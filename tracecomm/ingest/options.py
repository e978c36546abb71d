"""What the readers are asked to keep and the bounds they read within: polars-free, so a
request can be checked before the heavy imports (the pool starts first)."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass


@dataclass(frozen=True)
class ReadOptions:
    """What the readers keep beyond the engine's own needs; passed in by the layers above."""

    # CPU ops whose recorded shapes (``Input Dims``) are kept: the FLOP counter names them
    # (mfu.opflops.SHAPED_OPS); none by default, as most traces record no shapes
    shaped_ops: Collection[str] = frozenset()
    # Nsight Systems exports: the NVTX ranges that mark steps (a regex; its first group the step
    # number) when the PyTorch profiler did not run alongside; None: ProfilerStep#N, else the
    # default step names (ingest.nsys.DEFAULT_STEP_RANGE)
    step_range: str | None = None
    # Bounds (ingest.limits): how far a gzip file may inflate, the largest trace, the longest
    # event. Real traces inflate 8–30× and hold events of a few KB.
    max_inflate_ratio: float = 200.0
    max_trace_bytes: int = 64 << 30
    max_event_bytes: int = 64 << 20
