"""One step of one rank as lanes of device work, for the report's timeline view.

The same classes and window as the breakdown (metrics.md §2–§3): a step's window runs from its
first to its last device event; work outside it is clipped. Runs of same-class work on a lane
closer together than ``resolution`` merge into one segment (a plot cannot show them apart), so
the size stays bounded on real traces with thousands of kernels per step. The exposed spans are
exact: comm of each collective type not covered by compute, as in the figures.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np
import polars as pl

from tracecomm.doc import Doc, NonNegative, Positive
from tracecomm.engine.classify import COLL_TYPES, classify_with_comm
from tracecomm.engine.collectives import message_bytes
from tracecomm.engine.intervals import IntArray, coverage
from tracecomm.engine.partition import BreakdownOptions
from tracecomm.engine.steps import link_launches, step_windows
from tracecomm.ingest.model import RankEvents

SEGMENTS_PER_STEP = 2000  # resolution = window / this


class TimelineSegment(Doc, frozen=True):
    start_ns: NonNegative  # from the step window's start
    end_ns: NonNegative
    cls: Literal["compute", "comm", "memory"]  # compute / comm / memory
    coll_type: str | None
    kernels: Positive  # device events merged into this segment
    name: str  # the longest of them


class TimelineLane(Doc, frozen=True):
    device: int | None
    stream: int | None
    segments: tuple[TimelineSegment, ...]


class ExposedSpan(Doc, frozen=True):
    start_ns: int
    end_ns: int
    coll_type: str

    @property
    def length_ns(self) -> int:
        return self.end_ns - self.start_ns


class StepTimeline(Doc, frozen=True):
    step: int
    start_ns: int  # absolute, on the rank's own clock
    window_ns: int
    resolution_ns: int
    lanes: tuple[TimelineLane, ...]
    exposed: tuple[ExposedSpan, ...]

    @property
    def exposed_ns(self) -> int:
        """Union of the exposed spans (types may overlap one another)."""
        spans = sorted((s.start_ns, s.end_ns) for s in self.exposed)
        total, reach = 0, -1
        for start, end in spans:
            if end > reach:
                total += end - max(start, reach)
                reach = end
        return total


def step_timeline(
    rank: RankEvents, step: int, opts: BreakdownOptions | None = None
) -> StepTimeline | None:
    """The step's lanes and exposed spans; None when the rank has no device work in it."""
    opts = opts or BreakdownOptions()
    device, _ = classify_with_comm(rank, opts.comm_patterns, opts.compute_patterns)
    linked = link_launches(device, rank)
    window = step_windows(linked, rank).filter(
        (pl.col("step") == step) & pl.col("start_ns").is_not_null()
    )
    if window.height == 0:
        return None
    start, end = int(window["start_ns"][0]), int(window["end_ns"][0])
    work = (
        linked.filter(
            (pl.col("cls") != "sync") & (pl.col("end_ns") > start) & (pl.col("start_ns") < end)
        )
        .with_columns(
            (pl.col("start_ns").clip(start, end) - start).alias("s"),
            (pl.col("end_ns").clip(start, end) - start).alias("e"),
        )
        .filter(pl.col("e") > pl.col("s"))
    )
    resolution = max(1, (end - start) // SEGMENTS_PER_STEP)
    return StepTimeline(
        step=step,
        start_ns=start,
        window_ns=end - start,
        resolution_ns=resolution,
        lanes=_lanes(work, resolution),
        exposed=_exposed(work),
    )


def step_work(rank: RankEvents, step: int, opts: BreakdownOptions | None = None) -> pl.DataFrame:
    """The device work launched in ``step`` (sync records left out), with each comm kernel's
    message ``bytes`` and ``group_size`` where the trace records them: what a replay of the
    step at other durations needs."""
    opts = opts or BreakdownOptions()
    device, comm = classify_with_comm(rank, opts.comm_patterns, opts.compute_patterns)
    linked = link_launches(device, rank).filter(
        (pl.col("cls") != "sync") & (pl.col("step") == step)
    )
    meta = comm.select(
        "_row",
        message_bytes().alias("bytes"),
        pl.col("group_size").cast(pl.Int64),
    )
    return linked.join(meta, on="_row", how="left").sort("start_ns", "end_ns")


def _lanes(work: pl.DataFrame, resolution: int) -> tuple[TimelineLane, ...]:
    lane = ["device", "stream"]
    ordered = work.sort([*lane, "s", "e"], nulls_last=True).with_columns(
        pl.col("e").cum_max().over(lane).alias("reach"),
        (pl.col("e") - pl.col("s")).alias("dur"),
    )
    same_run = (
        (pl.col("cls") == pl.col("cls").shift(1).over(lane))
        & (
            pl.col("coll_type").fill_null("")
            == pl.col("coll_type").fill_null("").shift(1).over(lane)
        )
        & (pl.col("s") - pl.col("reach").shift(1).over(lane) < resolution)
    )
    merged = (
        ordered.with_columns((~same_run.fill_null(False)).cum_sum().alias("run"))
        .group_by([*lane, "run"], maintain_order=True)
        .agg(
            pl.col("s").min(),
            pl.col("e").max(),
            pl.col("cls").first(),
            pl.col("coll_type").first(),
            pl.len().alias("kernels"),
            pl.col("name").sort_by("dur", descending=True).first(),
        )
    )
    return tuple(
        TimelineLane(
            device=key[0],
            stream=key[1],
            segments=tuple(
                TimelineSegment(r["s"], r["e"], r["cls"], r["coll_type"], r["kernels"], r["name"])
                for r in rows.iter_rows(named=True)
            ),
        )
        for key, rows in merged.group_by(lane, maintain_order=True)
    )


def _exposed(work: pl.DataFrame) -> tuple[ExposedSpan, ...]:
    """Per collective type, the maximal spans of its comm not covered by compute."""
    types = [t for t in COLL_TYPES if t in set(work["coll_type"].drop_nulls().to_list())]
    if not types:
        return ()
    compute = work.filter(pl.col("cls") == "compute")
    comm = work.filter((pl.col("cls") == "comm") & pl.col("coll_type").is_in(types))
    starts = np.concatenate([compute["s"].to_numpy(), comm["s"].to_numpy()]).astype(np.int64)
    ends = np.concatenate([compute["e"].to_numpy(), comm["e"].to_numpy()]).astype(np.int64)
    labels = np.concatenate(
        [
            np.zeros(compute.height, dtype=np.int64),
            comm["coll_type"].replace_strict({t: i + 1 for i, t in enumerate(types)}).to_numpy(),
        ]
    ).astype(np.int64)
    cov = coverage(starts, ends, labels, len(types) + 1)
    spans: list[ExposedSpan] = []
    for i, coll_type in enumerate(types):
        mask = cov.covered[:, i + 1] & ~cov.covered[:, 0]
        spans.extend(ExposedSpan(s, e, coll_type) for s, e in _runs(cov.times, mask))
    return tuple(sorted(spans, key=lambda x: (x.start_ns, x.coll_type)))


def _runs(times: IntArray, mask: np.ndarray) -> Sequence[tuple[int, int]]:
    """Maximal runs of selected elementary segments, as (start, end)."""
    if mask.size == 0:
        return []
    edges = np.diff(np.concatenate([[False], mask, [False]]).astype(np.int8))
    begin = np.flatnonzero(edges == 1)
    finish = np.flatnonzero(edges == -1)
    return list(zip(times[begin].tolist(), times[finish].tolist(), strict=True))
