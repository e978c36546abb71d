"""Runs to compare (tracecomm.synth.series): one model at several world sizes, and a
before/after pair with one collective slowed; their expected figures from the schedule alone."""

from __future__ import annotations

from pathlib import Path

import pytest

from tracecomm.synth.scaling import Network, scaling_run
from tracecomm.synth.series import (
    LATENCY_BOUND,
    before_after,
    deltas,
    main,
    rate_steps,
    scaling_series,
    slowed_network,
    typical,
)


def test_one_model_at_each_size() -> None:
    series = scaling_series((8, 16))
    assert sorted(series) == [8, 16]
    assert [len(s.ranks) for s in series.values()] == [8, 16]
    assert rate_steps(series[8]) == (13, 14)  # three complete steps: the first warms up
    small, large = typical(series[8]), typical(series[16])
    # strong scaling: compute halves, the ring collectives take longer
    assert large.compute_ns == pytest.approx(small.compute_ns / 2, rel=0.01)
    for coll in ("AllGather", "ReduceScatter", "AllReduce"):
        assert large.kernel_ns_per_step[coll] > small.kernel_ns_per_step[coll]
        assert large.calls_per_step[coll] == small.calls_per_step[coll]
    parts = large.compute_ns + large.exposed_comm_ns + large.exposed_memory_ns + large.idle_ns
    assert parts == large.window_ns


def test_the_slowed_collective_is_the_only_change() -> None:
    before, after = before_after(8, "ReduceScatter", 3.0)
    d = deltas(typical(before), typical(after))
    assert d.most_changed_type == "ReduceScatter"
    assert d.kernel_ns_per_step["ReduceScatter"] == pytest.approx(
        2 * typical(before).kernel_ns_per_step["ReduceScatter"], rel=1e-5
    )  # each kernel's µs are rounded to whole ns
    assert d.kernel_ns_per_step["AllGather"] == 0 and d.kernel_ns_per_step["AllReduce"] == 0
    assert d.compute_ns == 0
    assert d.step_ns == d.compute_ns + d.exposed_comm_ns + d.exposed_memory_ns + d.idle_ns
    assert d.exposed_by_type_ns["ReduceScatter"] > 0


def test_a_slowed_network_takes_factor_times_as_long() -> None:
    slow = slowed_network(Network(2.0, 100.0), 4.0)
    base = Network(2.0, 100.0)
    assert slow.time_us("AllGather", 1 << 26, 16) == pytest.approx(
        4 * base.time_us("AllGather", 1 << 26, 16)
    )
    with pytest.raises(ValueError):
        slowed_network(base, 0.0)


def test_per_type_networks_leave_the_other_types_alone() -> None:
    plain = scaling_run(4, LATENCY_BOUND)
    other = scaling_run(4, LATENCY_BOUND, networks={"AllReduce": slowed_network(LATENCY_BOUND, 2)})
    a, b = typical(plain), typical(other)
    assert b.kernel_ns_per_step["AllReduce"] == pytest.approx(
        2 * a.kernel_ns_per_step["AllReduce"], rel=1e-4
    )
    assert b.kernel_ns_per_step["AllGather"] == a.kernel_ns_per_step["AllGather"]


def test_command_line_writes_the_folders(tmp_path: Path) -> None:
    assert main([str(tmp_path / "s"), "--sizes", "2,4"]) == 0
    assert sorted(p.name for p in (tmp_path / "s").iterdir()) == ["n2", "n4"]
    assert len(list((tmp_path / "s" / "n4").iterdir())) == 4
    assert main([str(tmp_path / "p"), "--sizes", "2", "--slowed", "AllGather=1.5"]) == 0
    assert sorted(p.name for p in (tmp_path / "p").iterdir()) == ["after", "before"]
    assert main([str(tmp_path / "p"), "--sizes", "2"]) == 2  # not empty
    assert main([str(tmp_path / "q"), "--slowed", "Nope"]) == 2
