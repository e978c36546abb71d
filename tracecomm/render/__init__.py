"""Renderers: each turns one typed result into bytes in one format and computes nothing.

Picked by name from the tables in ``render.tables`` (pyinstrument's way):
``REPORT[fmt](report, view)``. The CLI decides where the bytes go; ``View`` says what the
destination can show.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tracecomm.analysis.model import Side


@dataclass(frozen=True)
class View:
    """What the output can show."""

    width: int | None = None  # a terminal's columns; None: not a terminal (each view's width)
    color: bool | None = None  # True: a terminal, colours on; None: as the environment says
    top: int | None = None  # straggler rows to list (terminal default 8; JSON: all)
    brief: bool = False  # the bottom line alone (terminal)
    table: str = "ranks"  # which table CSV writes (analyze --table)
    # what a run analyzed now has besides its report (the matched instances for ``--table
    # instances``, the exported events); a saved document has none of it
    side: Side | None = None
