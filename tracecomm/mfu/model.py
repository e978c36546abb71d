"""A transformer's shape, read from a Hugging Face style ``config.json`` (mfu.md §4)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# model_type values whose MLP has three matrices (gate, up, down); mfu.md §4
GATED = frozenset(
    {
        "llama",
        "mistral",
        "mixtral",
        "qwen2",
        "qwen2_moe",
        "qwen3",
        "qwen3_moe",
        "gemma",
        "gemma2",
        "gemma3_text",
        "deepseek_v2",
        "deepseek_v3",
    }
)
NOT_GATED = frozenset({"gpt2", "gpt_neox", "opt", "falcon", "gptj", "bloom"})
# families whose configs leave tie_word_embeddings out when it is false
UNTIED_BY_DEFAULT = frozenset(
    {"llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "deepseek_v2", "deepseek_v3"}
)


class ConfigError(ValueError):
    """A model config that cannot be turned into a FLOP count (the message names the field)."""


@dataclass(frozen=True)
class Moe:
    experts: int  # E, routed experts
    top_k: int
    width: int  # w, one expert's intermediate size
    shared_width: int  # all shared experts together (0: none)
    sparse_layers: tuple[bool, ...]  # per layer: MoE (True) or dense MLP


@dataclass(frozen=True)
class Mla:
    """DeepSeek multi-head latent attention (ranks and head dims)."""

    q_rank: int | None  # r_q; None: queries projected directly
    kv_rank: int
    nope: int
    rope: int
    v: int


@dataclass(frozen=True)
class ModelShape:
    model_type: str
    hidden: int  # h
    layers: int  # L
    heads: int  # n_q
    kv_heads: int  # n_kv
    head_dim: int  # d
    intermediate: int  # f (the dense MLP width)
    vocab: int  # V
    gated: bool
    tied: bool
    moe: Moe | None = None
    mla: Mla | None = None
    # per layer: the attention window in tokens, None for full attention
    windows: tuple[int | None, ...] = ()


def load_config(path: Path) -> ModelShape:
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from exc
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: a model config is a JSON object")
    # multimodal configs nest the language model
    text = raw.get("text_config")
    return model_shape(text if isinstance(text, dict) else raw)


def model_shape(config: Mapping[str, Any]) -> ModelShape:
    model_type = str(config.get("model_type") or "")
    hidden = _required(config, "hidden_size", "n_embd", "d_model")
    layers = _required(config, "num_hidden_layers", "n_layer", "num_layers")
    heads = _required(config, "num_attention_heads", "n_head")
    vocab = _required(config, "vocab_size")
    kv_heads = _int(config, "num_key_value_heads") or heads
    head_dim = _int(config, "head_dim") or hidden // heads
    intermediate = _int(config, "intermediate_size", "n_inner", "ffn_dim") or 4 * hidden
    if model_type in GATED:
        gated = True
    elif model_type in NOT_GATED or "n_embd" in config:
        gated = False
    else:
        raise ConfigError(
            f"model_type {model_type!r}: unknown MLP kind (gated or not); "
            "pass --model-flops-per-step or --flops-per-token instead"
        )
    tied = config.get("tie_word_embeddings")
    return ModelShape(
        model_type=model_type,
        hidden=hidden,
        layers=layers,
        heads=heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        intermediate=intermediate,
        vocab=vocab,
        gated=gated,
        tied=bool(tied) if tied is not None else model_type not in UNTIED_BY_DEFAULT,
        moe=_moe(config, model_type, layers),
        mla=_mla(config),
        windows=_windows(config, layers),
    )


def _moe(config: Mapping[str, Any], model_type: str, layers: int) -> Moe | None:
    experts = _int(config, "num_local_experts", "n_routed_experts", "num_experts")
    if not experts:
        return None
    top_k = _int(config, "num_experts_per_tok") or 1
    if model_type == "mixtral":
        width, shared = _int(config, "intermediate_size") or 0, 0
    else:
        width = _int(config, "moe_intermediate_size") or _int(config, "intermediate_size") or 0
        shared = (_int(config, "n_shared_experts") or 0) * width + (
            _int(config, "shared_expert_intermediate_size") or 0
        )
    dense_first = _int(config, "first_k_dense_replace") or 0
    only_mlp = set(config.get("mlp_only_layers") or ())
    step = _int(config, "decoder_sparse_step") or 1
    sparse = tuple(
        i >= dense_first and i not in only_mlp and (i + 1) % step == 0 for i in range(layers)
    )
    return Moe(experts, top_k, width, shared, sparse)


def _mla(config: Mapping[str, Any]) -> Mla | None:
    kv_rank = _int(config, "kv_lora_rank")
    if not kv_rank:
        return None
    return Mla(
        q_rank=_int(config, "q_lora_rank"),
        kv_rank=kv_rank,
        nope=_int(config, "qk_nope_head_dim") or 0,
        rope=_int(config, "qk_rope_head_dim") or 0,
        v=_int(config, "v_head_dim") or 0,
    )


def _windows(config: Mapping[str, Any], layers: int) -> tuple[int | None, ...]:
    window = _int(config, "sliding_window")
    if not window or config.get("use_sliding_window") is False:
        return (None,) * layers
    kinds = config.get("layer_types")
    if isinstance(kinds, list) and len(kinds) == layers:
        return tuple(window if k == "sliding_attention" else None for k in kinds)
    return (window,) * layers


def _int(config: Mapping[str, Any], *names: str) -> int | None:
    for name in names:
        value = config.get(name)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def _required(config: Mapping[str, Any], *names: str) -> int:
    value = _int(config, *names)
    if value is None or value <= 0:
        raise ConfigError(f"the model config has no {names[0]} (a positive integer)")
    return value
