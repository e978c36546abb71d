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


@dataclass(frozen=True)
class ViewRequest:
    """Which views the command shows, so the first pass takes what they need (it travels to
    every worker: small and picklable)."""

    timelines: bool = False  # the HTML report's timeline, --detail timeline
    export: bool = False  # tracecomm export
    export_ranks: tuple[int, ...] = ()  # () = any: the analysis chooses them later
    export_steps: tuple[int | None, int | None] | None = None  # None: the typical step, later
