"""One step of one rank as lanes of device work, for the report's timeline view.

The same classes and window as the breakdown (metrics.md §2–§3): a step's window runs from its
first to its last device event; work outside it is clipped. Runs of same-class work on a lane
closer together than ``resolution`` merge into one segment (a plot cannot show them apart), so
the size stays bounded on real traces with thousands of kernels per step. The exposed spans are
exact: comm of each collective type not covered by compute, as in the figures.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import groupby
from typing import Literal

import numpy as np
import polars as pl

from tracecomm.doc import Doc, NonNegative, Positive
from tracecomm.engine.classify import COLL_TYPES, classify_with_comm
from tracecomm.engine.collectives import message_bytes
from tracecomm.engine.intervals import IntArray, coverage
from tracecomm.engine.options import BreakdownOptions
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
    return next(iter(step_timelines(linked, step_windows(linked, rank), (step,))), None)


def step_timelines(
    linked: pl.DataFrame, windows: pl.DataFrame, steps: Sequence[int]
) -> tuple[StepTimeline, ...]:
    """Each of ``steps`` that has device work, from the breakdown's linked device frame and
    step windows (``steps.step_windows``): one pass over the events for all of them (an event
    that runs across two windows is clipped to each)."""
    chosen = (
        windows.filter(pl.col("step").is_in(list(steps)) & pl.col("start_ns").is_not_null())
        .select("step", pl.col("start_ns").alias("w0"), pl.col("end_ns").alias("w1"))
        .sort("step")
        .with_columns(((pl.col("w1") - pl.col("w0")) // SEGMENTS_PER_STEP).clip(1).alias("res"))
    )
    if chosen.height == 0:
        return ()
    work = (
        linked.filter(pl.col("cls") != "sync")
        .select("start_ns", "end_ns", "cls", "coll_type", "device", "stream", "name")
        .join_where(chosen, pl.col("end_ns") > pl.col("w0"), pl.col("start_ns") < pl.col("w1"))
        .with_columns(
            (pl.col("start_ns").clip(pl.col("w0"), pl.col("w1")) - pl.col("w0")).alias("s"),
            (pl.col("end_ns").clip(pl.col("w0"), pl.col("w1")) - pl.col("w0")).alias("e"),
        )
        .filter(pl.col("e") > pl.col("s"))
    )
    lanes = _lanes(work)
    exposed = _exposed(work, chosen)
    return tuple(
        StepTimeline(
            step=step,
            start_ns=w0,
            window_ns=w1 - w0,
            resolution_ns=res,
            lanes=lanes.get(step, ()),
            exposed=exposed.get(step, ()),
        )
        for step, w0, w1, res in chosen.iter_rows()
    )


REPLAY_COLUMNS = (
    "start_ns",
    "end_ns",
    "cls",
    "coll_type",
    "device",
    "stream",
    "bytes",
    "group_size",
)


def replay_work(linked: pl.DataFrame, comm: pl.DataFrame, step: int) -> pl.DataFrame:
    """The device work launched in ``step`` (sync records left out), from the breakdown's
    linked device frame and comm rows, with each comm kernel's message ``bytes`` and
    ``group_size`` where the trace records them: the columns the projection's replay reads
    (``REPLAY_COLUMNS``), in start order."""
    meta = comm.lazy().select(
        "_row",
        message_bytes().alias("bytes"),
        pl.col("group_size").cast(pl.Int64),
    )
    return (
        linked.lazy()
        .filter((pl.col("cls") != "sync") & (pl.col("step") == step))
        .join(meta, on="_row", how="left")
        .sort("start_ns", "end_ns")
        .select(REPLAY_COLUMNS)
        .collect(engine="in-memory")  # one query (see engine.partition on the engine)
    )


def _lanes(work: pl.DataFrame) -> dict[int, tuple[TimelineLane, ...]]:
    """Per step, its lanes (by device and stream, nulls last), same-class runs closer than
    the step's resolution merged."""
    lane = ["step", "device", "stream"]
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
        & (pl.col("s") - pl.col("reach").shift(1).over(lane) < pl.col("res"))
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
    rows = merged.select(*lane, "s", "e", "cls", "coll_type", "kernels", "name").iter_rows()
    out: dict[int, list[TimelineLane]] = {}
    for (step, device, stream), runs in groupby(rows, key=lambda row: row[:3]):
        segments = tuple(TimelineSegment(*row[3:]) for row in runs)
        out.setdefault(step, []).append(TimelineLane(device, stream, segments))
    return {step: tuple(lanes) for step, lanes in out.items()}


def _exposed(work: pl.DataFrame, windows: pl.DataFrame) -> dict[int, tuple[ExposedSpan, ...]]:
    """Per step and collective type, the maximal spans of its comm not covered by compute:
    one sweep over all steps, each step's times shifted past the previous window's end so
    that no span runs from one step into the next."""
    types = [t for t in COLL_TYPES if t in set(work["coll_type"].drop_nulls().to_list())]
    if not types:
        return {}
    lengths = windows["w1"].to_numpy() - windows["w0"].to_numpy()
    shift = np.concatenate([[0], np.cumsum(lengths + 1)[:-1]]).astype(np.int64)
    at = dict(zip(windows["step"].to_list(), shift.tolist(), strict=True))
    comm = (pl.col("cls") == "comm") & pl.col("coll_type").is_in(types)
    relevant = work.filter((pl.col("cls") == "compute") | comm).with_columns(
        pl.col("step").replace_strict(at, return_dtype=pl.Int64).alias("shift")
    )
    starts = (relevant["s"] + relevant["shift"]).to_numpy().astype(np.int64)
    ends = (relevant["e"] + relevant["shift"]).to_numpy().astype(np.int64)
    label_values = (
        relevant.select(
            pl.when(pl.col("cls") == "compute")
            .then(0)
            .otherwise(
                pl.col("coll_type").replace_strict(
                    {t: i + 1 for i, t in enumerate(types)}, default=0, return_dtype=pl.Int64
                )
            )
        )
        .to_series()
        .to_numpy()
        .astype(np.int64)
    )
    cov = coverage(starts, ends, label_values, len(types) + 1)
    spans: list[tuple[int, int, str]] = []
    for i, coll_type in enumerate(types):
        mask = cov.covered[:, i + 1] & ~cov.covered[:, 0]
        spans.extend((s, e, coll_type) for s, e in _runs(cov.times, mask))
    steps = windows["step"].to_numpy()
    out: dict[int, list[ExposedSpan]] = {}
    for s, e, coll_type in sorted(spans, key=lambda x: (x[0], x[2])):
        k = int(np.searchsorted(shift, s, side="right")) - 1
        base = int(shift[k])
        out.setdefault(int(steps[k]), []).append(ExposedSpan(s - base, e - base, coll_type))
    return {step: tuple(found) for step, found in out.items()}


def _runs(times: IntArray, mask: np.ndarray) -> Sequence[tuple[int, int]]:
    """Maximal runs of selected elementary segments, as (start, end)."""
    if mask.size == 0:
        return []
    edges = np.diff(np.concatenate([[False], mask, [False]]).astype(np.int8))
    begin = np.flatnonzero(edges == 1)
    finish = np.flatnonzero(edges == -1)
    return list(zip(times[begin].tolist(), times[finish].tolist(), strict=True))
