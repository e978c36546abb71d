"""HolisticTraceAnalysis 0.5.0's figures, reproduced (metrics.md §9, ``--compat hta``).

HTA's definitions differ from tracecomm's own (metrics.md §1–3) on purpose, so users can check
one tool against the other. Replicated here, literally:

- every event with a ``dur`` and a ``cat`` (not ``Trace``) is read; ``ts`` is rounded up and
  ``ts + dur`` down to whole µs (HTA's fix for overlapping ns-resolution events);
- ``stream`` and ``correlation`` come from ``args`` (default −1); GPU work is ``stream ≥ 0`` with
  ``correlation ≥ 0``, plus ``Event Sync`` / ``Context Sync``;
- when the run holds more than one distinct ``ProfilerStep`` name, each rank keeps its CPU
  events that start before its last ProfilerStep and the GPU events whose correlation one of
  them carries (the last step is dropped);
- the figures then use every kept event with ``stream ≠ −1``: kernel time = last end − first
  start, idle = kernel time − |union|, compute = |union of compute kernels|, non-compute = the
  rest; overlap % = |U(comm) ∩ U(compute)| / |U(comm)|, rounded to 2 decimals; names are typed
  by HTA's own rules (comm ``^nccl.*Kernel``; memory ``^Memcpy|^Memset|^dma``; compute: none of
  ``^nccl.*Kernel``, ``.*Memcpy``, ``^Memset``, ``.*Sync``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import polars as pl

from tracecomm.ingest.salvage import read_trace_bytes

_COMM = re.compile(r"^nccl.*Kernel")
_MEMORY = re.compile(r"(^Memcpy)|(^Memset)|(^dma)")
_NOT_COMPUTE = re.compile(r"(^nccl.*Kernel)|(.*(Memcpy)|(Memset))|(.*Sync)")
_SYNCS = ("Event Sync", "Context Sync")


@dataclass(frozen=True)
class HtaFigures:
    """One rank, in HTA's units (µs) and rounding."""

    rank: int
    comm_comp_overlap_pct: float | None  # None: no communication kernel (HTA prints NaN)
    idle_us: int
    compute_us: int
    non_compute_us: int
    kernel_time_us: int


class _Event(msgspec.Struct, gc=False):
    cat: Any = None
    name: Any = None
    ts: Any = None
    dur: Any = None
    args: Any = None


class _Trace(msgspec.Struct, gc=False):
    traceEvents: list[_Event] | None = None


def rank_events(path: Path) -> pl.DataFrame:
    """The events HTA reads from one trace file, rounded as HTA rounds them."""
    raw = read_trace_bytes(path)
    try:
        events = msgspec.json.decode(raw, type=_Trace).traceEvents or []
    except (msgspec.DecodeError, msgspec.ValidationError):
        doc = msgspec.json.decode(raw.decode("utf-8", "replace").encode(), type=_Trace)
        events = doc.traceEvents or []
    rows = []
    for e in events:
        if e.dur is None or e.cat is None or e.cat == "Trace" or e.ts is None:
            continue
        args = e.args if isinstance(e.args, dict) else {}
        start = math.ceil(e.ts)
        end = math.floor(e.ts + e.dur)
        rows.append(
            (str(e.name), start, end, _int(args.get("stream")), _int(args.get("correlation")))
        )
    return pl.DataFrame(
        rows,
        schema={
            "name": pl.String,
            "ts": pl.Int64,
            "end": pl.Int64,
            "stream": pl.Int64,
            "correlation": pl.Int64,
        },
        orient="row",
    )


def _int(value: object) -> int:
    try:
        return int(value)  # type: ignore[call-overload]
    except (TypeError, ValueError):
        return -1


def hta_figures(ranks: Mapping[int, pl.DataFrame]) -> list[HtaFigures]:
    """HTA's overlap and temporal breakdown for every rank analyzed together."""
    steps = {n for df in ranks.values() for n in df["name"].unique() if "ProfilerStep" in n}
    out = []
    for rank, df in sorted(ranks.items()):
        kept = _drop_last_step(df) if len(steps) > 1 else df
        out.append(_figures(rank, kept.filter(pl.col("stream") != -1)))
    return out


def _drop_last_step(df: pl.DataFrame) -> pl.DataFrame:
    gpu = ((pl.col("stream") >= 0) & (pl.col("correlation") >= 0)) | pl.col("name").is_in(_SYNCS)
    cpu = df.filter(~gpu)
    last = cpu.filter(pl.col("name").str.contains("ProfilerStep", literal=True))["ts"].max()
    cpu = cpu.filter(pl.col("ts") < last) if last is not None else cpu.clear()
    launched = df.filter(gpu).join(cpu.select("correlation").unique(), on="correlation")
    return pl.concat([launched, cpu])


def _figures(rank: int, gpu: pl.DataFrame) -> HtaFigures:
    names = gpu["name"].to_list()
    kind = np.array([_kind(n) for n in names], dtype=object) if names else np.array([])
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
    )


def _kind(name: str) -> str:
    if _COMM.match(name):
        return "comm"
    if _MEMORY.match(name):
        return "memory"
    if not _NOT_COMPUTE.match(name):
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
    groups = np.cumsum(new) - 1
    starts = ts[new]
    ends = np.maximum.reduceat(end, np.flatnonzero(new))
    assert len(starts) == groups[-1] + 1
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
