from pathlib import Path

from tests.conftest import kernel, launch, simple_events, step, trace_doc, write_trace
from tracecomm.engine import BreakdownOptions, breakdown
from tracecomm.engine.model import Figures
from tracecomm.ingest import load_rank

US = 1000


def _check_identity(f: Figures) -> None:
    assert f.compute_ns + f.exposed_comm_ns + f.exposed_memory_ns + f.idle_ns == f.window_ns


def test_partition_of_a_handmade_step(tmp_path: Path) -> None:
    events = [
        *simple_events(),
        # memcpy half hidden behind the AllReduce, half exposed; a sync record that must not count
        {
            "ph": "X",
            "cat": "gpu_memcpy",
            "name": "Memcpy DtoD",
            "pid": 0,
            "tid": 9,
            "ts": 1140,
            "dur": 20,
            "args": {"device": 0, "stream": 9, "correlation": 4},
        },
        launch(998, 4, name="cudaMemcpyAsync"),
        {
            "ph": "X",
            "cat": "cuda_sync",
            "name": "Event Sync",
            "pid": 0,
            "tid": 7,
            "ts": 1160,
            "dur": 40,
            "args": {"device": 0, "stream": 7},
        },
    ]
    bd = breakdown(load_rank(write_trace(tmp_path / "rank0.json", trace_doc(events))))
    assert bd.timeline == "gpu" and bd.comm_kernels == 1
    window = bd.window
    assert window is not None
    assert (window.start_ns, window.end_ns) == (1000 * US, 1250 * US)
    f = window.figures
    assert f == Figures(
        window_ns=250 * US,
        compute_ns=150 * US,
        comm_ns=100 * US,
        overlapped_comm_ns=50 * US,
        exposed_comm_ns=50 * US,
        exposed_memory_ns=10 * US,
        idle_ns=40 * US,
    )
    _check_identity(f)
    assert f.overlap_pct == 50.0
    assert [(t.coll_type, t.kernels, t.comm_ns, t.exposed_comm_ns) for t in window.by_type] == [
        ("AllReduce", 1, 100 * US, 50 * US)
    ]


def _two_steps(tmp_path: Path) -> Path:
    events = [
        *simple_events(1000),
        step(2, 1400, 400),
        launch(1405, 11),
        launch(1406, 12),  # its kernel never made it into the trace
        kernel("sm90_gemm", 1500, 100, 11),
    ]
    return write_trace(tmp_path / "rank0.json", trace_doc(events))


def test_incomplete_step_is_excluded_and_explained(tmp_path: Path) -> None:
    bd = breakdown(load_rank(_two_steps(tmp_path)))
    s1, s2 = bd.steps
    assert (s1.complete, s1.included) == (True, True)
    assert (s2.complete, s2.included) == (False, False)
    assert s2.incomplete_reason == "1 launched kernels missing from the trace"
    assert bd.window is not None and bd.window.end_ns == 1250 * US
    assert any("step 2 excluded" in n for n in bd.notes)


def test_all_steps_and_step_ranges(tmp_path: Path) -> None:
    rank = load_rank(_two_steps(tmp_path))
    both = breakdown(rank, BreakdownOptions(all_steps=True))
    assert both.window is not None
    assert (both.window.start_ns, both.window.end_ns) == (1000 * US, 1600 * US)
    _check_identity(both.window.figures)
    assert both.window.figures.idle_ns == 50 * US + 250 * US  # step 1 gap + between steps
    only2 = breakdown(rank, BreakdownOptions(first_step=2, last_step=2, all_steps=True))
    assert only2.window is not None and only2.window.figures.compute_ns == 100 * US


def test_kernels_are_assigned_to_the_step_that_launched_them(tmp_path: Path) -> None:
    # step 1's kernel runs after step 1's annotation ended: it still belongs to step 1
    events = [
        step(1, 0, 100),
        launch(10, 1),
        kernel("gemm", 150, 50, 1),
        step(2, 100, 100),
        launch(110, 2),
        kernel("gemm", 210, 20, 2),
    ]
    bd = breakdown(load_rank(write_trace(tmp_path / "rank0.json", trace_doc(events))))
    windows = [(s.step, s.window.start_ns, s.window.end_ns) for s in bd.steps if s.window]
    assert windows == [(1, 150 * US, 200 * US), (2, 210 * US, 230 * US)]


def test_trace_without_steps_is_one_window_and_unlinked_work_counts(tmp_path: Path) -> None:
    events = [kernel("gemm", 10, 10, None), kernel("ncclDevKernel_SendRecv(x)", 30, 10, None)]
    bd = breakdown(load_rank(write_trace(tmp_path / "rank0.json", trace_doc(events))))
    assert bd.window is not None
    f = bd.window.figures
    assert (f.window_ns, f.compute_ns, f.exposed_comm_ns, f.idle_ns) == (
        30 * US,
        10 * US,
        10 * US,
        10 * US,
    )
    assert bd.unlinked_events == 2
    assert any("no ProfilerStep" in n for n in bd.notes)


def test_cpu_only_trace_uses_the_cpu_timeline(tmp_path: Path) -> None:
    def op(name: str, tid: int, ts: int, dur: int, cat: str = "cpu_op") -> dict:
        return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur}

    events = [
        op("aten::mm", 1, 0, 40),
        op("gloo:all_reduce", 2, 30, 30),  # on the gloo runloop thread: 10 hidden, 20 exposed
        op("aten::add_", 1, 70, 10),
    ]
    bd = breakdown(load_rank(write_trace(tmp_path / "rank0.json", trace_doc(events, world=None))))
    assert bd.timeline == "cpu"
    assert bd.window is not None
    f = bd.window.figures
    assert (f.window_ns, f.compute_ns, f.comm_ns, f.exposed_comm_ns, f.idle_ns) == (
        80 * US,
        50 * US,
        30 * US,
        20 * US,
        10 * US,
    )
    assert [t.coll_type for t in bd.window.by_type] == ["AllReduce"]


def test_trace_with_no_device_or_cpu_events(tmp_path: Path) -> None:
    bd = breakdown(load_rank(write_trace(tmp_path / "rank0.json", trace_doc([]))))
    assert bd.window is None
    assert any("no device events" in n for n in bd.notes)


def test_an_excluded_step_in_the_middle_splits_the_analysis_window(tmp_path: Path) -> None:
    events = [
        step(1, 0, 100),
        launch(1, 1),
        kernel("gemm", 10, 50, 1),  # step 1 window [10, 60)
        step(2, 100, 100),
        launch(101, 2),
        launch(102, 3),  # never recorded: step 2 incomplete
        kernel("gemm", 110, 50, 2),
        step(3, 200, 100),
        launch(201, 4),
        kernel("gemm", 210, 40, 4),  # step 3 window [210, 250)
    ]
    bd = breakdown(load_rank(write_trace(tmp_path / "rank0.json", trace_doc(events))))
    assert [s.included for s in bd.steps] == [True, False, True]
    assert bd.window is not None
    f = bd.window.figures
    # two pieces, 50 + 40 µs: step 2's work and the gaps around it are not counted
    assert (f.window_ns, f.compute_ns, f.idle_ns) == (90 * US, 90 * US, 0)
    assert (bd.window.start_ns, bd.window.end_ns) == (10 * US, 250 * US)


def test_a_step_whose_annotation_never_closed_is_incomplete(tmp_path: Path) -> None:
    events = [*simple_events(), step(2, 1400, None), launch(1405, 11), kernel("g", 1500, 10, 11)]
    del events[-3]["dur"]
    bd = breakdown(load_rank(write_trace(tmp_path / "rank0.json", trace_doc(events))))
    s2 = bd.steps[1]
    assert not s2.complete and s2.incomplete_reason is not None
    assert "never closed" in s2.incomplete_reason


def test_gpu_annotation_outranks_the_cpu_op_for_the_type(tmp_path: Path) -> None:
    events = [
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "record_param_comms",
            "pid": 1,
            "tid": 1,
            "ts": 0,
            "dur": 3,
            "args": {"External id": 5, "Collective name": "allreduce", "Group size": 4},
        },
        {
            "ph": "X",
            "cat": "gpu_user_annotation",
            "name": "nccl:reduce_scatter",
            "pid": 0,
            "tid": 20,
            "ts": 9.999,
            "dur": 10.002,
            "args": {"device": 0, "stream": 20},
        },
        kernel("ncclDevKernel_Generic(x)", 10, 10, None, stream=20, **{"External id": 5}),
    ]
    bd = breakdown(load_rank(write_trace(tmp_path / "rank0.json", trace_doc(events))))
    assert bd.window is not None
    assert [t.coll_type for t in bd.window.by_type] == ["ReduceScatter"]


def test_a_groups_rank_list_travels_once_per_rank(tmp_path: Path) -> None:
    """The rank list spells out every member of the group: on each instance it made what a
    rank hands over grow with the world size (1,024 ranks: 1 MB a rank). Once per rank, in a
    column built anew (a masked one still pickles the buffers it hid)."""
    import pickle

    from tracecomm.engine.partition import breakdown_and_views
    from tracecomm.synth.fsdp import fsdp_run
    from tracecomm.synth.writer import write_run

    write_run(fsdp_run(64, steps=2), tmp_path / "run")
    rank = load_rank(tmp_path / "run" / "rank0.pt.trace.json.gz")
    instances = breakdown_and_views(rank)[0].collectives
    assert instances is not None and instances.height > 20
    listed = instances["pg_ranks"].drop_nulls()
    assert listed.to_list() == ["[" + ", ".join(str(r) for r in range(64)) + "]"]
    column = len(pickle.dumps(instances["pg_ranks"]))
    assert column < 2 * len(listed[0]) + 2_000
