"""Timestamp text exactly as libkineto writes it, from integer ns without any float."""

from __future__ import annotations

# libkineto floors wall-clock time to a multiple of this (about three months) for the base.
BASE_PERIOD_NS = 7_889_238_000_000_000


class Clock:
    """Formats absolute ns as `ts` and ns spans as `dur` for one file."""

    __slots__ = ("base_ns", "relative", "unit")

    def __init__(self, time_format: str) -> None:
        self.relative = time_format == "relative"
        self.base_ns = 0
        # Every time the writer invents (CPU spans, syncs) must be expressible in the format.
        self.unit = 1 if self.relative else 1000

    def set_first(self, first_ns: int) -> None:
        """Pick the base below the file's earliest time, as libkineto does."""
        if self.relative:
            self.base_ns = (first_ns // BASE_PERIOD_NS) * BASE_PERIOD_NS

    def ts(self, t_ns: int) -> str:
        if self.relative:
            q, r = divmod(t_ns - self.base_ns, 1000)
            return f"{q}.{r:03d}"
        return str(t_ns // 1000)

    def dur(self, d_ns: int) -> str:
        if self.relative:
            q, r = divmod(d_ns, 1000)
            return f"{q}.{r:03d}"
        return str(d_ns // 1000)

    def floor(self, t_ns: int) -> int:
        return t_ns - t_ns % self.unit

    def ceil(self, t_ns: int) -> int:
        return -((-t_ns) // self.unit) * self.unit
