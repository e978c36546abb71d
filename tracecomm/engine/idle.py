"""Where idle time goes (metrics.md §10): every idle gap of a window gets one cause.

A gap is a maximal run of the window with no compute, comm or memory work. Its causes are
checked in this order: ``pipeline_fill`` / ``pipeline_drain`` (a pipeline stage, before its
first / after its last compute kernel of the step), ``pipeline_wait`` (a stage's gap that ends
when a recv kernel starts), ``sync`` (a synchronize call on the launching thread overlaps the
gap), ``dataloader`` (a data-loader annotation overlaps it), ``host_bound`` (the kernel that
ends the gap was launched after the gap began), ``other``.

The order differs from metrics.md §10 in one place, on purpose: ``sync`` and ``dataloader`` come
before ``host_bound``. After a synchronize or while the data loader runs, the next kernel is
always launched after the GPU went idle, so with ``host_bound`` first those two causes could
never be seen; the question a user asks ("a synchronize, or the data loader?") is which CPU
activity made the launch late.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import polars as pl

from tracecomm.engine.intervals import Coverage
from tracecomm.engine.steps import LaunchNames, is_named
from tracecomm.ingest.model import RankEvents

IDLE_CAUSES = (
    "pipeline_fill",
    "pipeline_drain",
    "pipeline_wait",
    "sync",
    "dataloader",
    "host_bound",
    "other",
)
DATALOADER_PREFIX = "enumerate(DataLoader)"
_SPANS = {"tid": pl.Int64, "start_ns": pl.Int64, "end_ns": pl.Int64}


@dataclass(frozen=True)
class HostActivity:
    """The CPU events that explain idle gaps: synchronize calls and data-loader annotations."""

    syncs: pl.DataFrame  # tid, start_ns, end_ns
    loaders: pl.DataFrame  # tid, start_ns, end_ns

    @classmethod
    def of(cls, rank: RankEvents, names: LaunchNames | None = None) -> HostActivity:
        names = names or LaunchNames.of(rank)
        syncs = rank.launches.filter(is_named(names.sync_call))
        loaders = rank.cpu.filter(pl.col("name").str.starts_with(DATALOADER_PREFIX))
        spans = [pl.col(c).cast(t) for c, t in _SPANS.items()]
        return cls(*(f.select(spans) for f in (syncs, loaders)))

    @classmethod
    def empty(cls) -> HostActivity:
        none = pl.DataFrame(schema=_SPANS)
        return cls(none, none)


def idle_by_cause(
    cov: Coverage,
    windows: Sequence[Sequence[tuple[int, int]]],
    work: pl.DataFrame,
    steps: pl.DataFrame,
    host: HostActivity,
) -> list[dict[str, int] | None]:
    """Per window (several disjoint spans each), ns of idle time per cause; None for an empty
    window. ``work``: the linked device work (start/end, cls, coll_type, name, launch_ns,
    launch_tid, step) the coverage was built from; ``steps``: the step windows."""
    return cause_sums(idle_gaps(cov, windows, work, steps, host), windows)


def idle_gaps(
    cov: Coverage,
    windows: Sequence[Sequence[tuple[int, int]]],
    work: pl.DataFrame,
    steps: pl.DataFrame,
    host: HostActivity,
    compute: pl.DataFrame | None = None,
) -> pl.DataFrame:
    """Every idle gap of every window (``w``, ``g0``, ``g1``) with its ``cause``, and the
    work that ends it: its ``ender`` (name) and ``ender_corr`` (its launch's correlation),
    null for a gap the window's end cuts. ``compute``: ``compute_bounds(work)``, when the
    caller has it already."""
    gaps = _gaps(cov, windows)
    if gaps.height:
        bounds = compute if compute is not None else compute_bounds(work)
        return _causes(gaps, work, steps, host, bounds)
    return gaps.with_columns(
        pl.lit("").alias("cause"),
        pl.lit(None, pl.String).alias("ender"),
        pl.lit(None, pl.Int64).alias("ender_corr"),
    )


def cause_sums(
    causes: pl.DataFrame, windows: Sequence[Sequence[tuple[int, int]]]
) -> list[dict[str, int] | None]:
    """``idle_gaps`` summed per window and cause (exact integer sums, in numpy: a group-by on
    the cause's text cost a millisecond a rank)."""
    known = causes.filter(pl.col("cause").is_in(IDLE_CAUSES))
    code = known["cause"].cast(pl.Enum(IDLE_CAUSES)).to_physical().to_numpy().astype(np.int64)
    cell = known["w"].to_numpy() * len(IDLE_CAUSES) + code
    sums = np.zeros(len(windows) * len(IDLE_CAUSES), dtype=np.int64)
    np.add.at(sums, cell, (known["g1"] - known["g0"]).to_numpy())
    table = sums.reshape(len(windows), len(IDLE_CAUSES))
    return [
        dict(zip(IDLE_CAUSES, map(int, table[w]), strict=True)) if spans else None
        for w, spans in enumerate(windows)
    ]


def _gaps(cov: Coverage, windows: Sequence[Sequence[tuple[int, int]]]) -> pl.DataFrame:
    """Idle runs clipped to each span: w, g0, g1, and whether the run goes on past the span
    (then no kernel ends it inside the window)."""
    busy = cov.covered[:, :3].any(axis=1) if cov.covered.size else np.zeros(0, dtype=bool)
    edges = np.diff(np.concatenate([[False], ~busy, [False]]).astype(np.int8))
    run_start = cov.times[np.flatnonzero(edges == 1)]
    run_end = cov.times[np.flatnonzero(edges == -1)]
    rows: list[tuple[np.ndarray, ...]] = []
    for w, spans in enumerate(windows):
        for lo, hi in spans:
            first = np.searchsorted(run_end, lo, side="right")
            last = np.searchsorted(run_start, hi, side="left")
            g0 = np.maximum(run_start[first:last], lo)
            g1 = np.minimum(run_end[first:last], hi)
            keep = g1 > g0
            rows.append(
                (np.full(int(keep.sum()), w), g0[keep], g1[keep], (run_end[first:last] > hi)[keep])
            )
    if not rows:
        return pl.DataFrame(
            schema={"w": pl.Int64, "g0": pl.Int64, "g1": pl.Int64, "cut": pl.Boolean}
        )
    w_, g0_, g1_, cut_ = (np.concatenate(col) for col in zip(*rows, strict=True))
    return pl.DataFrame(
        {
            "w": w_.astype(np.int64),
            "g0": g0_.astype(np.int64),
            "g1": g1_.astype(np.int64),
            "cut": cut_.astype(bool),
        }
    )


def compute_bounds(work: pl.DataFrame) -> pl.DataFrame:
    """Per step: the first start and last end of the compute kernels it launched (``step``,
    ``first_compute``, ``last_compute``)."""
    return (
        work.select("cls", "step", "start_ns", "end_ns")
        .filter((pl.col("cls") == "compute") & pl.col("step").is_not_null())
        .group_by("step")
        .agg(
            pl.col("start_ns").min().alias("first_compute"),
            pl.col("end_ns").max().alias("last_compute"),
        )
    )


def _causes(
    gaps: pl.DataFrame,
    work: pl.DataFrame,
    steps: pl.DataFrame,
    host: HostActivity,
    compute: pl.DataFrame,
) -> pl.DataFrame:
    ender = _enders(work, gaps["g1"])
    gaps = (
        gaps.with_row_index("_i")
        .join(ender, left_on="g1", right_on="start_ns", how="left")
        .with_columns(
            pl.when(pl.col("cut")).then(None).otherwise(pl.col(c)).alias(c)
            for c in ("launch_ns", "launch_tid", "recv", "ender", "ender_corr")
        )
    )
    gaps = _with_step_bounds(gaps, compute, steps)
    stage = bool(work.select((pl.col("coll_type") == "SendRecv").any()).item())
    sync = _overlaps(gaps, host.syncs, by_thread=True)
    loader = _overlaps(gaps, host.loaders, by_thread=False)
    cause = (
        pl.when(pl.lit(stage) & (pl.col("g0") >= pl.col("last_compute")))
        .then(pl.lit("pipeline_drain"))
        .when(pl.lit(stage) & (pl.col("g1") <= pl.col("first_compute")))
        .then(pl.lit("pipeline_fill"))
        .when(pl.lit(stage) & pl.col("recv").fill_null(False))
        .then(pl.lit("pipeline_wait"))
        .when(sync)
        .then(pl.lit("sync"))
        .when(loader)
        .then(pl.lit("dataloader"))
        .when(pl.col("launch_ns") > pl.col("g0"))
        .then(pl.lit("host_bound"))
        .otherwise(pl.lit("other"))
    )
    return gaps.with_columns(cause.alias("cause"))


def _enders(work: pl.DataFrame, ends: pl.Series) -> pl.DataFrame:
    """Per gap end (``ends``), the device work starting then: its earliest launch (and thread,
    correlation and name), and whether a point-to-point receive is among it."""
    p2p = pl.col("coll_type") == "SendRecv"
    send_only = pl.col("name").str.contains(r"(?i)send") & ~pl.col("name").str.contains(r"(?i)recv")
    corr = pl.col("launch_corr") if "launch_corr" in work.columns else pl.col("correlation")
    return (
        work.filter(pl.col("start_ns").is_in(ends.implode()))
        # the test per row first: inside the aggregation it would run group by group
        .select("start_ns", "launch_ns", "launch_tid", "name", corr, (p2p & ~send_only).alias("_r"))
        .sort("launch_ns", nulls_last=True)
        .group_by("start_ns")
        .agg(
            pl.col("launch_ns").first(),
            pl.col("launch_tid").first(),
            pl.col("_r").any().alias("recv"),
            pl.col("name").first().alias("ender"),
            corr.first().alias("ender_corr"),
        )
    )


def _with_step_bounds(
    gaps: pl.DataFrame, compute: pl.DataFrame, steps: pl.DataFrame
) -> pl.DataFrame:
    """The step window a gap lies in (a gap between windows follows the earlier step: after
    its last compute), and that step's first and last compute (``compute_bounds``)."""
    windows = (
        steps.lazy()
        .filter(pl.col("start_ns").is_not_null())
        .select("step", pl.col("start_ns").alias("step_from"), pl.col("end_ns").alias("step_to"))
        .join(compute.lazy(), on="step", how="left")
        .sort("step_from")
    )
    return (  # one plan
        gaps.lazy()
        .sort("g0")
        .join_asof(windows, left_on="g0", right_on="step_from", strategy="backward")
        .with_columns(
            # between two step windows: after the earlier step's work, a drain
            pl.when(pl.col("g0") >= pl.col("step_to"))
            .then(pl.col("g0"))
            .otherwise(pl.col("last_compute"))
            .alias("last_compute")
        )
        .sort("_i")
        .collect(engine="in-memory")
    )


def _overlaps(gaps: pl.DataFrame, spans: pl.DataFrame, by_thread: bool) -> pl.Expr:
    """Whether one of ``spans`` (on the gap's launching thread, when known and asked) overlaps
    each gap: it starts before the gap ends and ends after the gap begins."""
    spans = spans.drop_nulls(["start_ns", "end_ns"])
    if spans.height == 0:
        return pl.lit(False)
    g0 = gaps["g0"].to_numpy()
    last = gaps["g1"].to_numpy() - 1
    start, end = spans["start_ns"].to_numpy(), spans["end_ns"].to_numpy()
    hit = _reached(start, end, last, g0)
    if by_thread:
        gap_tid = gaps["launch_tid"]
        known = gap_tid.is_not_null().to_numpy()
        gap_tid_np = gap_tid.fill_null(0).to_numpy()
        span_tid = spans["tid"]
        span_known = span_tid.is_not_null().to_numpy()
        span_tid_np = span_tid.fill_null(0).to_numpy()
        for tid in np.unique(gap_tid_np[known]):  # one pass per launching thread, not per gap
            mine = known & (gap_tid_np == tid)
            theirs = span_known & (span_tid_np == tid)
            hit[mine] = _reached(start[theirs], end[theirs], last[mine], g0[mine])
    return pl.lit(pl.Series(hit, dtype=pl.Boolean))


def _reached(start: np.ndarray, end: np.ndarray, t: np.ndarray, g0: np.ndarray) -> np.ndarray:
    """Per probe: whether a span starting at or before ``t`` ends after ``g0`` (the furthest end
    of the spans started by then, by a running maximum)."""
    if start.size == 0:
        return np.zeros(t.size, dtype=bool)
    order = np.argsort(start, kind="stable")
    reach = np.maximum.accumulate(end[order])
    idx = np.searchsorted(start[order], t, side="right") - 1
    return (idx >= 0) & (reach[np.maximum(idx, 0)] > g0)
