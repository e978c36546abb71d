"""Engine: classes, step windows and the per-rank partition. Reads no files, knows no other rank."""

from tracecomm.engine.breakdown import BreakdownOptions, breakdown
from tracecomm.engine.classify import COLL_TYPES
from tracecomm.engine.model import Figures, RankBreakdown, StepFigures, TypeFigures, WindowFigures

__all__ = [
    "COLL_TYPES",
    "BreakdownOptions",
    "Figures",
    "RankBreakdown",
    "StepFigures",
    "TypeFigures",
    "WindowFigures",
    "breakdown",
]
