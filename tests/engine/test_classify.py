from pathlib import Path

import polars as pl
import pytest

from tests.conftest import kernel, trace_doc, write_trace
from tracecomm.engine.classify import classify, classify_with_comm, coll_type_of
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
