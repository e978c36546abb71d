"""The engine's options: polars-free, so a request can be checked before the heavy imports."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class BreakdownOptions:
    """Which steps form the analysis window (metrics.md §2)."""

    first_step: int | None = None  # inclusive ProfilerStep numbers; None = open
    last_step: int | None = None
    all_steps: bool = False  # include incomplete steps that launched device work
    comm_patterns: tuple[str, ...] = ()  # REGEX[=TYPE]: names that are communication
    compute_patterns: tuple[str, ...] = ()  # names that are compute whatever they look like
