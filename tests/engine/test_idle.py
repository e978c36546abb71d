"""Idle time by cause (metrics.md §10, engine/idle.py) against a naive reference computed from
the generator's schedule alone: the ops, their launches and the recorded CPU calls."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tracecomm.engine import breakdown
from tracecomm.engine.idle import IDLE_CAUSES
from tracecomm.ingest import load_rank
from tracecomm.synth import fsdp_run
from tracecomm.synth.expected import (
    Interval,
    clip,
    is_complete,
    rank_window,
    step_window,
    subtract,
    union,
)
from tracecomm.synth.pp import dp_pp_run
from tracecomm.synth.schedule import Op, RankSpec, RunSpec
from tracecomm.synth.writer import write_run


def expected_idle(spec: RankSpec, window: Interval) -> dict[str, int]:
    """Each idle gap of the window, classified by the rules one at a time."""
    ops = [op for op in spec.all_ops() if op.recorded]
    busy = union([(op.start_ns, op.end_ns) for op in ops])
    stage = any(op.coll == "SendRecv" for op in ops)
    windows = sorted(
        (w, s) for s in spec.steps if is_complete(s) and (w := step_window(s)) is not None
    )
    out = dict.fromkeys(IDLE_CAUSES, 0)
    for g0, g1 in subtract(clip([window], window), busy):
        out[_cause(spec, ops, windows, stage, g0, g1, g1 < window[1])] += g1 - g0
    return out


def _cause(
    spec: RankSpec,
    ops: list[Op],
    windows: list[tuple[Interval, Any]],
    stage: bool,
    g0: int,
    g1: int,
    ended: bool,
) -> str:
    enders = sorted(
        (op for op in ops if ended and op.start_ns == g1),
        key=lambda op: (not op.launched, op.launch_ns),
    )
    first = enders[0] if enders and enders[0].launched else None
    if stage:
        (_, w1), step = max(((w, s) for w, s in windows if w[0] <= g0), key=lambda x: x[0])
        compute = [op for op in step.ops if op.kind == "compute" and op.recorded and op.launched]
        last = g0 if g0 >= w1 else max(op.end_ns for op in compute)
        if g0 >= last:
            return "pipeline_drain"
        if g1 <= min(op.start_ns for op in compute):
            return "pipeline_fill"
        if any(op.coll == "SendRecv" and op.p2p != "send" for op in enders):
            return "pipeline_wait"
    thread = first.launch_thread if first is not None else None
    calls = spec.cpu_calls
    if any(
        c.cat == "cuda_runtime"
        and (thread is None or c.thread == thread)
        and c.start_ns < g1
        and c.end_ns > g0
        for c in calls
    ):
        return "sync"
    if any(c.cat == "user_annotation" and c.start_ns < g1 and c.end_ns > g0 for c in calls):
        return "dataloader"
    if first is not None and first.launch_ns > g0:
        return "host_bound"
    return "other"


def check_run(spec: RunSpec, tmp_path: Path) -> dict[str, int]:
    """Every rank, every step and the whole window equal the reference; the run's totals."""
    totals = dict.fromkeys(IDLE_CAUSES, 0)
    for rank_spec, path in zip(spec.ranks, write_run(spec, tmp_path), strict=True):
        result = breakdown(load_rank(path))
        assert result.window is not None
        for step in result.included_steps:
            assert step.window is not None
            ref = next(s for s in rank_spec.steps if s.number == step.step)
            window = step_window(ref)
            assert window is not None
            assert step.window.idle_by_cause == expected_idle(rank_spec, window), step.step
            assert sum(step.window.idle_by_cause.values()) == step.window.figures.idle_ns
        whole = result.window.idle_by_cause
        assert whole == expected_idle(rank_spec, rank_window(rank_spec))
        assert sum(whole.values()) == result.window.figures.idle_ns
        for cause, ns in whole.items():
            totals[cause] += ns
    return totals


def test_synchronize_calls_and_late_launches(tmp_path: Path) -> None:
    totals = check_run(fsdp_run(world_size=2, idle_detail=True, jitter=0), tmp_path)
    assert totals["sync"] > 0 and totals["host_bound"] > 0


def test_the_data_loader(tmp_path: Path) -> None:
    spec = fsdp_run(
        world_size=2, idle_detail=True, step_end_sync=False, dataloader_us=6000, jitter=0
    )
    totals = check_run(spec, tmp_path)
    # 6 ms of data loading per step with nothing queued: the GPU waits about that long
    assert totals["dataloader"] > 2 * 5_000_000


def test_a_cpu_that_cannot_launch_fast_enough(tmp_path: Path) -> None:
    starved = check_run(fsdp_run(world_size=2, optimizer_launch_us=60.0, jitter=0), tmp_path / "a")
    normal = check_run(fsdp_run(world_size=2, jitter=0), tmp_path / "b")
    # 6 Adam kernels of 33.1 µs launched every 60 µs: about 26.9 µs of waiting after each of
    # them but the last one or two, in 4 steps on 2 ranks
    added = starved["host_bound"] - normal["host_bound"]
    assert 2 * 4 * 5 * 26_000 < added < 2 * 4 * 6 * 28_000


def test_unlaunched_work_and_jitter(tmp_path: Path) -> None:
    # gaps ended by the side stream's unlinked kernels are "other"; jitter on
    totals = check_run(fsdp_run(world_size=2, seed=4), tmp_path)
    assert totals["other"] > 0


@pytest.mark.parametrize("jitter", [0.0, 0.03])
def test_pipeline_stages_fill_and_drain(tmp_path: Path, jitter: float) -> None:
    totals = check_run(dp_pp_run(dp=1, pp=4, microbatches=4, jitter=jitter), tmp_path)
    assert totals["pipeline_fill"] > 0 and totals["pipeline_drain"] > 0


def test_pipeline_waits_when_receives_are_posted_late(tmp_path: Path) -> None:
    spec = dp_pp_run(dp=1, pp=4, microbatches=4, jitter=0, sync_before_recv=True)
    totals = check_run(spec, tmp_path)
    assert totals["pipeline_wait"] > 0
