"""Generated runs whose answer is known by construction: every figure must match exactly.

The expected figures come from ``tracecomm.synth.expected`` (interval arithmetic on the declared
schedule, no engine code); the actual ones go through the whole CLI and its JSON output.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.conftest import SAMPLE_RUN, analyze_json
from tracecomm.synth import RunSpec, expected_run, fsdp_run, write_run
from tracecomm.synth.expected import Figures as Expected

FIELDS = (
    "window_ns",
    "compute_ns",
    "comm_ns",
    "overlapped_comm_ns",
    "exposed_comm_ns",
    "exposed_memory_ns",
    "idle_ns",
)


def assert_window_matches(window: dict[str, Any], want: Expected) -> None:
    got = window["figures"]
    assert {f: got[f] for f in FIELDS} == {f: getattr(want, f) for f in FIELDS}
    assert (
        got["compute_ns"] + got["exposed_comm_ns"] + got["exposed_memory_ns"] + got["idle_ns"]
        == got["window_ns"]
    )
    by_type = {t["coll_type"]: (t["comm_ns"], t["exposed_comm_ns"]) for t in window["by_type"]}
    assert by_type == want.by_type


def assert_run_matches(spec: RunSpec, doc: dict[str, Any]) -> None:
    expected = expected_run(spec)
    assert [r["rank"] for r in doc["ranks"]] == sorted(expected)
    for rank in doc["ranks"]:
        want = expected[rank["rank"]]
        assert rank["comm_kernels"] == want.comm_kernels
        included = [s["step"] for s in rank["steps"] if s["included"]]
        excluded = [s["step"] for s in rank["steps"] if not s["complete"]]
        assert included == list(want.complete_steps)
        assert excluded == list(want.incomplete_steps)
        assert_window_matches(rank["window"], want.total)
        for step in rank["steps"]:
            if step["included"]:
                assert_window_matches(step["window"], want.steps[step["step"]])


SPECS = {
    "nccl>=2.19 naming, relative ns timestamps": lambda: fsdp_run(world_size=4, steps=3, seed=1),
    "nccl<=2.18 naming": lambda: fsdp_run(world_size=4, steps=3, seed=2, naming="legacy"),
    "integer epoch-µs timestamps": lambda: fsdp_run(world_size=2, seed=3, time_format="epoch_us"),
    "uncompressed, 16 ranks on 2 hosts": lambda: fsdp_run(
        world_size=16, steps=2, layers=3, seed=4, gzip=False
    ),
    "no partial step": lambda: fsdp_run(world_size=2, seed=5, partial_last_step=False),
}


@pytest.mark.parametrize("name", sorted(SPECS))
def test_generated_run_matches_its_schedule_exactly(tmp_path: Path, name: str) -> None:
    spec = SPECS[name]()
    write_run(spec, tmp_path / "run")
    assert_run_matches(spec, analyze_json(tmp_path / "run"))


def test_serial_and_parallel_parse_agree(tmp_path: Path) -> None:
    spec = fsdp_run(world_size=4, steps=2, seed=6)
    write_run(spec, tmp_path / "run")
    serial = analyze_json(tmp_path / "run", "--jobs", "1")
    parallel = analyze_json(tmp_path / "run", "--jobs", "2")
    assert serial["ranks"] == parallel["ranks"]
    assert_run_matches(spec, parallel)


def test_committed_sample_run_matches_its_schedule() -> None:
    # fixtures/README.md: made by `python -m tracecomm.synth ... --ranks 8 --steps 4 --seed 0`
    assert_run_matches(fsdp_run(world_size=8, steps=4, seed=0), analyze_json(SAMPLE_RUN))


@pytest.mark.parametrize("steps", [4, 5])
def test_step_medians_and_worst_step_follow_the_steps(tmp_path: Path, steps: int) -> None:
    spec = fsdp_run(world_size=2, steps=steps, seed=7)
    write_run(spec, tmp_path / "run")
    doc = analyze_json(tmp_path / "run")
    for rank in doc["ranks"]:
        want = expected_run(spec)[rank["rank"]]
        figures = [want.steps[n] for n in want.complete_steps]
        assert rank["steps_included"] == len(figures) == steps
        for field in FIELDS:
            values = sorted(getattr(f, field) for f in figures)
            mid = len(values) // 2
            median = values[mid] if len(values) % 2 else (values[mid - 1] + values[mid] + 1) // 2
            assert rank["step_median"][field] == median, field
        slowest = max(want.complete_steps, key=lambda n: (want.steps[n].window_ns, n))
        assert rank["step_worst"]["step"] == slowest
        worst = rank["step_worst"]["figures"]
        assert {f: worst[f] for f in FIELDS} == {f: getattr(want.steps[slowest], f) for f in FIELDS}


def test_step_selection_and_all_steps(tmp_path: Path) -> None:
    spec = fsdp_run(world_size=2, steps=4, seed=8)
    write_run(spec, tmp_path / "run")
    want = expected_run(spec)[0]
    first, *_, last = want.complete_steps
    doc = analyze_json(tmp_path / "run", "--steps", f"{first + 1}:{last - 1}")
    rank0 = doc["ranks"][0]
    assert [s["step"] for s in rank0["steps"] if s["included"]] == list(range(first + 1, last))
    middle = want.steps[first + 1]
    assert_window_matches(rank0["steps"][1]["window"], middle)
    # the range's own analysis window: the included steps' windows, first to last
    lo = rank0["steps"][1]["window"]["start_ns"]
    hi = rank0["steps"][len(want.complete_steps) - 2]["window"]["end_ns"]
    assert (rank0["window"]["start_ns"], rank0["window"]["end_ns"]) == (lo, hi)
    assert rank0["window"]["figures"]["window_ns"] == hi - lo
    partial = want.incomplete_steps[0]
    doc = analyze_json(tmp_path / "run", "--all-steps")
    steps = {s["step"]: s for s in doc["ranks"][0]["steps"]}
    assert steps[partial]["included"] and not steps[partial]["complete"]
    assert doc["ranks"][0]["window"]["end_ns"] == steps[partial]["window"]["end_ns"]
