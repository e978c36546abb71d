"""Ingest: find trace files, decode them, and hand the engine integer-ns columns.

The decoders (polars, msgspec) load on first use, so finding files stays cheap: the CLI sizes
its process pool before the heavy imports."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tracecomm.ingest.discover import (
    RankAssignment,
    RankClaim,
    assign_ranks,
    find_traces,
    rank_from_filename,
)

if TYPE_CHECKING:
    from tracecomm.ingest.load import load_merged, load_rank
    from tracecomm.ingest.model import RankEvents, ReadOptions, TraceMeta

_LAZY = {
    "load_rank": "tracecomm.ingest.load",
    "load_merged": "tracecomm.ingest.load",
    "RankEvents": "tracecomm.ingest.model",
    "ReadOptions": "tracecomm.ingest.options",
    "TraceMeta": "tracecomm.ingest.model",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "RankAssignment",
    "RankClaim",
    "RankEvents",
    "ReadOptions",
    "TraceMeta",
    "assign_ranks",
    "find_traces",
    "load_merged",
    "load_rank",
    "rank_from_filename",
]
