"""When each member of a shared wait arrived (metrics.md §6, arrivals).

A collective or a send/recv pair is a shared wait: nobody leaves it before the last member
arrived. On GPU traces a member that arrives early usually waits *inside* its kernel (NCCL
kernels start and spin), so its arrival is its kernel's start. Some runs wait *before* the
kernel instead: the CPU holds the launch until a peer is ready (a blocking receive, a barrier,
a host-side all-reduce), the GPU idles, and the kernels of the waiting members start together
when the last one comes. Their kernel starts then tell nothing; their arrival is the end of
their previous device work, the start of the idle gap before the kernel.

The rule, per instance with kernel starts ``s_r``, idle gaps before them ``g_r`` and latest
start ``S``: member r *waited before its kernel* when ``g_r > floor_r`` and
``g_r > OUTSIDE_RATIO · (S − s_r)`` (the gap dwarfs any wait inside the kernel). The instance is
a rendezvous before the kernels when two members waited before their kernels, or one did and
another member's kernel started within ``floor`` of the latest (a lone late launch after a gap
is the rank's own host work, not a wait), and when the arrivals that gives spread out far more
than the kernel starts do (more than ``OUTSIDE_RATIO`` times, plus ``floor``): ranks whose CPUs
all come back from the same host work launch together after equal gaps, and nobody waited for
anybody. In a rendezvous, ``arrival_r = s_r − g_r`` for the members that waited before their
kernels; everywhere else ``arrival_r = s_r``.

A kernel of an instance that is not synchronized (below) is no wait and no work that ends one:
when it sits alone between an idle gap and the next kernel (a call in a group of one launched
as the CPU comes back from a wait), the idle gap before it and its own time count toward the
next kernel's gap (``look_through``).

An instance is *synchronized* when no member's kernel ended before the last member arrived
(within ``floor``). One that is not cannot have been a rendezvous of these ranks (a call in a
group of one, a timing the trace records differently); it is counted, and left out of the
straggler figures and the replay. ``floor_r`` is ``FLOOR_NS`` or twice the clock alignment error
of r's host, whichever is larger: differences below it are clock noise.
"""

from __future__ import annotations

from collections.abc import Mapping

import polars as pl

OUTSIDE_RATIO = 10
FLOOR_NS = 50_000


def with_arrivals(
    frame: pl.DataFrame,
    instance: list[str],
    floor_by_rank: Mapping[int, int],
    check_sync: bool = True,
) -> pl.DataFrame:
    """``frame``: one row per (instance, member) with rank, start_ns, end_ns, idle_before_ns;
    adds ``arrival_ns`` and ``synchronized`` (per instance; all true when ``check_sync`` is
    off, as with raw clocks whose offsets would make every instance look unsynchronized)."""
    floors = pl.DataFrame(
        {"rank": list(floor_by_rank), "_floor": list(floor_by_rank.values())},
        schema={"rank": pl.Int64, "_floor": pl.Int64},
    )
    latest = pl.col("start_ns").max().over(instance)
    gap = pl.col("idle_before_ns").fill_null(0)
    floor = pl.col("_floor").fill_null(FLOOR_NS)
    marked = frame.join(floors, on="rank", how="left", maintain_order="left").with_columns(
        ((gap > floor) & (gap > OUTSIDE_RATIO * (latest - pl.col("start_ns")))).alias("_before"),
        ((latest - pl.col("start_ns")) <= floor.max().over(instance)).alias("_together"),
    )
    before = pl.col("_before").sum().over(instance)
    together = pl.col("_together").sum().over(instance)
    early = pl.when(pl.col("_before")).then(pl.col("start_ns") - gap).otherwise(pl.col("start_ns"))
    spread = pl.col("_early").max().over(instance) - pl.col("_early").min().over(instance)
    starts = pl.col("start_ns").max().over(instance) - pl.col("start_ns").min().over(instance)
    rendezvous = ((before >= 2) | ((before >= 1) & (together >= 2))) & (
        spread > OUTSIDE_RATIO * starts + floor.max().over(instance)
    )
    arrived = (
        marked.with_columns(early.alias("_early"))
        .with_columns(
            pl.when(rendezvous)
            .then(pl.col("_early"))
            .otherwise(pl.col("start_ns"))
            .alias("arrival_ns")
        )
        .drop("_early")
    )
    synced = (
        pl.col("end_ns").min().over(instance)
        >= pl.col("arrival_ns").max().over(instance) - floor.max().over(instance)
        if check_sync
        else pl.lit(True)
    )
    return arrived.with_columns(synced.alias("synchronized")).drop("_floor", "_before", "_together")


def look_through(kernels: pl.DataFrame) -> pl.DataFrame:
    """``kernels``: a rank's shared-wait kernels (rank, start_ns, end_ns, idle_before_ns,
    synchronized, and a ``_row`` id); the idle gap before each one extended back through an
    unsynchronized kernel right before it that itself followed an idle gap."""
    ordered = kernels.sort("rank", "start_ns", "_row")
    prev = {c: pl.col(c).shift(1).over("rank") for c in ("start_ns", "end_ns", "synchronized")}
    prev_idle = pl.col("idle_before_ns").fill_null(0).shift(1).over("rank")
    gap_start = pl.col("start_ns") - pl.col("idle_before_ns").fill_null(0)
    through = (
        prev["synchronized"].not_()
        & (prev_idle > 0)
        & (prev["end_ns"] >= gap_start)
        & (prev["start_ns"] < pl.col("start_ns"))
    )
    return ordered.with_columns(
        pl.when(through.fill_null(False))
        .then(pl.col("start_ns") - (prev["start_ns"] - prev_idle))
        .otherwise(pl.col("idle_before_ns"))
        .alias("idle_before_ns")
    )
