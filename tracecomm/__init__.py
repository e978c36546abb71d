"""tracecomm: why a distributed training run is slower than its GPUs.

``tracecomm.analyze(paths, **options) -> Report`` is the CLI's analysis for notebooks (its
options are the CLI's, as keywords), ``tracecomm.compare(paths, **options) -> Comparison`` its
comparison of runs, ``tracecomm.profile(run_dir, steps=...)`` records a training loop's steps
for them (``tracecomm.record``; torch only when it records); the command line is
``tracecomm``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tracecomm._version import __version__

if TYPE_CHECKING:
    from tracecomm.analysis.report import Report
    from tracecomm.record import profile
    from tracecomm.run.api import analyze, compare

__all__ = ["Report", "__version__", "analyze", "compare", "profile"]


def __getattr__(name: str) -> Any:
    # loaded on first use: the CLI imports this package and must start fast
    if name == "analyze":
        from tracecomm.run.api import analyze

        return analyze
    if name == "compare":
        from tracecomm.run.api import compare

        return compare
    if name == "profile":
        from tracecomm.record import profile

        return profile
    if name == "Report":
        from tracecomm.analysis.report import Report

        return Report
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
