"""One module per command (or family): each a thin adapter over ``cli.flow``."""

from __future__ import annotations

import importlib

# in the order ``tracecomm --help`` lists them
ORDER = (
    "analyze",
    "ingest",
    "report",
    "export",
    "project",
    "compare",
    "check",
    "nccl",
    "crosscheck",
    "docs",
)


def register() -> None:
    """Import every command module: each registers its command on ``cli.app.app``."""
    for name in ORDER:
        importlib.import_module(f"{__name__}.{name}")
