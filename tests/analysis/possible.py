"""No impossible number in a report document: the house rule the straggler tests check."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

# signed on purpose: a clock offset or a change between two runs
_SIGNED = ("offset_ns", "change", "delta", "diff")
# not shares: an error or an excess can exceed 100 %
_UNBOUNDED_PCT = ("error_pct", "excess_pct", "vs_")


def impossible(doc: Any, path: str = "") -> Iterator[str]:
    """Paths of figures no run can have: a negative time (``*_ns``), a percentage outside
    0–100 (``*_pct``) or a share outside 0–1 (``*_share``)."""
    if isinstance(doc, dict):
        for key, value in doc.items():
            here = f"{path}/{key}"
            if isinstance(value, int | float) and not isinstance(value, bool):
                if _bad(key, value):
                    yield f"{here} = {value}"
            else:
                yield from impossible(value, here)
    elif isinstance(doc, list):
        for i, value in enumerate(doc):
            yield from impossible(value, f"{path}[{i}]")


def _bad(key: str, value: float) -> bool:
    if any(s in key for s in _SIGNED):
        return False
    if key.endswith("_ns"):
        return value < 0
    if key.endswith("_pct") and not any(s in key for s in _UNBOUNDED_PCT):
        return not 0 <= value <= 100
    if key.endswith("_share"):
        return not 0 <= value <= 1
    return False
