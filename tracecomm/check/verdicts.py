"""Baseline against current: one verdict per figure, on the ranks both runs share."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from tracecomm.check.budgets import FIGURES, TYPE_PREFIX, Budget, budget_for
from tracecomm.check.figures import RankFigures, RunFigures
from tracecomm.text import compact_ranges

Verdict = Literal["regressed", "pass", "improved", "not comparable"]


class NothingShared(ValueError):
    """The baseline and the current run have no rank in common."""


@dataclass(frozen=True)
class FigureCheck:
    figure: str
    unit: str  # ns, pct, ratio
    baseline: float | None
    current: float | None
    delta: float | None  # current − baseline
    change: float | None  # delta / baseline (None when the baseline is 0 or absent)
    budget: Budget
    verdict: Verdict
    reason: str  # why, in words (names the threshold that was passed)


@dataclass(frozen=True)
class CheckResult:
    figures: tuple[FigureCheck, ...]
    shared_ranks: tuple[int, ...]
    notes: tuple[str, ...]  # what was not comparable
    baseline: str
    current: str

    @property
    def regressed(self) -> tuple[FigureCheck, ...]:
        return tuple(f for f in self.figures if f.verdict == "regressed")

    @property
    def passed(self) -> bool:
        return not self.regressed


def verdicts(base: RunFigures, current: RunFigures, budgets: Mapping[str, Budget]) -> CheckResult:
    shared = sorted(set(base.ranks) & set(current.ranks))
    if not shared:
        raise NothingShared(
            f"the baseline ({base.source}) and the current run share no rank with step figures"
        )
    notes = _notes(base, current, shared)
    types = sorted(
        {t for run in (base, current) for r in shared for t in run.ranks[r].exposed_by_type_ns}
    )
    figures: list[tuple[str, Callable[[RunFigures], float | None]]] = [
        ("step_time", lambda run: run.step_time_ns),
        ("step_window", _median(shared, lambda f: f.step_window_ns)),
        ("exposed_comm", _median(shared, lambda f: f.exposed_comm_ns)),
        *(
            (TYPE_PREFIX + t, _median(shared, lambda f, t=t: f.exposed_by_type_ns.get(t, 0)))  # type: ignore[misc]
            for t in types
        ),
        ("overlap", _median(shared, lambda f: f.overlap_pct)),
        ("idle", _median(shared, lambda f: f.idle_ns)),
        ("mfu", lambda run: run.mfu),
        ("straggler_delay", lambda run: max(run.ranks[r].root_delay_ns for r in shared)),
    ]
    checks = [
        _check(name, get(base), get(current), budget_for(name, budgets)) for name, get in figures
    ]
    for t in types:
        only = [
            side
            for side, run in (("baseline", base), ("current run", current))
            if all(t not in run.ranks[r].exposed_by_type_ns for r in shared)
        ]
        if only:
            notes.append(f"{t} does not occur in the {only[0]}: counted as 0 there")
    return CheckResult(tuple(checks), tuple(shared), tuple(notes), base.source, current.source)


def _median(
    ranks: Sequence[int], value: Callable[[RankFigures], float | None]
) -> Callable[[RunFigures], float | None]:
    def over(run: RunFigures) -> float | None:
        values = [v for r in ranks if (v := value(run.ranks[r])) is not None]
        return statistics.median(values) if values else None

    return over


def _check(figure: str, base: float | None, cur: float | None, budget: Budget) -> FigureCheck:
    unit, worse = FIGURES["exposed_comm" if figure.startswith(TYPE_PREFIX) else figure]
    if cur is None:
        return FigureCheck(
            figure, unit, base, cur, None, None, budget, "not comparable", "not in the current run"
        )
    beyond = budget.limit is not None and (cur - budget.limit) * worse > 0
    if base is None:
        verdict: Verdict = "regressed" if beyond else "not comparable"
        return FigureCheck(
            figure,
            unit,
            base,
            cur,
            None,
            None,
            budget,
            verdict,
            _limit_reason(budget, worse) if beyond else "not in the baseline",
        )
    delta = cur - base
    change = delta / abs(base) if base else None
    bad = delta * worse
    relative = budget.max_change is not None and (
        bad > budget.max_change * abs(base) and bad > budget.noise_floor
    )
    if relative or beyond:
        reason = []
        if relative:
            reason.append(
                f"worse by {_amount(bad, unit)}"
                + (f" ({100 * abs(change):.1f} %)" if change is not None else "")
                + f", over the {100 * (budget.max_change or 0):g} % budget and the "
                f"{_amount(budget.noise_floor, unit)} noise floor"
            )
        if beyond:
            reason.append(_limit_reason(budget, worse))
        return FigureCheck(
            figure, unit, base, cur, delta, change, budget, "regressed", "; ".join(reason)
        )
    improved = -bad > budget.noise_floor and (
        budget.max_change is None or -bad > budget.max_change * abs(base)
    )
    return FigureCheck(
        figure,
        unit,
        base,
        cur,
        delta,
        change,
        budget,
        "improved" if improved else "pass",
        "better beyond the noise" if improved else "within budget",
    )


def _limit_reason(budget: Budget, worse: int) -> str:
    word = "above the maximum" if worse > 0 else "below the minimum"
    return f"{word} of {budget.limit:g}"


def _amount(value: float, unit: str) -> str:
    if unit == "ns":
        return f"{value / 1e6:.3f} ms"
    if unit == "pct":
        return f"{value:.2f} points"
    return f"{value:.4f}"


def _notes(base: RunFigures, current: RunFigures, shared: Sequence[int]) -> list[str]:
    notes = [*base.notes, *current.notes]
    if base.world_size and current.world_size and base.world_size != current.world_size:
        notes.insert(
            0,
            f"the runs differ in world size (baseline {base.world_size} ranks, current run "
            f"{current.world_size}): the gate compares the ranks both have, of two different "
            "jobs; gate a run against a baseline of its own size",
        )
    for side, run, other in (("baseline", base, current), ("current run", current, base)):
        only = sorted(set(run.ranks) - set(other.ranks))
        if only:
            notes.append(f"ranks only in the {side} (left out): {_ranges(only)}")
    if base.steps != current.steps and base.steps and current.steps:
        notes.append(
            f"steps differ (baseline {_ranges(base.steps)}, current {_ranges(current.steps)}): "
            "each run's own steps are summarized by their median"
        )
    a, b = base.flops_per_token, current.flops_per_token
    if a and b and abs(a - b) > 0.01 * a:
        notes.insert(
            0,
            f"the runs differ in model (FLOPs per token: baseline {a:.4g}, current run {b:.4g}): "
            "a gate compares a job with itself; gate a run against a baseline of its own model",
        )
    if (base.mfu is None) != (current.mfu is None):
        side = "baseline" if base.mfu is None else "current run"
        notes.append(f"MFU is missing in the {side} (give the model FLOPs to both)")
    return notes


def _ranges(numbers: Sequence[int]) -> str:
    return compact_ranges(numbers) if numbers else "none"
