import random

import numpy as np
import pytest

from tracecomm.engine.intervals import coverage, exposed_shares, measure


def _brute(
    intervals: list[tuple[int, int, int]], labels: set[int], lo: int, hi: int, combine: str
) -> int:
    """Count each integer ns t in [lo, hi) whose membership satisfies the expression."""
    total = 0
    for t in range(lo, hi):
        inside = {lab for s, e, lab in intervals if s <= t < e}
        a, b = 0 in inside, 1 in inside
        total += {"a": a, "b": b, "a&b": a and b, "a|b": a or b, "a-b": a and not b}[combine]
    return total


Intervals = list[tuple[int, int, int]]
Arrays = tuple[np.ndarray, np.ndarray, np.ndarray]


def _random_intervals(rng: random.Random, most: int, labels: int) -> tuple[Intervals, Arrays]:
    """Up to ``most`` intervals in [0, 260) with labels below ``labels``, and as arrays."""
    intervals = []
    for _ in range(rng.randint(0, most)):
        s = rng.randint(0, 200)
        intervals.append((s, s + rng.randint(0, 60), rng.randint(0, labels - 1)))
    columns = (np.array([i[k] for i in intervals], dtype=np.int64) for k in range(3))
    return intervals, tuple(columns)  # type: ignore[return-value]


def test_measure_matches_brute_force_on_random_intervals() -> None:
    rng = random.Random(7)
    for _ in range(60):
        intervals, (starts, ends, labels) = _random_intervals(rng, 12, 2)
        cov = coverage(starts, ends, labels, 2)
        windows = [(rng.randint(-20, 150), 0) for _ in range(5)]
        windows = [(lo, lo + rng.randint(0, 120)) for lo, _ in windows]
        lo = np.array([w[0] for w in windows], dtype=np.int64)
        hi = np.array([w[1] for w in windows], dtype=np.int64)
        a, b = cov.covered[:, 0], cov.covered[:, 1]
        for expr, mask in {"a": a, "b": b, "a&b": a & b, "a|b": a | b, "a-b": a & ~b}.items():
            got = measure(cov, mask, lo, hi).tolist()
            want = [_brute(intervals, {0, 1}, w0, w1, expr) for w0, w1 in windows]
            assert got == want, (expr, intervals, windows)


def test_empty_input_measures_zero() -> None:
    empty = np.array([], dtype=np.int64)
    cov = coverage(empty, empty, empty, 3)
    got = measure(cov, cov.covered[:, 0], np.array([0]), np.array([100]))
    assert got.tolist() == [0]


def _brute_shares(intervals: list[tuple[int, int, int]]) -> list[float]:
    """Each ns goes to the intervals of the lowest class covering it, split evenly."""
    shares = [0.0] * len(intervals)
    for t in range(0, 300):
        inside = [i for i, (s, e, _) in enumerate(intervals) if s <= t < e]
        if not inside:
            continue
        top = min(intervals[i][2] for i in inside)
        owners = [i for i in inside if intervals[i][2] == top]
        for i in owners:
            shares[i] += 1 / len(owners)
    return shares


def test_exposed_shares_match_brute_force_and_add_up_to_the_union() -> None:
    rng = random.Random(11)
    for _ in range(60):
        intervals, (starts, ends, ranks) = _random_intervals(rng, 10, 3)
        got = exposed_shares(starts, ends, ranks, 3)
        assert got.tolist() == pytest.approx(_brute_shares(intervals)), intervals
        union = sum(1 for t in range(300) if any(s <= t < e for s, e, _ in intervals))
        assert got.sum() == pytest.approx(union)
        # a share is never more than the interval's own length
        assert (got <= ends - starts + 1e-9).all()
