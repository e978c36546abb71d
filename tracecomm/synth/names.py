"""Kernel names and their per-name launch profiles, as CUPTI reports them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tracecomm.synth.ops import CollType, Op


@dataclass(frozen=True, slots=True)
class KernelProfile:
    """CPU op that launches a kernel and the launch configuration CUPTI records for it."""

    cpu_op: str
    registers: int
    shared_mem: int
    grid: tuple[int, int, int]
    block: tuple[int, int, int]


GEMM_CUTLASS = (
    "void cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32_128x2_tn_align8>"
    "(cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32_128x2_tn_align8::Params)"
)
GEMM_SM90 = (
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_"
    "execute_segment_k_off_kernel__5x_cublas"
)
ADD = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, "
    "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, at::detail::Array<char*, 3>)"
)
_GELU_FN = (
    "at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, at::native::GeluType)::{lambda()#2}::operator()() "
    "const::{lambda()#4}::operator()() const::{lambda(c10::BFloat16)#1}"
)
GELU = (
    f"void at::native::vectorized_elementwise_kernel<4, {_GELU_FN}, at::detail::Array<char*, 2> >"
    f"(int, {_GELU_FN}, at::detail::Array<char*, 2>)"
)
FLASH_FWD = (
    "void flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, cutlass::bfloat16_t, "
    "Flash_kernel_traits<128, 128, 64, 4, cutlass::bfloat16_t> >, false, true, false, false, true, true, "
    "false, false>(Flash_fwd_params)"
)
FLASH_BWD = (
    "void flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd_kernel_traits<128, 64, 128, 8, 2, 4, 2, "
    "false, false, cutlass::bfloat16_t, Flash_kernel_traits<128, 64, 128, 8, cutlass::bfloat16_t> >, true, "
    "false, false, false, false, false, false, false>(Flash_bwd_params)"
)
LAYER_NORM = (
    "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float>(int, float, "
    "c10::BFloat16 const*, c10::BFloat16 const*, c10::BFloat16 const*, float*, float*, c10::BFloat16*)"
)
LAYER_NORM_BWD = (
    "void at::native::(anonymous namespace)::layer_norm_grad_input_kernel_vectorized<c10::BFloat16, float>"
    "(c10::BFloat16 const*, c10::BFloat16 const*, float const*, float const*, c10::BFloat16 const*, "
    "c10::BFloat16*, int)"
)
_ADAM = "at::native::(anonymous namespace)::FusedAdamMathFunctor<float, 4, (at::native::ADAM_MODE)1, false>"
ADAM = (
    "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::"
    f"TensorListMetadata<4>, {_ADAM}, float*, double, double, double, double, double, bool, float*, float*>"
    f"(at::native::(anonymous namespace)::TensorListMetadata<4>, {_ADAM}, float*, double, double, double, "
    "double, double, bool, float*, float*)"
)
NORM = (
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::NormTwoOps<float, float, "
    "float>, unsigned int, float, 4> >(at::native::ReduceOp<float, at::native::NormTwoOps<float, float, "
    "float>, unsigned int, float, 4>)"
)
# A compute kernel that DeepEP's users run on its comm stream just before each dispatch.
FP8_CAST = (
    "void cuda::per_token_cast_to_fp8_with_channels<__nv_bfloat16, 128, false>"
    "(__nv_bfloat16 const*, __nv_fp8_e4m3*, float*, int, int)"
)
_MOE_GATE_FN = (
    "at::native::(anonymous namespace)::sbtopk::gatherTopK<c10::BFloat16, unsigned int, 2, false>"
)
MOE_TOPK = f"void {_MOE_GATE_FN}(at::cuda::detail::TensorInfo<c10::BFloat16 const, unsigned int>, unsigned int)"
# DLRM: FBGEMM's table-batched embedding kernels.
EMB_FWD = (
    "void fbgemm_gpu::split_embedding_codegen_forward_unweighted_kernel<float, float, float, "
    "long, 32ul>(at::GenericPackedTensorAccessor<float, 1ul, at::RestrictPtrTraits, long>, "
    "int, long, int, float*)"
)
EMB_BWD = (
    "void fbgemm_gpu::split_embedding_backward_codegen_rowwise_adagrad_unweighted_kernel_"
    "warp_per_row_1<float, float, float, long, 32ul>(at::GenericPackedTensorAccessor<float, "
    "2ul, at::RestrictPtrTraits, long>, int, long, float*)"
)

PROFILES: dict[str, KernelProfile] = {
    GEMM_CUTLASS: KernelProfile("aten::mm", 110, 36864, (64, 16, 1), (128, 1, 1)),
    GEMM_SM90: KernelProfile("aten::mm", 168, 213248, (132, 1, 1), (384, 1, 1)),
    ADD: KernelProfile("aten::add_", 24, 0, (4096, 1, 1), (128, 1, 1)),
    GELU: KernelProfile("aten::gelu", 30, 0, (4096, 1, 1), (128, 1, 1)),
    FLASH_FWD: KernelProfile(
        "aten::_flash_attention_forward", 255, 98304, (16, 32, 4), (128, 1, 1)
    ),
    FLASH_BWD: KernelProfile(
        "aten::_flash_attention_backward", 255, 147456, (8, 4, 32), (256, 1, 1)
    ),
    LAYER_NORM: KernelProfile("aten::native_layer_norm", 40, 0, (8192, 1, 1), (128, 1, 1)),
    LAYER_NORM_BWD: KernelProfile(
        "aten::native_layer_norm_backward", 48, 0, (8192, 1, 1), (128, 1, 1)
    ),
    ADAM: KernelProfile("aten::_fused_adamw_", 64, 0, (320, 1, 1), (512, 1, 1)),
    NORM: KernelProfile("aten::linalg_vector_norm", 32, 16, (1, 1, 1), (512, 1, 1)),
    FP8_CAST: KernelProfile("per_token_cast_to_fp8", 40, 1024, (4096, 1, 1), (128, 1, 1)),
    MOE_TOPK: KernelProfile("aten::topk", 38, 2048, (512, 1, 1), (256, 1, 1)),
    EMB_FWD: KernelProfile(
        "fbgemm::split_embedding_codegen_lookup_rowwise_adagrad_function",
        56,
        0,
        (2048, 1, 1),
        (32, 8, 1),
    ),
    EMB_BWD: KernelProfile(
        "CppNode<SplitLookupFunction_rowwise_adagrad_Op>", 64, 16384, (1024, 1, 1), (32, 8, 1)
    ),
}
DEFAULT_COMPUTE: tuple[str, ...] = (GEMM_CUTLASS, GEMM_SM90, ADD, FLASH_FWD)
_FALLBACK_PROFILE = KernelProfile("aten::linear", 32, 0, (256, 1, 1), (256, 1, 1))
COMM_PROFILE = KernelProfile("record_param_comms", 96, 87568, (24, 1, 1), (544, 1, 1))

MEMCPY_NAME = "Memcpy HtoD (Pinned -> Device)"
MEMSET_NAME = "Memset (Device)"

_DEV_ARGS = "(ncclDevKernelArgsStorage<4096ul>)"
_LEGACY_ARGS = "(ncclDevComm*, unsigned long, ncclWork*)"
_LEGACY_SENDRECV = "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t" + _LEGACY_ARGS
DEV_COMM: dict[str, str] = {
    "AllGather": "ncclDevKernel_AllGather_RING_LL" + _DEV_ARGS,
    "ReduceScatter": "ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL" + _DEV_ARGS,
    "AllReduce": "ncclDevKernel_AllReduce_Sum_f32_RING_LL" + _DEV_ARGS,
    "Broadcast": "ncclDevKernel_Broadcast_RING_LL" + _DEV_ARGS,
    "Reduce": "ncclDevKernel_Reduce_Sum_bf16_RING_LL" + _DEV_ARGS,
    "SendRecv": "ncclDevKernel_SendRecv" + _DEV_ARGS,
    "AllToAll": "ncclDevKernel_Generic" + _DEV_ARGS,
    "Other": "ncclDevKernel_Generic" + _DEV_ARGS,
}
# NCCL <= 2.18 has no all-to-all or generic kernel: that work runs inside the SendRecv kernel.
LEGACY_COMM: dict[str, str] = {
    "AllGather": "ncclKernel_AllGather_RING_LL_Sum_int8_t" + _LEGACY_ARGS,
    "ReduceScatter": "ncclKernel_ReduceScatter_RING_LL_Sum___nv_bfloat16" + _LEGACY_ARGS,
    "AllReduce": "ncclKernel_AllReduce_RING_LL_Sum_float" + _LEGACY_ARGS,
    "Broadcast": "ncclKernel_Broadcast_RING_LL_Sum_int8_t" + _LEGACY_ARGS,
    "Reduce": "ncclKernel_Reduce_RING_LL_Sum___nv_bfloat16" + _LEGACY_ARGS,
    "SendRecv": _LEGACY_SENDRECV,
    "AllToAll": _LEGACY_SENDRECV,
    "Other": _LEGACY_SENDRECV,
}

# DeepEP (and DeepSeek's internal dpsk::ep): expert-parallel all-to-all kernels, launched from
# the library's own C++ ops with no collective metadata. (kernel, the cpu_op that launches it)
_DEEPEP_TAIL = "(int4*, float*, long*, float*, int4 const*, float const*, int, int, int, int)"
DEEPEP_LAYOUT = (
    "void deep_ep::layout::get_dispatch_layout<256, 32, 8>"
    "(long const*, int*, int*, int*, bool*, int, int, int, int)"
)
DEEPEP_NOTIFY = (
    "void deep_ep::internode::notify_dispatch<false, 8>"
    "(int const*, int*, int, int const*, int*, int, int, int, int, int, bool const*, int*)"
)
DEEPEP_CACHED_NOTIFY = (
    "void deep_ep::internode::cached_notify<8>(int, int, int, int, int, int*, int, int*, bool)"
)
DEEPEP_DISPATCH = f"void deep_ep::internode::dispatch<false, 8, true, 8>{_DEEPEP_TAIL}"
DEEPEP_COMBINE = f"void deep_ep::internode::combine<__nv_bfloat16, 8, 4>{_DEEPEP_TAIL}"
DEEPEP_LL_DISPATCH = f"void deep_ep::internode_ll::dispatch<false, 3, 7168>{_DEEPEP_TAIL}"
DEEPEP_LL_COMBINE = f"void deep_ep::internode_ll::combine<false, 3, 7168>{_DEEPEP_TAIL}"
DPSK_DISPATCH = f"void dpsk::ep::internode::dispatch<false, 8, true, 8>{_DEEPEP_TAIL}"
DEEPEP_CPU_OPS: dict[str, str] = {
    DEEPEP_LAYOUT: "deep_ep::Buffer::get_dispatch_layout",
    DEEPEP_NOTIFY: "deep_ep::Buffer::internode_dispatch",
    DEEPEP_CACHED_NOTIFY: "deep_ep::Buffer::internode_dispatch",
    DEEPEP_DISPATCH: "deep_ep::Buffer::internode_dispatch",
    DEEPEP_COMBINE: "deep_ep::Buffer::internode_combine",
    DEEPEP_LL_DISPATCH: "deep_ep::Buffer::low_latency_dispatch",
    DEEPEP_LL_COMBINE: "deep_ep::Buffer::low_latency_combine",
    DPSK_DISPATCH: "dpsk::ep::Buffer::internode_dispatch",
}
# The generator's own short list of expert-parallel libraries (no engine import).
_EP_LIBRARIES = ("deep_ep::", "dpsk::ep::")


def is_deepep(name: str) -> bool:
    """Whether the kernel belongs to DeepEP (or dpsk::ep): all-to-all communication."""
    return any(lib in name for lib in _EP_LIBRARIES)


def is_comm_name(name: str) -> bool:
    """Whether the name is one of a communication library's kernels (NCCL, RCCL, DeepEP)."""
    lower = name.lower()
    return "nccl" in lower or "rccl" in lower or is_deepep(name)


def deepep_cpu_op(name: str) -> str:
    """The cpu_op that launches a DeepEP kernel: the Buffer method of its kind."""
    known = DEEPEP_CPU_OPS.get(name)
    if known is not None:
        return known
    kind = "combine" if "combine" in name else "dispatch"
    prefix = "dpsk::ep" if "dpsk::ep::" in name else "deep_ep"
    mode = "low_latency" if "internode_ll::" in name else "internode"
    return f"{prefix}::Buffer::{mode}_{kind}"


@dataclass(frozen=True, slots=True)
class CollInfo:
    """How c10d names one collective type on the CPU side and in the kernel metadata."""

    collective_name: str
    annotation: str
    c10d_op: str
    dtype: str


COLLECTIVES: dict[str, CollInfo] = {
    "AllGather": CollInfo(
        "_allgather_base", "nccl:all_gather_into_tensor", "c10d::_allgather_base_", "BFloat16"
    ),
    "ReduceScatter": CollInfo(
        "_reduce_scatter_base",
        "nccl:_reduce_scatter_base",
        "c10d::_reduce_scatter_base_",
        "BFloat16",
    ),
    # The grad-norm all-reduce is fp32, matching the default _f32_ kernel name.
    "AllReduce": CollInfo("allreduce", "nccl:all_reduce", "c10d::allreduce_", "Float"),
    "Broadcast": CollInfo("broadcast", "nccl:broadcast", "c10d::broadcast_", "BFloat16"),
    "Reduce": CollInfo("reduce", "nccl:reduce", "c10d::reduce_", "BFloat16"),
    "AllToAll": CollInfo("all_to_all", "nccl:all_to_all", "c10d::alltoall_base_", "BFloat16"),
    "SendRecv": CollInfo("send", "nccl:send", "c10d::send", "BFloat16"),
    # "gather" is a c10d collective outside the seven named types, so it must land in Other.
    "Other": CollInfo("gather", "nccl:gather", "c10d::gather_", "BFloat16"),
}

# Checked in this order: "reduce" is a substring of the longer names.
_NAME_TYPES: tuple[tuple[str, CollType], ...] = (
    ("reducescatter", "ReduceScatter"),
    ("allgather", "AllGather"),
    ("allreduce", "AllReduce"),
    ("broadcast", "Broadcast"),
    ("alltoall", "AllToAll"),
    ("sendrecv", "SendRecv"),
    ("reduce", "Reduce"),
)


def kernel_name(op: Op, naming: str, ordinal: int = 0) -> str:
    """The name the trace shows for op; ordinal picks among the default compute names."""
    if op.name:
        return op.name
    if op.kind == "comm":
        table = DEV_COMM if naming == "dev" else LEGACY_COMM
        return table[op.coll or "Other"]
    if op.kind == "memcpy":
        return MEMCPY_NAME
    if op.kind == "memset":
        return MEMSET_NAME
    return DEFAULT_COMPUTE[ordinal % len(DEFAULT_COMPUTE)]


def type_from_name(name: str) -> CollType | None:
    """Collective type a kernel name states, None when it states none (Generic, unknown)."""
    if is_deepep(name):
        return "AllToAll"
    lower = name.lower()
    if "generic" in lower:
        return None
    for needle, coll in _NAME_TYPES:
        if needle in lower:
            return coll
    return None


def has_metadata(op: Op) -> bool:
    """Kineto copies collective args only onto kernels linked to a record_param_comms op."""
    return op.metadata and op.launched


def names_collective(op: Op) -> bool:
    """Whether the launch context names the collective: collective metadata, or an annotated
    launch (its c10d op and ``nccl:<coll>`` annotation)."""
    return has_metadata(op) or (op.annotated and op.launched)


def comm_type(op: Op, naming: str) -> CollType:
    """The collective type the engine must assign to a comm op.

    A launch context that names the collective wins over the kernel name (legacy SendRecv and
    Generic kernels run all-to-alls and more); otherwise the name decides.
    """
    if names_collective(op) and op.coll is not None:
        return op.coll
    return type_from_name(kernel_name(op, naming)) or "Other"


def profile_for(name: str) -> KernelProfile:
    """Launch profile of a compute kernel; unknown names get a plausible generic one."""
    known = PROFILES.get(name)
    if known is not None:
        return known
    lower = name.lower()
    for needle, cpu_op in (
        ("gemm", "aten::mm"),
        ("flash", "aten::_flash_attention_forward"),
        ("elementwise", "aten::add_"),
    ):
        if needle in lower:
            return KernelProfile(cpu_op, 64, 0, (256, 1, 1), (256, 1, 1))
    return _FALLBACK_PROFILE
