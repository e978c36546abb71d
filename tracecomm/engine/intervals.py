"""Interval algebra on integer-ns half-open intervals, vectorized with numpy.

One sweep over every event boundary of a rank gives, per labelled class, whether each
elementary segment is covered. Any set expression of classes (union, intersection,
difference) then has a cumulative measure ``F(t)``, and its measure inside a window
``[a, b)`` is ``F(b) - F(a)``: all windows of a rank are answered from one sort.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]
FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class Coverage:
    """Which labels cover each elementary segment ``[times[i], times[i + 1])``."""

    times: IntArray  # sorted distinct boundaries, length n_segments + 1
    covered: BoolArray  # shape (n_segments, n_labels)

    @property
    def lengths(self) -> IntArray:
        return np.diff(self.times)


@dataclass(frozen=True)
class _Sweep:
    """The sorted boundaries of a set of labelled intervals: ``times`` are the distinct ones
    (segment i is ``[times[i], times[i + 1])``); ``count(label)`` how many intervals of that
    label cover each segment, made one label at a time (a count per boundary and label at once
    would be many bytes per boundary: a 2 GB trace has millions of them)."""

    times: IntArray
    rows: IntArray  # per segment, the last sorted boundary at its start
    labels: npt.NDArray[np.int32]  # per sorted boundary, its interval's label
    signs: npt.NDArray[np.int8]  # +1 a start, -1 an end

    @staticmethod
    def of(starts: IntArray, ends: IntArray, labels: npt.NDArray[np.integer]) -> _Sweep | None:
        """None when no interval has a length."""
        keep = ends > starts
        starts, ends, labels = starts[keep], ends[keep], labels[keep]
        if starts.size == 0:
            return None
        n = starts.size
        times = np.concatenate([starts, ends])
        order = np.argsort(times, kind="stable")
        sorted_times = times[order]
        del times
        is_start = order < n
        label_sorted = labels.astype(np.int32)[np.where(is_start, order, order - n)]
        sign = np.where(is_start, np.int8(1), np.int8(-1))
        del order, is_start
        # Several boundaries at one instant: the state after the last of them is the one that
        # holds.
        last_at_time = np.flatnonzero(np.diff(sorted_times, append=sorted_times[-1] + 1))
        return _Sweep(
            sorted_times[last_at_time].astype(np.int64), last_at_time[:-1], label_sorted, sign
        )

    def count(self, label: int) -> npt.NDArray[np.int32]:
        running = np.cumsum(np.where(self.labels == label, self.signs, np.int8(0)), dtype=np.int32)
        return np.asarray(running[self.rows], dtype=np.int32)


def coverage(
    starts: IntArray, ends: IntArray, labels: npt.NDArray[np.integer], n_labels: int
) -> Coverage:
    """Sweep: +1 at each start, -1 at each end, per label; a segment is covered where count > 0
    (``_Sweep``: one label at a time, a few bytes per boundary)."""
    sweep = _Sweep.of(starts, ends, labels)
    if sweep is None:
        return Coverage(np.zeros(1, dtype=np.int64), np.zeros((0, n_labels), dtype=bool))
    covered = np.empty((sweep.rows.size, n_labels), dtype=bool)
    for label in range(n_labels):
        covered[:, label] = sweep.count(label) > 0
    return Coverage(sweep.times, covered)


def measure(
    cov: Coverage, mask: BoolArray, window_starts: IntArray, window_ends: IntArray
) -> IntArray:
    """Length of the segments selected by ``mask`` inside each window ``[start, end)``."""
    if mask.size == 0:
        return np.zeros(window_starts.size, dtype=np.int64)
    cumulative = np.concatenate([[0], np.cumsum(cov.lengths * mask, dtype=np.int64)])
    return _cumulative_at(cov, mask, cumulative, window_ends) - _cumulative_at(
        cov, mask, cumulative, window_starts
    )


def _cumulative_at(
    cov: Coverage, mask: BoolArray, cumulative: IntArray, points: IntArray
) -> IntArray:
    n_segments = mask.size
    seg = np.searchsorted(cov.times, points, side="right") - 1
    inside = (seg >= 0) & (seg < n_segments)
    safe = np.clip(seg, 0, n_segments - 1)
    partial = np.where(inside & mask[safe], points - cov.times[safe], 0)
    before = np.where(seg < 0, 0, cumulative[np.clip(seg, 0, n_segments)])
    return np.asarray(before + partial, dtype=np.int64)


def weighted_measure(
    cov: Coverage,
    mask: BoolArray,
    window_starts: IntArray,
    window_ends: IntArray,
    weight_at: Callable[[IntArray], FloatArray],
) -> FloatArray:
    """Like ``measure``, with time weighted by a cumulative function (joules drawn by a GPU
    up to each instant): the weight of the selected segments inside each window."""
    if mask.size == 0:
        return np.zeros(window_starts.size, dtype=np.float64)
    at_bounds = weight_at(cov.times)
    cumulative = np.concatenate([[0.0], np.cumsum(np.diff(at_bounds) * mask)])

    def upto(points: IntArray) -> FloatArray:
        seg = np.searchsorted(cov.times, points, side="right") - 1
        inside = (seg >= 0) & (seg < mask.size)
        safe = np.clip(seg, 0, mask.size - 1)
        partial = np.where(inside & mask[safe], weight_at(points) - at_bounds[safe], 0.0)
        before = np.where(seg < 0, 0.0, cumulative[np.clip(seg, 0, mask.size)])
        return np.asarray(before + partial, dtype=np.float64)

    return upto(window_ends) - upto(window_starts)


def exposed_shares(
    starts: IntArray, ends: IntArray, ranks: npt.NDArray[np.integer], n_ranks: int
) -> FloatArray:
    """Per interval, its share of the time it was exposed: each elementary segment belongs to
    the intervals of the lowest ``ranks`` value (the highest priority: compute 0, comm 1,
    memory 2, as §3 orders them) covering it, split evenly among them. The shares of the
    intervals add up to the measure of their union; an interval hidden behind one of higher
    priority gets 0 there.

    Every interval's start and end is a boundary of the sweep, so its share is the difference
    of one cumulative function per priority at its two ends."""
    out = np.zeros(starts.size, dtype=np.float64)
    keep = ends > starts
    sweep = _Sweep.of(starts, ends, ranks)
    if sweep is None:
        return out
    s, e, r = starts[keep], ends[keep], ranks[keep].astype(np.int64)
    lengths = np.diff(sweep.times).astype(np.float64)
    counts = [sweep.count(k) for k in range(n_ranks)]
    owner = np.full(sweep.rows.size, n_ranks, dtype=np.int64)  # n_ranks: nobody
    for k in range(n_ranks - 1, -1, -1):  # the highest priority present wins
        owner = np.where(counts[k] > 0, k, owner)
    shares = np.zeros(s.size, dtype=np.float64)
    for k in range(n_ranks):
        mine = r == k
        if not mine.any():
            continue
        per = np.where(owner == k, lengths / np.maximum(counts[k], 1), 0.0)
        cumulative = np.concatenate([[0.0], np.cumsum(per)])
        a = np.searchsorted(sweep.times, s[mine])
        b = np.searchsorted(sweep.times, e[mine])
        shares[mine] = cumulative[b] - cumulative[a]
    out[keep] = shares
    return out
