"""Machine-readable renderers: JSON (one document) and CSV (the per-rank table)."""

from __future__ import annotations

import csv
import io
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import msgspec
import orjson
import polars as pl

from tracecomm.analysis.model import MedianFigures
from tracecomm.analysis.report import Report, report_json
from tracecomm.doc import NCCL_SCHEMA_VERSION
from tracecomm.engine.model import PARTITION_FIELDS, Figures
from tracecomm.nccl.diagnose import NcclDocument
from tracecomm.render import View
from tracecomm.text import csv_safe, json_safe

if TYPE_CHECKING:
    from tracecomm.nccl.diagnose import NcclSummary

_FIGURE_COLUMNS = PARTITION_FIELDS


def render_json(report: Report, view: View) -> bytes:
    return json_safe(report_json(report, view.top) + b"\n")


def render_nccl_json(found: tuple[NcclSummary, Sequence[str]], view: View) -> bytes:
    """``tracecomm nccl --format json``: the NCCL section alone, in its own envelope."""
    summary, warnings = found
    doc = NcclDocument("tracecomm-nccl", NCCL_SCHEMA_VERSION, summary, tuple(warnings))
    return json_safe(orjson.dumps(msgspec.to_builtins(doc), option=orjson.OPT_INDENT_2) + b"\n")


def render_csv(report: Report, view: View) -> bytes:
    """The table ``view.table`` names (``render.tables.CSV_TABLES``): by default one row per
    analyzed rank, the analysis window's figures, then the median step's."""
    if view.table != "ranks":
        return _frame_csv(_table(report, view))
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
    for rank in report.ranks:
        window = rank.window
        figures = window.figures if window else None
        median = rank.step_median if rank.step_median else None
        writer.writerow(
            [
                rank.rank,
                csv_safe(rank.path),
                rank.timeline,
                rank.steps_included if rank.step_median else 0,
                *_values(figures),
                _pct(figures.overlap_pct if figures else None),
                _pct(figures.busy_pct if figures else None),
                *_values(median),
                rank.comm_kernels,
            ]
        )
    return out.getvalue().encode()


def _values(figures: Figures | MedianFigures | None) -> list[object]:
    return [getattr(figures, c) if figures else "" for c in _FIGURE_COLUMNS]


def _pct(value: float | None) -> str:
    return "" if value is None else f"{value:.2f}"


def render_parquet(report: Report, view: View) -> bytes:
    """The table ``view.table`` names as Parquet (ranks: the Report's ranks frame), columns
    typed as the frame has them (times in ns)."""
    frame = _table(report, view)
    out = io.BytesIO()
    frame.write_parquet(out)
    return out.getvalue()


def _table(report: Report, view: View) -> pl.DataFrame:
    """The Report's own frames (analysis.frames): the same figures as the JSON document; the
    instances are the run's (a saved document holds none)."""
    from tracecomm.analysis.frames import kernels_frame

    frames: dict[str, Callable[[], pl.DataFrame]] = {
        "ranks": report.ranks_frame,
        "steps": report.steps_frame,
        "types": report.by_type_frame,
        "stragglers": report.straggler_frame,
        "instances": lambda: _instances(view),
        "kernels": lambda: kernels_frame(report.kernels),
    }
    return frames[view.table]()


def _instances(view: View) -> pl.DataFrame:
    """Every matched collective instance per rank, clock-aligned: the run's (a saved document
    holds none)."""
    matching = view.side.matching if view.side is not None else None
    return matching.aligned if matching is not None else pl.DataFrame()


def _frame_csv(frame: pl.DataFrame) -> bytes:
    """A frame as CSV; its text made visible and never read as a spreadsheet formula, nested
    values as JSON text."""
    safe = frame.with_columns(
        pl.col(c).map_elements(csv_safe, return_dtype=pl.String)
        for c, dtype in frame.schema.items()
        if dtype == pl.String
    ).with_columns(
        pl.col(c).map_elements(
            lambda v: orjson.dumps(v.to_list() if isinstance(v, pl.Series) else v).decode(),
            return_dtype=pl.String,
        )
        for c, dtype in frame.schema.items()
        if isinstance(dtype, (pl.List, pl.Struct, pl.Array))
    )
    return safe.write_csv().encode()
