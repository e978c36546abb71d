"""Text every layer prints the same way: rank lists and numbers with their units.

The lowest floor of the house (standard library only): analysis writes messages with it, the
renderers format figures with it, and nothing in it knows a Report.
"""

from __future__ import annotations

from collections.abc import Iterable

DASH = "–"  # a figure that does not exist (never 0, which is a measurement)


def compact_ranges(numbers: Iterable[int]) -> str:
    """[1, 2, 3, 7, 9, 10] -> '1–3, 7, 9–10'."""
    parts: list[str] = []
    run: list[int] = []
    for n in sorted(numbers):
        if run and n != run[-1] + 1:
            parts.append(_span(run))
            run = []
        run.append(n)
    if run:
        parts.append(_span(run))
    return ", ".join(parts)


def rank_list(ranks: Iterable[int], shown: int = 8) -> str:
    """All ranks when few, else the first ones, the last one and how many: '64, 66, 68, 70,
    72, 74, …, 126 (32 ranks)'. Rank ranges of consecutive ranks stay ranges."""
    ordered = sorted(ranks)
    ranges = compact_ranges(ordered)
    if len(ordered) <= shown or ranges.count(",") < shown:
        return ranges
    head = ", ".join(map(str, ordered[: shown - 2]))
    return f"{head}, …, {ordered[-1]} ({len(ordered)} ranks)"


def _span(run: list[int]) -> str:
    return str(run[0]) if len(run) == 1 else f"{run[0]}{DASH}{run[-1]}"


def ms(ns: float | None) -> str:
    """Nanoseconds as milliseconds with three decimals and thousands separators."""
    return DASH if ns is None else f"{ns / 1e6:,.3f}"


def pct(value: float | None, digits: int = 1) -> str:
    return DASH if value is None else f"{value:.{digits}f}"


def duration(ns: float | None) -> str:
    """Seconds from 0.1 s up (four decimals), milliseconds below."""
    if ns is None:
        return DASH
    return f"{ns / 1e9:.4f} s" if ns >= 10**8 else f"{ns / 1e6:.3f} ms"
