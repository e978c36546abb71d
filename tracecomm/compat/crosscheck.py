"""Run HolisticTraceAnalysis itself on a run folder (``tracecomm crosscheck``); its import,
logging and slowness stay inside this module."""

from __future__ import annotations

import contextlib
import io
import logging
import math
import warnings
from dataclasses import dataclass
from pathlib import Path

from tracecomm.compat.hta import HtaFigures

FIGURES = ("comm_comp_overlap_pct", "idle_us", "compute_us", "non_compute_us", "kernel_time_us")


class HtaMissing(RuntimeError):
    """The optional extra is not installed."""


@dataclass(frozen=True)
class Comparison:
    rank: int
    figure: str
    tracecomm: float | None
    hta: float | None

    @property
    def agrees(self) -> bool:
        """Equal to the printed precision: 2 decimals for the overlap, whole µs otherwise."""
        if self.tracecomm is None or self.hta is None:
            return self.tracecomm is None and self.hta is None
        digits = 2 if self.figure == "comm_comp_overlap_pct" else 0
        return round(self.tracecomm, digits) == round(self.hta, digits)


@dataclass(frozen=True)
class Crosscheck:
    """tracecomm's --compat figures beside HTA's own, on one run folder."""

    run: str
    rows: tuple[Comparison, ...]


def run_hta(run: Path) -> dict[int, HtaFigures]:
    """HTA 0.5.0's get_comm_comp_overlap and get_temporal_breakdown on the folder."""
    try:
        from hta.trace_analysis import TraceAnalysis
    except ImportError as exc:
        raise HtaMissing(
            "crosscheck runs HolisticTraceAnalysis itself: pip install 'tracecomm[hta]'"
        ) from exc
    sink = io.StringIO()
    logging.disable(logging.CRITICAL)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(sink):
            warnings.simplefilter("ignore")
            analysis = TraceAnalysis(trace_dir=str(run))
            overlap = analysis.get_comm_comp_overlap(visualize=False)
            breakdown = analysis.get_temporal_breakdown(visualize=False)
    finally:
        logging.disable(logging.NOTSET)
    pct = {int(r["rank"]): r["comp_comm_overlap_pctg"] for _, r in overlap.iterrows()}
    out = {}
    for _, r in breakdown.iterrows():
        rank = int(r["rank"])
        value = pct.get(rank)
        out[rank] = HtaFigures(
            rank=rank,
            comm_comp_overlap_pct=None if value is None or math.isnan(value) else float(value),
            idle_us=int(r["idle_time(us)"]),
            compute_us=int(r["compute_time(us)"]),
            non_compute_us=int(r["non_compute_time(us)"]),
            kernel_time_us=int(r["kernel_time(us)"]),
        )
    return out


def compare(ours: list[HtaFigures], theirs: dict[int, HtaFigures]) -> list[Comparison]:
    rows = []
    for mine in ours:
        other = theirs.get(mine.rank)
        for figure in FIGURES:
            rows.append(
                Comparison(
                    mine.rank,
                    figure,
                    getattr(mine, figure),
                    getattr(other, figure) if other else None,
                )
            )
    return rows
