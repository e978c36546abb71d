"""The steps a recording covers and the profiler's action at each: pure, no torch."""

from __future__ import annotations

import pytest

from tracecomm.record.window import LEAD_STEPS, Action, Window, on_demand_window, window_of


def test_a_window_warms_up_one_step_records_and_saves_at_its_last() -> None:
    window = window_of(range(10, 14))
    assert window == Window(10, 13) and window.steps == 4 and window.label() == "steps 10–13"
    actions = [window.action(s) for s in range(8, 16)]
    assert actions == [
        Action.NONE,
        Action.WARMUP,
        Action.RECORD,
        Action.RECORD,
        Action.RECORD,
        Action.RECORD_AND_SAVE,
        Action.NONE,
        Action.NONE,
    ]


def test_a_window_from_step_0_has_no_warm_up_and_one_step_saves_at_once() -> None:
    assert [Window(0, 1).action(s) for s in range(3)] == [
        Action.RECORD,
        Action.RECORD_AND_SAVE,
        Action.NONE,
    ]
    assert Window(5, 5).action(5) is Action.RECORD_AND_SAVE and Window(5, 5).label() == "step 5"


def test_steps_given_as_a_count_a_list_or_a_range() -> None:
    assert window_of(3) == Window(1, 3)  # after one step of warm-up
    assert window_of([7, 5, 6]) == window_of(range(5, 8)) == Window(5, 7)


@pytest.mark.parametrize(
    ("steps", "said"),
    [
        ([1, 3], "one run of consecutive steps"),
        ([], "no step to record"),
        (0, "a positive count"),
        (True, "a range of step numbers or a count"),
        ([-1, 0], "whole numbers from 0"),
        ([1.5], "whole numbers from 0"),
        ("abc", "whole numbers from 0"),
    ],
)
def test_steps_that_are_not_one_run_are_refused(steps: object, said: str) -> None:
    with pytest.raises(ValueError, match=said):
        window_of(steps)  # type: ignore[arg-type]


def test_on_demand_starts_after_the_lead() -> None:
    assert on_demand_window(20, 3) == Window(20 + LEAD_STEPS, 22 + LEAD_STEPS)
