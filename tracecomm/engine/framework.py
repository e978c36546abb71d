"""Which training or serving framework wrote the trace, from names only it writes (metrics.md
§14a): the findings give the knobs of that framework, not another's.

The evidence is names the trace holds anyway: CPU ops and annotations (``record_function``
ranges such as FSDP2's ``FSDP::pre_forward``, and the ops that launched kernels), GPU-side
ranges, kernel names (vLLM's ``vllm::rms_norm_kernel``) and process
group names / descriptions (Kineto's collective metadata: Megatron-Core and DeviceMesh name
their groups). Each framework's marks are a pattern; a rank keeps the first few names each
pattern matched, so a reader sees why.
"""

from __future__ import annotations

import polars as pl

from tracecomm.engine.model import FrameworkMark
from tracecomm.ingest.model import RankEvents

# (framework, pattern over names): anchored where a loose word would match user code
_PATTERNS: tuple[tuple[str, str], ...] = (
    # DeviceMesh names a group "mesh_<dim>": torchtitan's own dim names (mesh_dp, mesh_tp are
    # anyone's DeviceMesh, no framework)
    (
        "torchtitan",
        r"(?i)^mesh_(?:dp_shard|dp_replicate|dp_shard_cp|dp_cp|dp_shard_mod_ep|dp_shard_in_ep)$",
    ),
    ("torchtitan", r"(?i)torchtitan"),
    # Megatron-Core's group descriptions, its timers' names (forward-compute, ...), its module
    (
        "megatron",
        r"^(?:TENSOR|DATA|PIPELINE|EXPERT|CONTEXT)_(?:MODEL_)?PARALLEL_GROUP|^EMBEDDING_GROUP$",
    ),
    (
        "megatron",
        r"^(?:forward-compute|backward-compute|forward-backward|forward-recv|forward-send|"
        r"backward-recv|backward-send|forward-send-backward-recv|backward-send-forward-recv|"
        r"batch-generator|optimizer-clip-main-grad|optimizer-count-zeros|optimizer-inner-step|"
        r"optimizer-copy-to-main-grad|optimizer-copy-main-to-model-params|"
        r"optimizer-unscale-and-check-inf|params-all-gather|grads-reduce-scatter|"
        r"grads-all-reduce|embedding-grads-all-reduce)$",
    ),
    ("megatron", r"^dp_stage\d+$|megatron[/.]"),
    ("deepspeed", r"(?i)deepspeed|^DeepSpeedZeroOptimizer"),
    # its ZeRO stage, from the optimizer's class or module (kept apart: the names above are many)
    ("deepspeed", r"(?i)DeepSpeedZeroOptimizer_Stage3|zero[/.]stage3|zero[/.]stage_1_and_2"),
    ("fsdp2", r"^FSDP::"),
    ("fsdp1", r"^FullyShardedDataParallel\."),
    ("ddp", r"^DistributedDataParallel\.(?:forward|_pre_forward|_post_forward)$"),
    (
        "torchrec",
        r"KJTAllToAll|PooledEmbeddingsAwaitable|^## all2all_data:|TrainPipelineSparseDist",
    ),
    ("vllm", r"(?i)vllm|^vllm::|unified_attention"),
    ("sglang", r"(?i)sglang|sgl_kernel"),
)
FRAMEWORKS = tuple(dict.fromkeys(name for name, _ in _PATTERNS))
MARKS_PER_PATTERN = 3


def framework_marks(rank: RankEvents) -> tuple[FrameworkMark, ...]:
    """The framework marks of one rank's trace (one query over its distinct names)."""
    sources = [
        # distinct per source before the concat: the in-memory engine would otherwise copy
        # every kernel's and launch's name into one column first (2.9 M on a 2 GB rank)
        frame.lazy().select(pl.col(column).cast(pl.Utf8).alias("name")).unique()
        for frame, column in (
            (rank.cpu, "name"),
            (rank.gpu_ranges, "name"),
            (rank.device, "name"),
            (rank.launches, "op"),  # the CPU op that launched each kernel (vllm::..., FSDP::...)
            (rank.device_meta, "pg_name"),
            (rank.device_meta, "pg_desc"),
            (rank.comm_ops, "pg_name"),
            (rank.comm_ops, "pg_desc"),
        )
        if column in frame.columns
    ]
    if not sources:
        return ()
    names = pl.concat(sources, how="vertical").drop_nulls().unique()
    found = (
        names.select(
            pl.col("name")
            .filter(pl.col("name").str.contains(pattern))
            .sort()
            .head(MARKS_PER_PATTERN)
            .implode()
            .alias(str(i))
            for i, (_, pattern) in enumerate(_PATTERNS)
        )
        .collect(engine="in-memory")
        .row(0)
    )
    marks: dict[tuple[str, str], None] = {}
    for (framework, _), matched in zip(_PATTERNS, found, strict=True):
        for name in matched or ():
            marks[(framework, name)] = None
    return tuple(FrameworkMark(framework, name) for framework, name in marks)
