"""The typed values that leave the ingest layer."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import polars as pl

from tracecomm.ingest.options import ReadOptions

DEVICE_KINDS = ("kernel", "memcpy", "memset", "sync")
__all__ = ["DEVICE_KINDS", "RankEvents", "ReadOptions", "TraceMeta"]


@dataclass(frozen=True)
class TraceMeta:
    """File-level facts: who wrote the trace and on which clock."""

    rank: int | None
    world_size: int | None
    backend: str | None
    nccl_version: str | None
    pg_config: tuple[dict[str, Any], ...]
    device_names: dict[int, str]
    base_time_ns: (
        int | None
    )  # baseTimeNanoseconds: absolute time of ts == 0 (None: ts is absolute or unknown)
    host_name: str | None
    trace_id: str | None
    # deviceProperties by id: the fields peak lookup uses (numSms, computeMajor/Minor,
    # totalGlobalMem, warpSize); every visible GPU is listed, not only the rank's own
    device_props: dict[int, dict[str, Any]] = field(default_factory=dict)


@dataclass(frozen=True)
class RankEvents:
    """One trace file as columns; times are integer ns on the file's own ts scale.

    Times are ns since the epoch when ``epoch_clock`` (baseTimeNanoseconds already added).

    ``device``: kernels, memcpy, memset and sync records (kind, name, device, stream, start_ns,
    end_ns, correlation, external_id, collective metadata columns).
    ``launches``: runtime / driver calls (name, tid, start_ns, end_ns, correlation, external_id).
    ``steps``: ``ProfilerStep#N`` annotations (step, tid, start_ns, end_ns).
    ``comm_annotations``: ``nccl:*`` GPU user annotations (name, device, stream, start_ns, end_ns).
    ``comm_ops``: ``record_param_comms`` CPU ops with their collective metadata.
    ``cpu``: CPU ops and annotations (kind, name, pid, tid, start_ns, end_ns), for CPU-only traces.
    """

    path: str
    meta: TraceMeta
    device: pl.DataFrame
    launches: pl.DataFrame
    steps: pl.DataFrame
    comm_annotations: pl.DataFrame
    comm_ops: pl.DataFrame
    cpu: pl.DataFrame
    # matmul / conv / attention CPU ops with Input Dims (name, tid, start_ns, end_ns,
    # input_dims and concrete_inputs as JSON text); empty without record_shapes
    shaped_ops: pl.DataFrame = field(default_factory=pl.DataFrame)
    # every GPU-side range (gpu_user_annotation: NVTX / record_function on the GPU timeline):
    # name, device, stream, start_ns, end_ns; user rules may count them as work
    gpu_ranges: pl.DataFrame = field(default_factory=pl.DataFrame)
    # collective metadata of the device rows that carry any (dev_row -> metadata columns)
    device_meta: pl.DataFrame = field(default_factory=pl.DataFrame)
    warnings: tuple[str, ...] = ()
    truncated: bool = False
    repaired_events: int = field(default=0)

    @property
    def first_event_ns(self) -> int | None:
        frame = self.device if self.device.height else self.cpu
        value = frame["start_ns"].min() if frame.height else None
        return value if isinstance(value, int) else None

    @property
    def epoch_clock(self) -> bool:
        """Times are ns since the epoch (a base was given, or ts was epoch µs already).

        Relative traces from before Kineto wrote ``baseTimeNanoseconds`` start near 0.
        """
        first = self.first_event_ns
        return self.meta.base_time_ns is not None or (first is not None and first > 10**17)
