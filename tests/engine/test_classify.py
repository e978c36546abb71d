from pathlib import Path

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import kernel, launch, trace_doc, write_trace
from tracecomm.engine.classify import classify, classify_with_comm, coll_type_of
from tracecomm.errors import TraceError
from tracecomm.ingest import load_rank


@pytest.mark.parametrize(
    ("name", "coll"),
    [
        ("allreduce", "AllReduce"),
        ("allreduce_coalesced", "AllReduce"),
        ("_allgather_base", "AllGather"),
        ("allgather_into_tensor_coalesced", "AllGather"),
        ("_reduce_scatter_base", "ReduceScatter"),
        ("reduce_scatter_tensor_coalesced", "ReduceScatter"),
        ("reduce", "Reduce"),
        ("broadcast", "Broadcast"),
        ("all_to_allv", "AllToAll"),
        ("send", "SendRecv"),
        ("recv", "SendRecv"),
        ("nccl:all_reduce", "AllReduce"),
        ("nccl:all_reduce_barrier", "Other"),
        ("barrier", "Other"),
        ("gloo:all_gather", "AllGather"),
        ("nccl:send 0->1", "SendRecv"),
        ("gather", "Other"),
    ],
)
def test_collective_names(name: str, coll: str) -> None:
    got = pl.select(coll_type_of(pl.lit(name))).item()
    assert got == coll


KERNELS = [
    (
        "ncclKernel_AllGather_RING_LL_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)",
        "AllGather",
    ),
    ("ncclKernel_ReduceScatter_RING_LL_Sum___nv_bfloat16(ncclWorkElem)", "ReduceScatter"),
    (
        "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)",
        "SendRecv",
    ),
    ("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "AllReduce"),
    ("ncclDevKernel_Broadcast_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "Broadcast"),
    ("ncclDevKernel_Reduce_Sum_bf16_TREE_LL(ncclDevComm*, unsigned long, ncclWork*)", "Reduce"),
    ("ncclDevKernel_AllGatherV_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "AllGather"),
    ("ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)", "Other"),
    ("ncclSymkDevKernel_AllReduce_LDMC_sum_bf16(ncclSymkDevWorkArgs)", "AllReduce"),
    ("cross_device_reduce_1stage<half, 8>", "AllReduce"),
    # metrics.md §1a: libraries beyond NCCL's collectives
    ("void deep_ep::internode::dispatch<false, 8, true, 8>(int4*, float*)", "AllToAll"),
    ("void dpsk::ep::internode::cached_notify<false>(int, int, int)", "AllToAll"),
    ("void deep_ep::layout::get_dispatch_layout<256, 32, 8>(long const*, int*)", "AllToAll"),
    ("void deep_ep::internode_ll::combine<false, 8>(void*)", "AllToAll"),
    ("void deep_ep::intranode::barrier<8>(int**, int)", "Other"),
    ("nvshmemi_barrier_all_on_stream_kernel", "Other"),
    ("void nvshmemx_alltoallmem_on_stream_kernel(int)", "AllToAll"),
    ("void c10d::symmetric_memory::one_shot_all_reduce_kernel<float, 8>(float**)", "AllReduce"),
    ("void c10d::symmetric_memory::multimem_all_gather_kernel<16>(char*)", "AllGather"),
    ("void c10d::symmetric_memory::put_signal_kernel(unsigned long*)", "SendRecv"),
    (
        "void tensorrt_llm::kernels::ar_fusion::allreduce_fusion_kernel_oneshot_lamport<bf16>()",
        "AllReduce",
    ),
    ("void vllm::cross_device_reduce_2stage<__nv_bfloat16, 8>(vllm::RankData*)", "AllReduce"),
]


def test_kernel_names_give_class_and_type(tmp_path: Path) -> None:
    events = [kernel(name, i * 10, 5, None) for i, (name, _) in enumerate(KERNELS)]
    events.append(kernel("sm90_xmma_gemm_bf16bf16", 500, 5, None))
    events.append(kernel("my_custom_allgather", 600, 5, None))
    rank = load_rank(write_trace(tmp_path / "t.json", trace_doc(events)))
    out = classify(rank, comm_patterns=("my_custom_",)).sort("start_ns")
    assert out["cls"].to_list() == ["comm"] * len(KERNELS) + ["compute", "comm"]
    assert out["coll_type"].to_list()[: len(KERNELS)] == [c for _, c in KERNELS]


def test_metadata_beats_the_kernel_name_and_generic_uses_metadata(tmp_path: Path) -> None:
    events = [
        kernel(
            "ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)",
            0,
            5,
            None,
            **{"Collective name": "_reduce_scatter_base"},
        ),
        # NCCL runs grouped work inside whatever kernel was launched: the name is only a hint
        kernel(
            "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(x)",
            10,
            5,
            None,
            **{"Collective name": "allreduce"},
        ),
    ]
    rank = load_rank(write_trace(tmp_path / "t.json", trace_doc(events)))
    assert classify(rank).sort("start_ns")["coll_type"].to_list() == ["ReduceScatter", "AllReduce"]


def test_type_from_linked_record_param_comms_and_gpu_annotation(tmp_path: Path) -> None:
    events = [
        # metadata only on the CPU op, joined by External id (older traces)
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "record_param_comms",
            "pid": 1,
            "tid": 1,
            "ts": 0,
            "dur": 3,
            "args": {"External id": 5, "Collective name": "broadcast", "Group size": 4},
        },
        kernel("ncclDevKernel_Generic(x)", 1, 5, None, **{"External id": 5}),
        # only an enclosing nccl:* GPU annotation on the same stream tells
        {
            "ph": "X",
            "cat": "gpu_user_annotation",
            "name": "nccl:_all_gather_base",
            "pid": 0,
            "tid": 20,
            "ts": 29.999,
            "dur": 10.002,
            "args": {"device": 0, "stream": 20},
        },
        kernel("ncclDevKernel_Generic(x)", 30, 10, None, stream=20),
    ]
    rank = load_rank(write_trace(tmp_path / "t.json", trace_doc(events)))
    out = classify(rank).sort("start_ns")
    assert out["coll_type"].to_list() == ["Broadcast", "AllGather"]
    # the collective metadata rides with the comm rows (the linked CPU op's, here)
    comm = classify_with_comm(rank)[1].sort("start_ns")
    assert comm["group_size"].to_list()[0] == 4


# The types are worked out once per distinct name, in Python where the name is ASCII: the
# twins must give what the polars expressions give, name for name.
TWIN_NAMES = [
    *(n for n, _ in KERNELS),
    "allreduce",
    "AllReduceBarrier",
    "nccl:nccl:allreduce",
    "c10d::allreduce_",
    "c10d::recv_",
    "  allreduce ",
    "\x0bsend\r",
    "\x1callreduce",  # Python's strip() would take this one, Rust's trim() keeps it
    "İallreduce",
    "ncclKernel_",
    "ncclDevKernel_GENERIC",
    "rcclKernel_alltoall",
    "NCCLKERNEL_SENDRECV",
    "ONESHOTALLREDUCE",
    "DEEP_EP::BARRIER",
    "nvshmem_fcollect",
    "c10d::symmetric_memory::two_shot_all_reduce_",
    "",
]


# letters the rules look at, the separators, white space of both kinds, non-ASCII letters
_TWIN_ALPHABET = list("ncclrgohdvKkernlAaRrSsGgBbTt_:c10 \t\x0b\x1c\x85İıſK")


def _exact(expr: object, names: list[str]) -> list[str | None]:
    frame = pl.DataFrame({"n": names}, schema={"n": pl.String})
    return frame.select(expr(pl.col("n")).alias("t"))["t"].to_list()  # type: ignore[operator]


def _assert_twins_agree(names: list[str]) -> None:
    from tracecomm.engine.classify import _kernel_type, coll_types, kernel_types

    series = pl.Series("n", [*names, None], dtype=pl.String)
    assert coll_types(series).to_list() == [*_exact(coll_type_of, names), None]
    assert kernel_types(series).to_list() == [*_exact(_kernel_type, names), None]


def test_names_typed_once_agree_with_the_expressions() -> None:
    _assert_twins_agree(TWIN_NAMES)


def test_every_shared_trace_name_is_typed_as_the_expression_types_it(
    shared_traces: Path,
) -> None:
    names: set[str] = set()
    for path in sorted(shared_traces.rglob("*.json*")):
        try:
            rank = load_rank(path)
        except TraceError:  # files that are not traces are other tests' business
            continue
        for frame in (rank.device, rank.comm_annotations, rank.launches):
            names.update(n for n in frame["name"].unique().to_list() if n is not None)
        for frame in (rank.device_meta, rank.comm_ops):
            if "collective_name" in frame.columns:
                meta = frame["collective_name"].unique().to_list()
                names.update(n for n in meta if n is not None)
    assert len(names) > 100
    _assert_twins_agree(sorted(names))


@given(st.lists(st.text(alphabet=st.sampled_from(_TWIN_ALPHABET), max_size=30), max_size=40))
@settings(max_examples=200, derandomize=True, deadline=None)
def test_any_names_are_typed_as_the_expressions_type_them(names: list[str]) -> None:
    _assert_twins_agree(names)


def _user_annotation(name: str, ts: float, dur: float, tid: int = 100) -> dict:
    return {
        "ph": "X",
        "cat": "user_annotation",
        "name": name,
        "pid": 100,
        "tid": tid,
        "ts": ts,
        "dur": dur,
        "args": {},
    }


SENDRECV = "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)"


def test_generic_kernels_take_the_collective_their_launch_sat_in(tmp_path: Path) -> None:
    """metrics.md §1: as the HTA traces record a DLRM's all-to-all: no collective args, the
    kernel linked to no CPU op, only the nccl:* CPU annotation around the launch says it."""
    cases = [
        ("nccl:all_to_all", SENDRECV, "AllToAll"),
        ("nccl:all_reduce", "ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)", "AllReduce"),
        ("nccl:send 0->1", SENDRECV, "SendRecv"),  # p2p stays p2p
        ("nccl:coalesced", SENDRECV, "SendRecv"),  # batch_isend_irecv: no named collective
        ("nccl:all_to_all", "ncclKernel_AllReduce_RING_LL_Sum_float(x)", "AllReduce"),  # named
    ]
    events = []
    for i, (annotation, name, _) in enumerate(cases):
        t = 100 * i
        events += [_user_annotation(annotation, t, 20), launch(t + 5, 10 + i)]
        events.append(kernel(name, t + 50, 10, 10 + i, stream=20))
    # the annotation closed before the launch: it says nothing about it
    events += [_user_annotation("nccl:all_to_all", 600, 3), launch(605, 30)]
    events.append(kernel(SENDRECV, 650, 10, 30, stream=20))
    # on another thread: not the launch's own collective
    events += [_user_annotation("nccl:all_to_all", 700, 20, tid=7), launch(705, 31)]
    events.append(kernel(SENDRECV, 750, 10, 31, stream=20))
    rank = load_rank(write_trace(tmp_path / "t.json", trace_doc(events)))
    out = classify(rank).sort("start_ns")
    assert out["coll_type"].to_list() == [c for *_, c in cases] + ["SendRecv", "SendRecv"]


def test_the_shared_hta_traces_type_each_sendrecv_kernel_by_its_launch(
    shared_traces: Path,
) -> None:
    """The issue's counts: each SendRecv kernel takes the op that launched it; the five of
    negative_queue whose launch precedes the trace keep their name's type."""
    expected = {
        "hta-trace_diff_control/control.json.gz": {"AllToAll": 42, "AllReduce": 18},
        "hta-negative_queue_length_values_check/rank0.json.gz": {
            "AllToAll": 45,
            "ReduceScatter": 10,
            "AllGather": 10,
            "AllReduce": 10,
            "SendRecv": 5,
        },
        "hta-trace_filter/sampled_rank-0.json.gz": {"AllToAll": 4, "AllReduce": 4, "AllGather": 2},
        "hta-trace_filter/sampled_rank-1.json.gz": {"AllToAll": 4, "AllReduce": 4, "AllGather": 2},
    }
    for path, counts in expected.items():
        out = classify(load_rank(shared_traces / path)).filter(pl.col("cls") == "comm")
        assert dict(out.group_by("coll_type").len().iter_rows()) == counts, path


def test_deepep_kernels_are_all_to_all_and_a_comm_stream_note_names_the_rest(
    shared_traces: Path,
) -> None:
    from tracecomm.engine.classify import comm_libraries, comm_stream_note

    rank = load_rank(shared_traces / "deepseek-train-ep64" / "train.json")
    out = classify(rank)
    comm = out.filter(pl.col("cls") == "comm")
    assert comm.height == 36 and set(comm["coll_type"]) == {"AllToAll"}
    assert comm.select((pl.col("end_ns") - pl.col("start_ns")).sum()).item() == 113_440_000
    assert set(comm["stream"]) == {27}
    assert comm_libraries(out) == ("DeepEP",)
    note = comm_stream_note(out)
    assert note is not None
    assert note.startswith("4 kernels (1.081 ms) on stream 27, which carries communication")
    assert "per_token_cast_to_fp8_with_channels ×4" in note


def test_a_comm_stream_note_needs_a_stream_of_a_device() -> None:
    """Kernels of no device (neither ``args.device`` nor a pid) are no stream's: a stream key
    with a null device joins nothing, so its kernels make no note; on a device, the same
    kernels do."""
    from tracecomm.engine.classify import comm_stream_note

    def kernels(device: int | None) -> pl.DataFrame:
        return pl.DataFrame(
            {
                "kind": ["kernel"] * 3,
                "cls": ["comm", "comm", "compute"],
                "device": pl.Series([device] * 3, dtype=pl.Int64),
                "stream": [7, 7, 7],
                "name": ["ncclKernel_AllReduce", "ncclKernel_AllReduce", "my_gemm"],
                "start_ns": [0, 100, 200],
                "end_ns": [50, 150, 260],
            }
        )

    assert comm_stream_note(kernels(None)) is None
    note = comm_stream_note(kernels(0))
    assert note is not None and note.startswith("1 kernels (0.000 ms) on stream 7, which carries")
