"""Budgets of the CI gate: how much each figure may get worse, and the noise floor below which
a change never counts. Values come from flags or a ``[check]`` table in tracecomm.toml."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

# figure -> (unit, +1 when higher is worse / -1 when lower is worse)
FIGURES: dict[str, tuple[str, int]] = {
    "step_time": ("ns", 1),  # the run's step time (metrics.md §8)
    "step_window": ("ns", 1),  # each rank's median step window, median over ranks
    "exposed_comm": ("ns", 1),
    "idle": ("ns", 1),
    "overlap": ("pct", -1),
    "mfu": ("ratio", -1),
    "straggler_delay": ("ns", 1),
}
TYPE_PREFIX = "exposed_comm."  # exposed_comm.ReduceScatter: the exposed_comm budget applies


class BudgetError(ValueError):
    """A budget value or key that cannot be understood (a usage error)."""


@dataclass(frozen=True)
class Budget:
    """``max_change``: the relative change allowed in the worse direction (0.05 = 5 %);
    ``noise_floor``: an absolute change (figure units) below which nothing regresses;
    ``limit``: an absolute bound on the current value (a max, or a min when lower is worse)."""

    max_change: float | None
    noise_floor: float
    limit: float | None = None


DEFAULT_BUDGETS: dict[str, Budget] = {
    "step_time": Budget(0.03, 200_000),  # 3 %, 0.2 ms
    "exposed_comm": Budget(0.05, 100_000),  # 5 %, 0.1 ms (each collective type too)
    "idle": Budget(0.10, 200_000),  # 10 %, 0.2 ms
    "overlap": Budget(0.05, 1.0),  # 5 % of its value, 1 percentage point
    "mfu": Budget(0.03, 0.005),  # 3 % of its value, 0.5 MFU points
    "straggler_delay": Budget(0.50, 500_000),  # 50 %, 0.5 ms
}

# flag / toml key -> (figure, field)
KEYS: dict[str, tuple[str, str]] = {
    "max_step_time_increase": ("step_time", "max_change"),
    "max_exposed_comm_increase": ("exposed_comm", "max_change"),
    "max_idle_increase": ("idle", "max_change"),
    "max_overlap_decrease": ("overlap", "max_change"),
    "max_mfu_decrease": ("mfu", "max_change"),
    "max_straggler_delay_increase": ("straggler_delay", "max_change"),
    "max_step_time": ("step_time", "limit"),
    "max_exposed_comm": ("exposed_comm", "limit"),
    "max_idle": ("idle", "limit"),
    "min_overlap": ("overlap", "limit"),
    "min_mfu": ("mfu", "limit"),
    "max_straggler_delay": ("straggler_delay", "limit"),
}

_TIME = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?\d+)?)\s*(ns|us|µs|ms|s)?\s*$")
_NS_PER = {"ns": 1, "us": 1_000, "µs": 1_000, "ms": 1_000_000, "s": 1_000_000_000, None: 1}


def budget_for(figure: str, budgets: Mapping[str, Budget]) -> Budget:
    if figure == "step_window" and figure not in budgets:
        # the step time's budget: the windows are the step seen per rank
        return replace(budgets["step_time"], limit=None)
    if figure.startswith(TYPE_PREFIX) and figure not in budgets:
        shared = budgets["exposed_comm"]
        return replace(shared, limit=None)  # a cap on the total is not a cap on each type
    return budgets[figure]


def apply(settings: Mapping[str, Any], budgets: Mapping[str, Budget]) -> dict[str, Budget]:
    """Budgets with ``settings`` (flag or toml keys, plus ``noise_floor = {figure = v}``)."""
    out = dict(budgets)
    for key, value in settings.items():
        if value is None:
            continue
        if key == "noise_floor":
            if not isinstance(value, Mapping):
                raise BudgetError("noise_floor must be a table: {figure = value}")
            for figure, floor in value.items():
                unit, _ = FIGURES.get(_base(figure), ("", 0))
                if not unit:
                    raise BudgetError(f"noise_floor: unknown figure {figure!r}")
                current = budget_for(figure, out)
                out[figure] = replace(current, noise_floor=parse_value(floor, unit, figure))
            continue
        if key not in KEYS:
            raise BudgetError(f"unknown budget {key!r}; known: {', '.join(sorted(KEYS))}")
        figure, field = KEYS[key]
        unit = "fraction" if field == "max_change" else FIGURES[figure][0]
        out[figure] = replace(out[figure], **{field: parse_value(value, unit, key)})
    return out


def parse_value(value: Any, unit: str, what: str) -> float:
    """'5%' or 0.05 (fractions); '12ms', '100us', '1.5s' or ns (times); 0.35 or '35%' (MFU);
    a percentage for overlap."""
    text = str(value).strip()
    try:
        if isinstance(value, bool):
            raise ValueError(text)
        if unit in ("fraction", "ratio"):
            number = float(text.rstrip("%"))
            number = number / 100 if text.endswith("%") else number
        elif unit == "pct":
            number = float(text.rstrip("%"))
        else:
            match = _TIME.match(text)
            if match is None:
                raise ValueError(text)
            number = float(match.group(1)) * _NS_PER[match.group(2)]
    except ValueError:
        raise BudgetError(f"{what}: cannot read {value!r} as a {_UNIT_WORDS[unit]}") from None
    # nan compares false with everything: a nan budget would let every regression pass
    if not math.isfinite(number) or number < 0 or (unit == "pct" and number > 100):
        raise BudgetError(f"{what}: {value!r} is not a {_UNIT_WORDS[unit]} (finite, not negative)")
    return number


_UNIT_WORDS = {
    "fraction": "relative change such as 5% or 0.05",
    "ratio": "fraction such as 0.35 or 35%",
    "pct": "percentage such as 70",
    "ns": "time such as 12ms, 100us or 2500000 (ns)",
}


def _base(figure: str) -> str:
    return "exposed_comm" if figure.startswith(TYPE_PREFIX) else figure
