"""Machine-readable renderers: JSON (one document) and CSV (the per-rank table)."""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from dataclasses import fields
from typing import TYPE_CHECKING

import orjson

from tracecomm.analysis.model import MedianFigures, Report
from tracecomm.engine.model import Figures
from tracecomm.render import View
from tracecomm.render.document import nccl_document, report_document
from tracecomm.text import csv_safe, json_safe

if TYPE_CHECKING:
    from tracecomm.nccl.diagnose import NcclSummary

_FIGURE_COLUMNS = tuple(f.name for f in fields(Figures))


def render_json(report: Report, view: View) -> bytes:
    document = report_document(report, view.top)
    return json_safe(orjson.dumps(document, option=orjson.OPT_INDENT_2) + b"\n")


def render_nccl_json(found: tuple[NcclSummary, Sequence[str]], view: View) -> bytes:
    """``tracecomm nccl --format json``: the NCCL section alone, in its own envelope."""
    summary, warnings = found
    doc = {
        "kind": "tracecomm-nccl",
        "schema_version": 2,
        "nccl": nccl_document(summary),
        "warnings": list(warnings),
    }
    return json_safe(orjson.dumps(doc, option=orjson.OPT_INDENT_2) + b"\n")


def render_csv(report: Report, view: View) -> bytes:
    """One row per analyzed rank: the analysis window's figures, then the median step's."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    median_columns = [f"step_median_{c}" for c in _FIGURE_COLUMNS]
    writer.writerow(
        [
            "rank",
            "path",
            "timeline",
            "steps",
            *_FIGURE_COLUMNS,
            "overlap_pct",
            "busy_pct",
            *median_columns,
            "comm_kernels",
        ]
    )
    for rank in report.rank_reports:
        window = rank.breakdown.window
        figures = window.figures if window else None
        median = rank.step_summary.median if rank.step_summary else None
        writer.writerow(
            [
                rank.rank,
                csv_safe(rank.path),
                rank.breakdown.timeline,
                rank.step_summary.steps if rank.step_summary else 0,
                *_values(figures),
                _pct(figures.overlap_pct if figures else None),
                _pct(figures.busy_pct if figures else None),
                *_values(median),
                rank.breakdown.comm_kernels,
            ]
        )
    return out.getvalue().encode()


def _values(figures: Figures | MedianFigures | None) -> list[object]:
    return [getattr(figures, c) if figures else "" for c in _FIGURE_COLUMNS]


def _pct(value: float | None) -> str:
    return "" if value is None else f"{value:.2f}"
