"""What to try, in the knobs of the framework that ran the job (metrics.md §14a).

Each table maps a cause to the advice of one framework; ``advice_for`` takes the first
detected framework (most specific first) that has advice for the cause. A serving engine
(vLLM, SGLang) never gets training advice, and a trace that captures or replays CUDA graphs is
never told to capture CUDA graphs.
"""

from __future__ import annotations

from tracecomm.analysis.framework import Frameworks

# exposed communication, by collective type
COMM: dict[str, dict[str, tuple[str, ...]]] = {
    "megatron": {
        "AllGather": (
            "Megatron: --overlap-param-gather with --use-distributed-optimizer (each bucket's "
            "parameter AllGather runs during the previous layers' forward); a larger "
            "--ddp-bucket-size gives fewer, larger AllGathers",
            "tensor-parallel AllGathers (sequence parallel): --tp-comm-overlap (Transformer "
            "Engine's userbuffers) with --sequence-parallel",
        ),
        "ReduceScatter": (
            "Megatron: --overlap-grad-reduce with --use-distributed-optimizer (each bucket's "
            "gradient ReduceScatter starts while backward goes on); a smaller --ddp-bucket-size "
            "starts the first one earlier",
            "reduce gradients in bf16 (--grad-reduce-in-bf16): half the bytes",
            "tensor-parallel ReduceScatters (sequence parallel): --tp-comm-overlap",
        ),
        "AllReduce": (
            "Megatron: --overlap-grad-reduce (each bucket's gradient AllReduce starts in "
            "backward); --use-distributed-optimizer turns it into ReduceScatter + AllGather, "
            "both overlappable; tune --ddp-bucket-size",
            "tensor-parallel AllReduces: --sequence-parallel (ReduceScatter + AllGather) with "
            "--tp-comm-overlap",
        ),
        "AllToAll": (
            "Megatron MoE: --moe-token-dispatcher-type alltoall, or flex with "
            "--moe-enable-deepep; --overlap-moe-expert-parallel-comm (with "
            "--delay-wgrad-compute) and --moe-shared-expert-overlap hide dispatch / combine "
            "behind compute; keep --expert-model-parallel-size inside a node where it fits",
        ),
        "SendRecv": (
            "Megatron: an interleaved schedule (--num-layers-per-virtual-pipeline-stage) "
            "overlaps the stage-to-stage transfers (--overlap-p2p-communication); more "
            "micro-batches per step (a smaller --micro-batch-size at the same "
            "--global-batch-size)",
        ),
    },
    "deepspeed": {
        "AllGather": (
            "DeepSpeed ZeRO-3: overlap_comm: true; a larger stage3_prefetch_bucket_size "
            "prefetches the next parameters while this layer computes; "
            "stage3_param_persistence_threshold / stage3_max_live_parameters keep small or "
            "hot parameters gathered (more memory)",
        ),
        "ReduceScatter": (
            "DeepSpeed ZeRO: overlap_comm: true with contiguous_gradients: true; a larger "
            "reduce_bucket_size gives fewer, larger reductions",
            "communication_data_type: bf16 (or fp16) halves the gradient bytes",
        ),
        "AllReduce": (
            "DeepSpeed: overlap_comm: true and allreduce_bucket_size / reduce_bucket_size; "
            "ZeRO stage 1 or 2 reduce-scatters the gradients instead (less memory)",
        ),
    },
    "torchtitan": {
        "AllGather": (
            "torchtitan: --parallelism.fsdp_reshard_after_forward never keeps parameters "
            "gathered between forward and backward (more memory); "
            "--parallelism.enable_async_tensor_parallel (with --compile.enable) overlaps the "
            "tensor-parallel AllGathers",
        ),
        "ReduceScatter": (
            "torchtitan: --training.mixed_precision_reduce bfloat16 halves the gradient bytes "
            "(float32 by default); async tensor parallel for the tensor-parallel ones",
        ),
        "SendRecv": (
            "torchtitan: --parallelism.pipeline_parallel_schedule Interleaved1F1B or "
            "ZBVZeroBubble; a smaller --parallelism.pipeline_parallel_microbatch_size (more "
            "micro-batches)",
        ),
    },
    "fsdp2": {
        "AllGather": (
            "FSDP2: explicit prefetching (set_modules_to_forward_prefetch / "
            "set_modules_to_backward_prefetch on the fully_shard modules); "
            "reshard_after_forward=False (or an int: a smaller group) keeps parameters "
            "between forward and backward",
            "fully_shard larger modules (fewer, larger AllGathers overlap better)",
        ),
        "ReduceScatter": (
            "FSDP2: MixedPrecisionPolicy(reduce_dtype=torch.bfloat16) halves the bytes; "
            "fully_shard larger modules",
            "with gradient accumulation: set_requires_gradient_sync(False) on all but the "
            "last micro-batch",
        ),
        "AllReduce": (
            "FSDP2 HSDP (the replicate dimension's AllReduce): set_requires_all_reduce(False) "
            "on all but the last micro-batch; a larger shard group",
        ),
    },
    "fsdp1": {
        "AllGather": (
            "FSDP1: forward_prefetch=True, backward_prefetch=BACKWARD_PRE; "
            "limit_all_gathers=False lets more AllGathers be in flight",
            "ShardingStrategy.SHARD_GRAD_OP keeps parameters gathered between forward and "
            "backward (more memory); wrap larger units (auto_wrap_policy)",
        ),
        "ReduceScatter": (
            "FSDP1: backward_prefetch=BACKWARD_PRE; MixedPrecision(reduce_dtype="
            "torch.bfloat16) halves the bytes; wrap larger units",
            "with gradient accumulation: no_sync() on all but the last micro-batch",
        ),
    },
    "ddp": {
        "AllReduce": (
            "DDP: tune bucket_cap_mb (larger buckets: fewer AllReduces; smaller: the first one "
            "starts earlier in backward); gradient_as_bucket_view=True; static_graph=True",
            "check that the first buckets do not wait for the whole backward (unused "
            "parameters, find_unused_parameters=True)",
        ),
    },
    "torchrec": {
        "AllToAll": (
            "TorchRec: an embedding sharding plan that keeps more tables data- or "
            "row-parallel (EmbeddingShardingPlanner) moves fewer rows through the all-to-all; "
            "TrainPipelineSparseDist overlaps the next batch's input distribution",
        ),
    },
    "vllm": {
        "AllReduce": (
            "vLLM: the tensor-parallel AllReduce of every layer is on the decode path: keep "
            "the custom all-reduce on (no --disable-custom-all-reduce) on NVLink; a smaller "
            "--tensor-parallel-size with more replicas (--data-parallel-size), or "
            "--pipeline-parallel-size across nodes",
        ),
        "AllToAll": (
            "vLLM expert parallelism (--enable-expert-parallel): the DeepEP all-to-all backend "
            "(VLLM_ALL2ALL_BACKEND=deepep_low_latency for decode, deepep_high_throughput for "
            "prefill); dual-batch overlap where the version has it (--enable-dbo)",
        ),
    },
    "sglang": {
        "AllReduce": (
            "SGLang: keep the custom all-reduce on (no --disable-custom-all-reduce); a smaller "
            "--tp-size with --dp-size replicas; --enable-dp-attention for MoE models",
        ),
        "AllToAll": (
            "SGLang: the DeepEP backend for expert parallelism (--moe-a2a-backend deepep) and "
            "--enable-two-batch-overlap",
        ),
    },
}

# the GPU waiting for the CPU to launch kernels
HOST_BOUND_GENERIC = (
    "capture the step in CUDA graphs (torch.compile mode='reduce-overhead', or "
    "torch.cuda.graphs) or fuse small kernels (torch.compile): fewer launches",
    "a larger micro-batch per launch; no .item(), .cpu() or printing of tensors inside the step",
)
HOST_BOUND_WITH_GRAPHS = (
    "this trace already captures or replays CUDA graphs: the launches left are those outside "
    "the graphs; capture more of the step in them (torch.compile mode='reduce-overhead' over "
    "the whole step), or fuse the small kernels outside them",
    "no .item(), .cpu() or printing of tensors inside the step",
)
HOST_BOUND_CAPTURE = (
    "this trace records a CUDA graph capture, whose launches run nothing: profile the steps "
    "that replay the graphs (after the warm-up and capture) before reading launch overhead "
    "from it",
)
HOST_BOUND: dict[str, tuple[str, ...]] = {
    "vllm": (
        "vLLM: decode runs in CUDA graphs unless --enforce-eager: drop --enforce-eager; cover "
        "the batch sizes served with captured graphs (--max-num-seqs, the compilation "
        "config's cudagraph capture sizes)",
        "the scheduler's CPU time between steps: async output processing and a larger "
        "--max-num-batched-tokens",
    ),
    "sglang": (
        "SGLang: decode runs in CUDA graphs unless --disable-cuda-graph; raise "
        "--cuda-graph-max-bs to cover the batch sizes served; --enable-torch-compile",
    ),
    "megatron": (
        "Megatron: CUDA graphs for the transformer layers (--enable-cuda-graph, or "
        "--external-cuda-graph) and fused kernels (Transformer Engine, the bias-GeLU and "
        "bias-dropout fusions left on) cut the launches",
        "a larger --micro-batch-size per launch",
    ),
}
# the stages of a pipeline waiting for each other
PIPELINE: dict[str, tuple[str, ...]] = {
    "megatron": (
        "Megatron: more micro-batches per step (a smaller --micro-batch-size at the same "
        "--global-batch-size; the textbook bubble is (p − 1) / (m + p − 1))",
        "an interleaved schedule: --num-layers-per-virtual-pipeline-stage (or "
        "--num-virtual-stages-per-pipeline-rank), with --overlap-p2p-communication",
    ),
    "torchtitan": (
        "torchtitan: --parallelism.pipeline_parallel_schedule Interleaved1F1B, "
        "InterleavedZeroBubble or ZBVZeroBubble; a smaller "
        "--parallelism.pipeline_parallel_microbatch_size (more micro-batches)",
    ),
    "deepspeed": (
        "DeepSpeed pipeline: more micro-batches (gradient_accumulation_steps at a smaller "
        "train_micro_batch_size_per_gpu); balance the stages (PipelineModule "
        "partition_method='parameters' or 'type:...')",
    ),
}
PIPELINE_GENERIC = (
    "more micro-batches per step (the textbook bubble is (p − 1) / (m + p − 1)): a "
    "smaller micro-batch at the same global batch",
    "an interleaved schedule (virtual stages: Megatron "
    "--num-layers-per-virtual-pipeline-stage, torchtitan Interleaved1F1B) or a "
    "zero-bubble one (ZBV, ZB-H1)",
)
# training-only causes: a serving engine gets these instead
NOT_FOR_SERVING = (
    "a serving engine's trace: find what issues it on the timeline (tracecomm export) and "
    "read the engine's own settings for it",
)


def framework_advice(
    frameworks: Frameworks | None, table: dict[str, tuple[str, ...]]
) -> tuple[str, ...] | None:
    """The first detected framework's entry of ``table``; None when none has one."""
    for key in frameworks.keys if frameworks is not None else ():
        if key in table:
            return table[key]
    return None


def comm_advice(frameworks: Frameworks | None, coll: str) -> tuple[str, ...] | None:
    """The detected framework's advice for exposed ``coll``; None: the generic advice, or
    (for a serving engine) none of the training knobs."""
    for key in frameworks.keys if frameworks is not None else ():
        found = COMM.get(key, {}).get(coll)
        if found:
            return found
    if frameworks is not None and frameworks.inference:
        return NOT_FOR_SERVING
    return None


def host_bound_advice(frameworks: Frameworks | None, graphs: str | None) -> tuple[str, ...]:
    """``graphs``: "capture" when the trace records a graph capture and no replay, "replay"
    when it replays graphs, None without graphs."""
    if graphs == "capture":
        return HOST_BOUND_CAPTURE
    own = framework_advice(frameworks, HOST_BOUND)
    if graphs == "replay":
        return HOST_BOUND_WITH_GRAPHS + (own[1:] if own is not None and len(own) > 1 else ())
    return own or HOST_BOUND_GENERIC


def pipeline_advice(frameworks: Frameworks | None) -> tuple[str, ...]:
    return framework_advice(frameworks, PIPELINE) or PIPELINE_GENERIC
