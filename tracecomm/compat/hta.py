"""HolisticTraceAnalysis's figures, reproduced (``--compat hta``, ``hta-0.6``, ``hta-0.5``).

HTA's definitions differ from tracecomm's own (metrics.md §1–3) on purpose, so users can check
one tool against the other. Two releases are reproduced, each literally from its source:
0.6.1 (PyPI ``traceinsight``; 0.6.0 has the same code) and 0.5.0 (PyPI ``holistictraceanalysis``,
metrics.md §9). What both do:

- every event with a ``dur`` and a ``cat`` (not ``Trace``) is read; ``ts`` is rounded up and
  ``ts + dur`` down to whole µs (HTA's fix for overlapping ns-resolution events);
- ``stream`` and ``correlation`` come from ``args`` (default −1); "GPU" events are those with
  ``stream ≥ 0`` and ``correlation ≥ 0``, plus ``Event Sync`` / ``Context Sync``; the rest are
  "CPU" events;
- when the run's events carry more than one distinct ProfilerStep name, each rank keeps its CPU
  events that start before its last ProfilerStep and the GPU events whose correlation one of
  them carries (the last step is dropped);
- the figures then use every kept event with ``stream ≠ −1``: kernel time = last end − first
  start, idle = kernel time − |union|, compute = |union of compute kernels|, non-compute = the
  rest; overlap % = |U(comm) ∩ U(compute)| / |U(comm)|, rounded to 2 decimals.

Where they differ (``HtaRules``):

=====================  ========================================  =============================
                       0.5.0                                     0.6.1
=====================  ========================================  =============================
communication          ``^nccl.*Kernel``                         ``^nccl.*``, ``^hip``,
                                                                 ``^hccl``, ``.*ncclKernel.*``
memory                 ``^Memcpy``, ``^Memset``, ``^dma``        the same, also ``^hipMemcpy``,
                                                                 ``^hipMemset`` (which ``^hip``
                                                                 makes communication first)
not compute            ``^nccl.*Kernel``, ``.*Memcpy``,          ``^nccl``, ``.*Memcpy``,
                       ``^Memset``, ``.*Sync``                   ``.*Memset``, ``.*dma``,
                                                                 ``.*Sync``, ``^Stream Wait
                                                                 Event``, ``cuda.*LaunchKernel``,
                                                                 ``^runFunction``, ``^hip``,
                                                                 ``^hccl``, MTIA's ``^job_exe``,
                                                                 ``^packet``, ``^pe_exe``,
                                                                 ``^cpum_exe_subgraph``,
                                                                 ``^collective_subgraph_execution``
ProfilerStep names     any name containing ``ProfilerStep``      ``^ProfilerStep#<digits>``
``stream`` value       ``int(v)``, else −1                       numeric (truncated), else −1
a rank with no CPU     keeps nothing (HTA then raises)           keeps every event
event (multi-step)
MTIA device,           as any other device                       keeps the CPU events inside the
multi-step                                                       steps (last one included), the
                                                                 kernels they launched and the
                                                                 memory kernels inside a step
                                                                 (stream −1 → the event's tid)
a rank with no         an empty rank (HTA then raises)           left out of the figures
usable event
=====================  ========================================  =============================

(All patterns are matched at the start of the name, as Python's ``re.match`` does.) The 0.6
"not compute" list is why HTA 0.6.1 moves AlexNet's ``Stream Wait Event`` syncs (cuda_sync
events with a stream) from compute to non-compute: 7 µs on hta-critical_path_alexnet_cuda_sync.
HTA raises instead of printing figures on a rank with no event on a stream (IndexError in
``get_temporal_breakdown``); this module prints zeros there.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import msgspec
import numpy as np
import polars as pl
from msgspec import Meta

from tracecomm.compat.rules import HtaRules, rules
from tracecomm.doc import Doc
from tracecomm.ingest.salvage import read_trace_bytes

_SYNCS = ("Event Sync", "Context Sync")


# 0.6's MTIA path (hta/common/types.py): categories of CPU events and of device kernels
_CPU_EVENT_CATS = re.compile(r"(cpu_op)|(user_annotation)|(^(.+)_runtime)")
_KERNEL_CATS = re.compile("(kernel)|(gpu_mem.+)|(mtia_ccp_events)")
_MTIA_LAUNCH = "runFunction - job_prep_and_submit_for_execution"


class HtaFigures(Doc, frozen=True):
    """One rank, in HTA's units (µs) and rounding."""

    rank: int
    comm_comp_overlap_pct: float | None  # None: no communication kernel (HTA prints NaN)
    idle_us: int
    compute_us: int
    non_compute_us: int
    kernel_time_us: int
    hta_version: Annotated[
        str, Meta(description="the HTA release whose definitions these figures follow")
    ]


@dataclass(frozen=True)
class HtaTrace:
    """One rank file as HTA reads it: its events, rounded, and what HTA reads of its header."""

    # name, cat, ts, end (rounded µs), stream05 / stream06 (the stream as each release reads
    # it), correlation, tid
    events: pl.DataFrame
    backend: str | None  # distributedInfo.backend


class _Event(msgspec.Struct, gc=False):
    cat: Any = None
    name: Any = None
    ts: Any = None
    dur: Any = None
    tid: Any = None
    args: Any = None


class _Trace(msgspec.Struct, gc=False):
    traceEvents: list[_Event] | None = None
    distributedInfo: Any = None


_EMPTY = {
    "name": pl.String,
    "cat": pl.String,
    "ts": pl.Int64,
    "end": pl.Int64,
    "stream05": pl.Int64,
    "stream06": pl.Int64,
    "correlation": pl.Int64,
    "tid": pl.Int64,
}


def read_hta_trace(path: Path) -> HtaTrace:
    """The events HTA reads from one trace file, rounded as HTA rounds them."""
    raw = read_trace_bytes(path)
    try:
        doc = msgspec.json.decode(raw, type=_Trace)
    except (msgspec.DecodeError, msgspec.ValidationError):
        doc = msgspec.json.decode(raw.decode("utf-8", "replace").encode(), type=_Trace)
    rows = []
    for e in doc.traceEvents or []:
        if e.dur is None or e.cat is None or e.cat == "Trace" or e.ts is None:
            continue
        args = e.args if isinstance(e.args, dict) else {}
        stream = args.get("stream", -1)
        rows.append(
            (
                str(e.name),
                str(e.cat),
                math.ceil(e.ts),
                math.floor(e.ts + e.dur),
                _int_or_minus_one(stream),
                _numeric_or_minus_one(stream),
                _int_or_minus_one(args.get("correlation", -1)),
                _int_or_minus_one(e.tid),
            )
        )
    info = doc.distributedInfo if isinstance(doc.distributedInfo, dict) else {}
    backend = info.get("backend")
    return HtaTrace(
        pl.DataFrame(rows, schema=_EMPTY, orient="row"),
        backend if isinstance(backend, str) else None,
    )


def _int_or_minus_one(value: object) -> int:
    """HTA 0.5's _normalize_stream_number: ``int(v)``, −1 when that fails."""
    if isinstance(value, float) and not math.isfinite(value):
        return -1
    try:
        return int(value)  # type: ignore[call-overload]
    except (TypeError, ValueError):
        return -1


def _numeric_or_minus_one(value: object) -> int:
    """HTA 0.6's ``pd.to_numeric(stream, errors="coerce").fillna(-1).astype(int)``: numbers and
    numeric text, truncated; anything else −1."""
    if isinstance(value, bool | int):
        return int(value)
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            return -1
    if isinstance(value, float):
        return int(value) if math.isfinite(value) else -1
    return -1


def hta_figures(traces: Mapping[int, HtaTrace], mode: str = "hta") -> list[HtaFigures]:
    """HTA's overlap and temporal breakdown for every rank analyzed together."""
    r = rules(mode)
    stream = pl.col("stream06" if r.numeric_stream else "stream05")
    frames = {
        rank: t.events.with_columns(stream=stream).drop("stream05", "stream06")
        for rank, t in sorted(traces.items())
    }
    if r.keep_all_without_cpu_events:  # 0.6 drops a rank that has no usable event
        frames = {rank: df for rank, df in frames.items() if df.height}
    symbols = {s for df in frames.values() for col in ("name", "cat") for s in df[col].unique()}
    steps = {s for s in symbols if r.profiler_step.search(s)}
    if len(steps) > 1:
        first = next(iter(frames), None)
        mtia = r.mtia_window and first is not None and _is_mtia(traces[first], frames[first])
        frames = {
            rank: _mtia_window(df, r) if mtia else _drop_last_step(df, r)
            for rank, df in frames.items()
        }
    return [_figures(rank, df.filter(pl.col("stream") != -1), r) for rank, df in frames.items()]


def figures_of_files(paths: Mapping[int, str], mode: str = "hta") -> tuple[HtaFigures, ...]:
    """``--compat``: HTA's figures for a run's rank files (rank → path)."""
    rules(mode)  # an unknown mode fails before any file is read
    traces = {rank: read_hta_trace(Path(path)) for rank, path in paths.items()}
    return tuple(hta_figures(traces, mode))


def _is_mtia(trace: HtaTrace, df: pl.DataFrame) -> bool:
    """HTA 0.6's infer_gpu_type: the backend names mtia:hccl, or MTIA's launch call is there and
    neither CUDA's nor HIP's."""
    if trace.backend is not None and "mtia:hccl" in trace.backend:
        return True
    symbols = set(df["name"].unique()) | set(df["cat"].unique())
    if "cudaLaunchKernel" in symbols or "hipLaunchKernel" in symbols:
        return False
    return _MTIA_LAUNCH in symbols


def _gpu() -> pl.Expr:
    return ((pl.col("stream") >= 0) & (pl.col("correlation") >= 0)) | pl.col("name").is_in(_SYNCS)


def _is_step(r: HtaRules) -> pl.Expr:
    return pl.col("name").str.contains(r.profiler_step.pattern)


def _drop_last_step(df: pl.DataFrame, r: HtaRules) -> pl.DataFrame:
    cpu = df.filter(~_gpu())
    if cpu.is_empty() and r.keep_all_without_cpu_events:
        return df
    steps = cpu.filter(_is_step(r))
    # 0.6 falls back to the first CPU event (keeping nothing); 0.5 compares with NaN (the same)
    last = steps["ts"].max() if steps.height else None
    cpu = cpu.filter(pl.col("ts") < last) if last is not None else cpu.clear()
    launched = df.filter(_gpu()).join(cpu.select("correlation").unique(), on="correlation")
    return pl.concat([launched, cpu])


def _mtia_window(df: pl.DataFrame, r: HtaRules) -> pl.DataFrame:
    """HTA 0.6's filter_mtia_kernels_for_one_rank (with _fix_mtia_memory_kernels)."""
    df = df.with_row_index("_row")
    cats = df["cat"].to_list()
    cpu_events = df.filter(pl.Series([_CPU_EVENT_CATS.match(c) is not None for c in cats]))
    steps = cpu_events.filter(_is_step(r))
    if steps.height:
        start, end = steps["ts"].min(), steps["end"].max()
        cpu = cpu_events.filter((pl.col("ts") >= start) & (pl.col("end") <= end))
    else:
        cpu = cpu_events.clear()
    launched_by = set(cpu["correlation"].to_list()) - {-1}
    kernels = df.filter(
        pl.Series([_KERNEL_CATS.match(c) is not None for c in cats])
        & pl.col("correlation").is_in(sorted(launched_by))
    )
    all_steps = df.filter(_is_step(r))
    names = df["name"].to_list()
    memory = df.filter(pl.Series([r.memory.match(n) is not None for n in names]))
    inside = pl.lit(False)
    for ts, step_end in all_steps.select("ts", "end").iter_rows():
        inside = inside | pl.col("ts").is_between(ts, step_end)
    memory = memory.filter(inside).with_columns(
        stream=pl.when(pl.col("stream") == -1).then(pl.col("tid")).otherwise(pl.col("stream"))
    )
    kept = pl.concat([memory, cpu, kernels]).unique("_row", keep="first", maintain_order=True)
    return kept.drop("_row")


def _figures(rank: int, gpu: pl.DataFrame, r: HtaRules) -> HtaFigures:
    names = gpu["name"].to_list()
    kinds = {n: _kind(n, r) for n in set(names)}
    kind = np.array([kinds[n] for n in names], dtype=object) if names else np.array([])
    ts, end = gpu["ts"].to_numpy(), gpu["end"].to_numpy()
    merged = _merge(ts, end)
    kernel_time = int(merged[-1][1] - merged[0][0]) if merged else 0
    busy = sum(e - s for s, e in merged)
    compute = _merge(ts[kind == "compute"], end[kind == "compute"])
    comm = _merge(ts[kind == "comm"], end[kind == "comm"])
    compute_us = sum(e - s for s, e in compute)
    comm_us = sum(e - s for s, e in comm)
    overlap = _intersection(comm, compute)
    idle = kernel_time - busy
    return HtaFigures(
        rank=rank,
        comm_comp_overlap_pct=round(100 * overlap / comm_us, 2) if comm_us else None,
        idle_us=int(idle),
        compute_us=int(compute_us),
        non_compute_us=int(kernel_time - compute_us - idle),
        kernel_time_us=kernel_time,
        hta_version=r.release,
    )


def _kind(name: str, r: HtaRules) -> str:
    """HTA's get_kernel_type: the first of communication, memory, compute that matches."""
    if r.comm.match(name):
        return "comm"
    if r.memory.match(name):
        return "memory"
    if not r.not_compute.match(name):
        return "compute"
    return "other"


def _merge(ts: np.ndarray, end: np.ndarray) -> list[tuple[int, int]]:
    """HTA's merge_kernel_intervals: sorted by start, a new group when a start is after every
    earlier end (touching intervals join)."""
    if ts.size == 0:
        return []
    order = np.argsort(ts, kind="stable")
    ts, end = ts[order], end[order]
    reach = np.maximum.accumulate(end)
    new = np.r_[True, ts[1:] > reach[:-1]]
    starts = ts[new]
    ends = np.maximum.reduceat(end, np.flatnonzero(new))
    return [(int(s), int(e)) for s, e in zip(starts, ends, strict=True)]


def _intersection(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> int:
    total, i, j = 0, 0, 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        total += max(0, hi - lo)
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total
