"""Engine: classes, step windows and the per-rank partition. Reads no files, knows no other rank.

Its modules (polars, numpy) load on first use, so that importing the options stays cheap."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from tracecomm.engine.options import BreakdownOptions

if TYPE_CHECKING:
    from tracecomm.engine.classify import COLL_TYPES
    from tracecomm.engine.model import (
        Figures,
        RankBreakdown,
        StepFigures,
        TypeFigures,
        WindowFigures,
    )
    from tracecomm.engine.partition import breakdown

_LAZY = {
    "breakdown": "tracecomm.engine.partition",
    "COLL_TYPES": "tracecomm.engine.classify",
    "Figures": "tracecomm.engine.model",
    "RankBreakdown": "tracecomm.engine.model",
    "StepFigures": "tracecomm.engine.model",
    "TypeFigures": "tracecomm.engine.model",
    "WindowFigures": "tracecomm.engine.model",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


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
