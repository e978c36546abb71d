"""One rank's events for the exported trace (metrics.md §17): the chosen steps' device work,
the launches that queued it, the step annotations and the host activity the idle causes read,
plus what tracecomm adds on tracks of its own: exposed communication (by collective type) and
idle gaps (by cause), both exact per step window.

Everything here is per-rank engine work on one rank's events; laying them out as a Chrome trace
is the renderer's (``render.export``).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from itertools import pairwise

import numpy as np
import polars as pl

from tracecomm.engine.classify import COLL_TYPES, classify_with_comm
from tracecomm.engine.idle import DATALOADER_PREFIX, HostActivity, idle_gaps
from tracecomm.engine.intervals import coverage
from tracecomm.engine.options import BreakdownOptions
from tracecomm.engine.steps import SYNC_CALL, LaunchNames, link_launches, step_windows
from tracecomm.engine.sweep import work_coverage
from tracecomm.ingest.events import META_ARG_NAMES, META_SCHEMA
from tracecomm.ingest.model import RankEvents

# c10d collective names whose type (classify.coll_type_of) is each collective type: what the
# exported kernels carry as ``Collective name``, so a re-read types them alike
__all__ = ["COLLECTIVE_NAME", "META_ARG_NAMES", "RankExport", "rank_export"]

COLLECTIVE_NAME = {
    "AllGather": "all_gather",
    "ReduceScatter": "reduce_scatter",
    "AllReduce": "allreduce",
    "Broadcast": "broadcast",
    "Reduce": "reduce",
    "AllToAll": "all_to_all",
    "SendRecv": "send",
    "Other": "barrier",
}


@dataclass(frozen=True)
class ExportWindow:
    step: int
    start_ns: int  # the step's GPU window (§2)
    end_ns: int
    cpu_start_ns: int  # its ProfilerStep annotation
    cpu_end_ns: int
    cpu_tid: int | None


@dataclass(frozen=True)
class RankExport:
    """``device``: kind, name, cls, coll_type, device, stream, start_ns, end_ns, correlation
    (of the launch it is tied to; graph replays included), graph_id, graph_node, step, and
    the collective metadata columns the trace has (``ingest.events.META_SCHEMA``).
    ``launches``: name, tid, start_ns, end_ns, correlation, external_id, op (the launches of
    that work, and the synchronize calls in the windows). ``loaders``: the data loader's
    annotations in the windows (tid, start_ns, end_ns, name). ``exposed``: step, start_ns,
    end_ns, types (the collective types exposed then, '+'-joined). ``idle``: step, start_ns,
    end_ns, cause. Times are the rank's own clock, ns."""

    rank: int
    windows: tuple[ExportWindow, ...]
    device: pl.DataFrame = field(compare=False, repr=False)
    launches: pl.DataFrame = field(compare=False, repr=False)
    loaders: pl.DataFrame = field(compare=False, repr=False)
    exposed: pl.DataFrame = field(compare=False, repr=False)
    idle: pl.DataFrame = field(compare=False, repr=False)


def rank_export(
    rank: RankEvents, rank_id: int, steps: Collection[int], opts: BreakdownOptions | None = None
) -> RankExport:
    """The rank's events of ``steps`` (those it has a GPU window for)."""
    opts = opts or BreakdownOptions()
    device, comm = classify_with_comm(rank, opts.comm_patterns, opts.compute_patterns)
    names = LaunchNames.of(rank)
    linked = link_launches(device, rank, names)
    return export_steps(rank, linked, comm, step_windows(linked, rank, names), rank_id, steps)


def export_steps(
    rank: RankEvents,
    linked: pl.DataFrame,
    comm: pl.DataFrame,
    table: pl.DataFrame,
    rank_id: int,
    steps: Collection[int],
) -> RankExport:
    """``rank_export`` from the breakdown's frames: the linked device frame, the comm rows
    with their metadata and the step windows."""
    chosen = (
        table.filter(pl.col("step").is_in(list(steps)) & pl.col("start_ns").is_not_null())
        .join(
            rank.steps.unique("step", keep="first").select("step", pl.col("tid").alias("_tid")),
            on="step",
            how="left",
        )
        .sort("start_ns")
    )
    windows = tuple(
        ExportWindow(
            int(r["step"]),
            int(r["start_ns"]),
            int(r["end_ns"]),
            int(r["cpu_start_ns"]),
            int(r["cpu_end_ns"]),
            r["_tid"],
        )
        for r in chosen.iter_rows(named=True)
    )
    work = linked.filter(pl.col("cls") != "sync")
    inside = pl.lit(False)
    for w in windows:
        inside = inside | ((pl.col("end_ns") > w.start_ns) & (pl.col("start_ns") < w.end_ns))
    kept = work.filter(inside)
    # the collective metadata the trace gave each comm kernel (or its CPU op): the export
    # keeps every Kineto field of what it copies (process groups, sizes, dtype, Seq)
    meta = [c for c in META_SCHEMA if c in comm.columns]
    with_meta = (
        kept.join(comm.select("_row", *meta), on="_row", how="left", maintain_order="left")
        if meta and "_row" in kept.columns
        else kept
    )
    host = HostActivity.of(rank)
    return RankExport(
        rank=rank_id,
        windows=windows,
        device=with_meta.select(
            "kind",
            "name",
            "cls",
            "coll_type",
            "device",
            "stream",
            "start_ns",
            "end_ns",
            pl.col("launch_corr").alias("correlation"),
            *(c for c in ("graph_id", "graph_node") if c in kept.columns),
            "step",
            *(c for c in META_SCHEMA if c in with_meta.columns),
        ),
        launches=_launches(rank, kept, windows),
        loaders=_loaders(rank, windows),
        exposed=_exposed(kept, windows),
        idle=_idle(work, kept, table, windows, host),
    )


def _spans_overlap(frame: pl.DataFrame, windows: tuple[ExportWindow, ...]) -> pl.DataFrame:
    inside = pl.lit(False)
    for w in windows:
        inside = inside | ((pl.col("end_ns") > w.start_ns) & (pl.col("start_ns") < w.end_ns))
    return frame.filter(inside)


def _launches(
    rank: RankEvents, kept: pl.DataFrame, windows: tuple[ExportWindow, ...]
) -> pl.DataFrame:
    wanted = kept["launch_corr"]  # the launch each event is tied to
    launched = rank.launches.filter(pl.col("correlation").is_in(wanted.drop_nulls().implode()))
    syncs = _spans_overlap(rank.launches.filter(pl.col("name").str.contains(SYNC_CALL)), windows)
    return (
        pl.concat([launched, syncs])
        .unique(["correlation", "start_ns", "tid"], keep="first", maintain_order=True)
        .sort("start_ns", "tid")
    )


def _loaders(rank: RankEvents, windows: tuple[ExportWindow, ...]) -> pl.DataFrame:
    loaders = rank.cpu.filter(pl.col("name").str.starts_with(DATALOADER_PREFIX))
    return _spans_overlap(loaders.select("name", "tid", "start_ns", "end_ns"), windows)


def _exposed(work: pl.DataFrame, windows: tuple[ExportWindow, ...]) -> pl.DataFrame:
    """Per step window, the maximal runs of communication no compute covers (§3), each named by
    the collective types exposed then: the runs add up to the step's ``exposed_comm_ns``."""
    types = [t for t in COLL_TYPES if t in set(work["coll_type"].drop_nulls().to_list())]
    rows: dict[str, list[object]] = {"step": [], "start_ns": [], "end_ns": [], "types": []}
    compute = work.filter(pl.col("cls") == "compute")
    comm = work.filter((pl.col("cls") == "comm") & pl.col("coll_type").is_in(types))
    for w in windows:
        c = compute.filter((pl.col("end_ns") > w.start_ns) & (pl.col("start_ns") < w.end_ns))
        m = comm.filter((pl.col("end_ns") > w.start_ns) & (pl.col("start_ns") < w.end_ns))
        starts = np.concatenate([c["start_ns"].to_numpy(), m["start_ns"].to_numpy()])
        ends = np.concatenate([c["end_ns"].to_numpy(), m["end_ns"].to_numpy()])
        labels = np.concatenate(
            [
                np.zeros(c.height, dtype=np.int64),
                m["coll_type"].replace_strict({t: i + 1 for i, t in enumerate(types)}).to_numpy(),
            ]
        ).astype(np.int64)
        cov = coverage(
            np.clip(starts, w.start_ns, w.end_ns).astype(np.int64),
            np.clip(ends, w.start_ns, w.end_ns).astype(np.int64),
            labels,
            len(types) + 1,
        )
        if cov.covered.shape[0] == 0:
            continue
        bits = cov.covered[:, 1:].astype(np.int64) @ (1 << np.arange(len(types), dtype=np.int64))
        code = np.where(cov.covered[:, 0], 0, bits)  # 0: no exposed comm in the segment
        edges = np.flatnonzero(np.diff(np.concatenate([[0], code, [0]])) != 0)
        for lo, hi in pairwise(edges):
            if code[lo] == 0:
                continue
            rows["step"].append(w.step)
            rows["start_ns"].append(int(cov.times[lo]))
            rows["end_ns"].append(int(cov.times[hi]))
            rows["types"].append("+".join(t for i, t in enumerate(types) if code[lo] >> i & 1))
    return pl.DataFrame(
        rows,
        schema={"step": pl.Int64, "start_ns": pl.Int64, "end_ns": pl.Int64, "types": pl.String},
    )


def _idle(
    work: pl.DataFrame,
    kept: pl.DataFrame,
    table: pl.DataFrame,
    windows: tuple[ExportWindow, ...],
    host: HostActivity,
) -> pl.DataFrame:
    """Each step window's idle gaps with their cause (§10), as the breakdown finds them."""
    empty = pl.DataFrame(
        schema={"step": pl.Int64, "start_ns": pl.Int64, "end_ns": pl.Int64, "cause": pl.String}
    )
    if not windows or kept.height == 0:
        return empty
    types = [t for t in COLL_TYPES if t in set(kept["coll_type"].drop_nulls().to_list())]
    gaps = idle_gaps(
        work_coverage(kept, types), [[(w.start_ns, w.end_ns)] for w in windows], work, table, host
    )
    steps = pl.DataFrame({"w": list(range(len(windows))), "step": [w.step for w in windows]})
    return (
        gaps.join(steps, on="w")
        .select("step", pl.col("g0").alias("start_ns"), pl.col("g1").alias("end_ns"), "cause")
        .sort("start_ns")
    )
