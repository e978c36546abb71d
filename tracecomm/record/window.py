"""Which steps a recording covers, and what the profiler does at each step: pure, no torch.

Steps are numbered as ``torch.profiler`` numbers them: the count of ``step()`` calls before the
step (the first step is 0), which is also the ``N`` of the trace's ``ProfilerStep#N``.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass

# On demand, the window starts this many steps after the step where the ranks agreed: one
# step to leave the agreement behind, one of warm-up (CUPTI's start-up cost stays out of it).
LEAD_STEPS = 2


class Action(enum.Enum):
    """``torch.profiler.ProfilerAction`` by name, so this module needs no torch."""

    NONE = "NONE"
    WARMUP = "WARMUP"
    RECORD = "RECORD"
    RECORD_AND_SAVE = "RECORD_AND_SAVE"


@dataclass(frozen=True)
class Window:
    """Steps ``first`` to ``last`` recorded (both included)."""

    first: int
    last: int

    @property
    def steps(self) -> int:
        return self.last - self.first + 1

    def action(self, step: int) -> Action:
        """What the profiler does during ``step``: one step of warm-up before the window
        (none when the window starts at step 0), record through it, save at its last step."""
        if step == self.first - 1:
            return Action.WARMUP
        if step == self.last:
            return Action.RECORD_AND_SAVE
        if self.first <= step < self.last:
            return Action.RECORD
        return Action.NONE

    def label(self) -> str:
        return f"step {self.first}" if self.steps == 1 else f"steps {self.first}–{self.last}"


def window_of(steps: Iterable[int] | int) -> Window:
    """The window of ``steps``: ``range(10, 14)``, a list of consecutive steps, or a count N
    (the N steps after one of warm-up: 1 to N). Raises ``ValueError`` for anything else: a
    gap would record the steps between too."""
    if isinstance(steps, bool):
        raise ValueError(f"steps={steps!r}: a range of step numbers or a count of steps")
    if isinstance(steps, int):
        if steps <= 0:
            raise ValueError(f"steps={steps}: a positive count of steps")
        return Window(1, steps)
    try:
        wanted = sorted(set(steps))
    except TypeError:
        raise ValueError(f"steps={steps!r}: a range of step numbers or a count of steps") from None
    if not wanted:
        raise ValueError("steps: no step to record (an empty range)")
    if not all(isinstance(s, int) and not isinstance(s, bool) for s in wanted) or wanted[0] < 0:
        raise ValueError(f"steps={steps!r}: step numbers are whole numbers from 0")
    if wanted[-1] - wanted[0] + 1 != len(wanted):
        raise ValueError(
            f"steps={steps!r}: one run of consecutive steps (the profiler records every step "
            "between the first and the last)"
        )
    return Window(wanted[0], wanted[-1])


def on_demand_window(agreed_at: int, count: int) -> Window:
    """The ``count`` steps recorded after the ranks agreed at step ``agreed_at``."""
    first = agreed_at + LEAD_STEPS
    return Window(first, first + count - 1)
