from pathlib import Path

import pytest

from tests.conftest import kernel, launch, simple_events, trace_doc, write_trace
from tracecomm.engine import breakdown
from tracecomm.engine.timeline import ExposedSpan, TimelineSegment, step_timeline
from tracecomm.ingest import load_rank
from tracecomm.synth import fsdp_run
from tracecomm.synth.writer import write_run

US = 1000


def test_handmade_step_lanes_merge_and_exposed_span(tmp_path: Path) -> None:
    # a short kernel 100 ns after the gemm (under the 125 ns resolution of a 250 µs window)
    # merges into the gemm's segment for drawing; the exposed spans stay exact, the 100 ns gap
    # included
    events = [*simple_events(), launch(996, 9), kernel("tiny_kernel", "1100.100", 10, 9)]
    rank = load_rank(write_trace(tmp_path / "rank0.json", trace_doc(events)))
    timeline = step_timeline(rank, 1)
    assert timeline is not None
    assert (timeline.window_ns, timeline.resolution_ns) == (250 * US, 125)
    lanes = {lane.stream: lane.segments for lane in timeline.lanes}
    assert lanes[7] == (
        TimelineSegment(0, 110_100, "compute", None, 2, "sm90_gemm"),
        TimelineSegment(200 * US, 250 * US, "compute", None, 1, "vectorized_elementwise_kernel"),
    )
    assert [(s.start_ns, s.end_ns, s.cls, s.coll_type) for s in lanes[20]] == [
        (50 * US, 150 * US, "comm", "AllReduce")
    ]
    assert timeline.exposed == (
        ExposedSpan(100 * US, 100_100, "AllReduce"),
        ExposedSpan(110_100, 150 * US, "AllReduce"),
    )
    assert timeline.exposed_ns == breakdown(rank).steps[0].window.figures.exposed_comm_ns  # type: ignore[union-attr]


def test_no_device_work_in_the_step_gives_none(tmp_path: Path) -> None:
    rank = load_rank(write_trace(tmp_path / "rank0.json", trace_doc(simple_events())))
    assert step_timeline(rank, 99) is None


@pytest.mark.parametrize("jitter", [0.0, None])
def test_exposed_spans_equal_the_breakdown_on_a_generated_run(
    tmp_path: Path, jitter: float | None
) -> None:
    """Per rank and step, the spans add up to the step's exposed comm, per type and in all,
    and every device event of the step is in exactly one segment."""
    spec = (
        fsdp_run(world_size=4, seed=3, gzip=False)
        if jitter is None
        else fsdp_run(world_size=4, seed=3, gzip=False, jitter=jitter)
    )
    paths = write_run(spec, tmp_path)
    for path in paths:
        rank = load_rank(path)
        result = breakdown(rank)
        assert result.included_steps
        for step in result.included_steps:
            assert step.window is not None
            timeline = step_timeline(rank, step.step)
            assert timeline is not None
            assert timeline.window_ns == step.window.figures.window_ns
            assert timeline.exposed_ns == step.window.figures.exposed_comm_ns
            per_type: dict[str, int] = {}
            for span in timeline.exposed:
                per_type[span.coll_type] = per_type.get(span.coll_type, 0) + span.length_ns
            assert per_type == {
                t.coll_type: t.exposed_comm_ns for t in step.window.by_type if t.exposed_comm_ns
            }
            start, end = timeline.start_ns, timeline.start_ns + timeline.window_ns
            in_window = rank.device.filter(
                (rank.device["kind"] != "sync")
                & (rank.device["end_ns"] > start)
                & (rank.device["start_ns"] < end)
                & (rank.device["end_ns"] > rank.device["start_ns"])
            )
            assert sum(s.kernels for lane in timeline.lanes for s in lane.segments) == (
                in_window.height
            )
