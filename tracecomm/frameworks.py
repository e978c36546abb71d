"""The frameworks tracecomm tells apart (metrics.md §14a), by key: a light module, read by the
settings file's [run] table and ``tracecomm.profile`` as well as by the detection
(``analysis.framework``)."""

from __future__ import annotations

# The order a framework is named in when several are seen (the more specific first:
# torchtitan runs FSDP2, Megatron-DeepSpeed writes both, a DLRM job runs TorchRec and DDP).
PRIORITY = (
    "vllm",
    "sglang",
    "torchtitan",
    "megatron",
    "deepspeed",
    "fsdp2",
    "fsdp1",
    "torchrec",
    "ddp",
)
LABELS = {
    "vllm": "vLLM",
    "sglang": "SGLang",
    "torchtitan": "torchtitan",
    "megatron": "Megatron-LM",
    "deepspeed": "DeepSpeed",
    "fsdp2": "FSDP2 (fully_shard)",
    "fsdp1": "FSDP1 (FullyShardedDataParallel)",
    "torchrec": "TorchRec",
    "ddp": "DDP",
}
INFERENCE = frozenset({"vllm", "sglang"})


def framework_key(name: str) -> str | None:
    """The key of a framework named by its key or label, in any case ("Megatron-LM",
    "megatron", "fsdp2"); None for a name this list does not hold."""
    wanted = _plain(name)
    for key in PRIORITY:
        label, _, aside = LABELS[key].partition(" (")
        if wanted in (_plain(key), _plain(label), _plain(aside)):
            return key
    return None


def _plain(text: str) -> str:
    return "".join(c for c in text.lower() if c.isalnum())
