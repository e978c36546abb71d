"""Ingest: find trace files, decode them, and hand the engine integer-ns columns."""

from tracecomm.ingest.discover import (
    RankAssignment,
    RankClaim,
    assign_ranks,
    find_traces,
    rank_from_filename,
)
from tracecomm.ingest.kineto import load_rank
from tracecomm.ingest.model import RankEvents, TraceMeta

__all__ = [
    "RankAssignment",
    "RankClaim",
    "RankEvents",
    "TraceMeta",
    "assign_ranks",
    "find_traces",
    "load_rank",
    "rank_from_filename",
]
