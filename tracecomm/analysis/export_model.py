"""The exported trace's values in the Report (metrics.md §17); ``analysis.export`` builds them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import polars as pl

if TYPE_CHECKING:
    from tracecomm.engine.export import RankExport


@dataclass(frozen=True)
class Marker:
    """An instant event: ``rank`` None is global (the whole trace), else on that rank's
    process; at ``at_ns`` (own clock of the rank, or the export's start when None)."""

    name: str
    text: str
    rank: int | None = None
    at_ns: int | None = None
    severity: str = "info"  # info / warning / error


@dataclass(frozen=True)
class ExportedRank:
    rank: int
    role: str  # fastest / median / slowest / straggler / chosen
    host: str | None
    devices: tuple[str, ...]
    offset_ns: int  # subtracted from the rank's times: the clock-aligned timeline (§5)
    events: RankExport | None
    # waits inside its collectives in those steps, on its own clock: start_ns, wait_ns, kind
    waits: pl.DataFrame = field(compare=False, repr=False)
    reason: str | None = None  # why it has no events


@dataclass(frozen=True)
class TraceExport:
    steps: tuple[int, ...]
    ranks: tuple[ExportedRank, ...]
    markers: tuple[Marker, ...]
    reason: str | None = None  # why nothing could be exported
