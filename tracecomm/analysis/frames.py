"""The Report's tables as polars frames, for notebooks (``tracecomm.analyze(...).ranks``): the
same figures as the JSON document, one row per rank, per rank and step, per collective type,
per straggler candidate and per matched collective instance. Times in ns, as everywhere."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import polars as pl
from msgspec import structs

from tracecomm.analysis.kernels import KernelView
from tracecomm.analysis.rank import RankReport
from tracecomm.analysis.stragglers import Stragglers
from tracecomm.engine.model import PARTITION_FIELDS, WindowFigures

_FIGURES = PARTITION_FIELDS


def ranks_frame(ranks: Sequence[RankReport]) -> pl.DataFrame:
    """One row per analyzed rank: its analysis window's figures, then each figure's median over
    the included steps (``step_median_*``)."""
    rows = []
    for r in ranks:
        median = r.step_median if r.step_median else None
        rows.append(
            {
                "rank": r.rank,
                "host": r.host,
                "path": r.path,
                "timeline": r.timeline,
                "device": r.devices[0] if r.devices else None,
                "steps_included": r.steps_included if r.step_median else 0,
                **_window_row(r.window),
                **{f"step_median_{k}": getattr(median, k) if median else None for k in _FIGURES},
                "comm_kernels": r.comm_kernels,
                "partial": r.partial,
            }
        )
    return pl.DataFrame(rows, schema=_RANK_SCHEMA, orient="row")


def steps_frame(ranks: Sequence[RankReport]) -> pl.DataFrame:
    """One row per rank and profiler step, included or not (``included``, ``complete``)."""
    rows = [
        {
            "rank": r.rank,
            "step": s.step,
            "complete": s.complete,
            "included": s.included,
            "incomplete_reason": s.incomplete_reason,
            **_window_row(s.window),
        }
        for r in ranks
        for s in r.steps
    ]
    return pl.DataFrame(rows, schema=_STEP_SCHEMA, orient="row")


def by_type_frame(types: Sequence[Any]) -> pl.DataFrame:
    """Per collective type over all ranks (sums of the ranks' analysis windows)."""
    rows = [structs.asdict(t) for t in types]
    return pl.DataFrame(rows, schema=_TYPE_SCHEMA, orient="row")


def straggler_frame(found: Stragglers | None) -> pl.DataFrame:
    """metrics.md §6 per rank, by root delay (largest first); empty without matching."""
    rows = [structs.asdict(r) for r in found.ranks] if found else []
    return pl.DataFrame(rows, schema=_STRAGGLER_SCHEMA, orient="row")


def kernels_frame(view: KernelView | None) -> pl.DataFrame:
    """The top kernels of each class (and collective type) over the ranks (metrics.md §15):
    one row per kernel name."""
    rows = [
        {"cls": g.cls, "coll_type": g.coll_type, **structs.asdict(k)}
        for g in (view.groups if view is not None else ())
        for k in g.top
    ]
    return pl.DataFrame(rows, schema=_KERNEL_SCHEMA, orient="row")


def _window_row(window: WindowFigures | None) -> dict[str, Any]:
    figures = window.figures if window else None
    return {
        "start_ns": window.start_ns if window else None,
        "end_ns": window.end_ns if window else None,
        **{k: getattr(figures, k) if figures else None for k in _FIGURES},
        "overlap_pct": figures.overlap_pct if figures else None,
        "busy_pct": figures.busy_pct if figures else None,
    }


_WINDOW_SCHEMA: dict[str, Any] = {
    "start_ns": pl.Int64,
    "end_ns": pl.Int64,
    **dict.fromkeys(_FIGURES, pl.Int64),
    "overlap_pct": pl.Float64,
    "busy_pct": pl.Float64,
}
_RANK_SCHEMA: dict[str, Any] = {
    "rank": pl.Int64,
    "host": pl.String,
    "path": pl.String,
    "timeline": pl.String,
    "device": pl.String,
    "steps_included": pl.Int64,
    **_WINDOW_SCHEMA,
    **{f"step_median_{k}": pl.Int64 for k in _FIGURES},
    "comm_kernels": pl.Int64,
    "partial": pl.Boolean,
}
_STEP_SCHEMA: dict[str, Any] = {
    "rank": pl.Int64,
    "step": pl.Int64,
    "complete": pl.Boolean,
    "included": pl.Boolean,
    "incomplete_reason": pl.String,
    **_WINDOW_SCHEMA,
}
_TYPE_SCHEMA: dict[str, Any] = {
    "coll_type": pl.String,
    "kernels": pl.Int64,
    "ranks": pl.Int64,
    "comm_ns": pl.Int64,
    "exposed_comm_ns": pl.Int64,
}
_STRAGGLER_SCHEMA: dict[str, Any] = {
    "rank": pl.Int64,
    "times_last": pl.Int64,
    "times_last_share": pl.Float64,
    "delay_caused_per_step_ns": pl.Int64,
    "inherited_delay_per_step_ns": pl.Int64,
    "wait_per_step_ns": pl.Int64,
    "compute_per_step_ns": pl.Int64,
    "compute_excess_ns": pl.Int64,
    "stage_excess_ns": pl.Int64,
    "compute_ratio": pl.Float64,
    "root_delay_ns": pl.Int64,
    "flagged": pl.Boolean,
}
_KERNEL_SCHEMA: dict[str, Any] = {
    "cls": pl.String,
    "coll_type": pl.String,
    "name": pl.String,
    "ranks": pl.Int64,
    "count": pl.Int64,
    "total_ns": pl.Int64,
    "share_pct": pl.Float64,
    "count_per_step": pl.Float64,
    "ns_per_step": pl.Float64,
    "median_ns": pl.Int64,
    "p95_ns": pl.Int64,
    "max_ns": pl.Int64,
}
