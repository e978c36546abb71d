"""A task that makes a pool worker import the per-rank code before the first rank arrives.

Kept apart from tracecomm.worker so that the main process can submit it without importing
the decoders itself."""

from __future__ import annotations


def warm() -> None:
    import tracecomm.worker  # noqa: F401
