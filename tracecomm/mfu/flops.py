"""Training FLOPs per token from a model's shape (mfu.md §3): exact integer arithmetic.

Conventions (mfu.md §3.2): ``exact`` counts every matmul of a Llama-style layer, MoE by active
parameters, MLA by its own projections, core attention causal-halved by default
(``attention="full"`` counts the full square, as PaLM / torchtitan / older Megatron do);
``6n`` is 6 × all parameters (active ones for MoE); ``6n-hf`` leaves the input embedding out
(HF ``floating_point_ops``); ``palm`` adds the full-square attention term to 6 × all
parameters; ``torchtitan`` does the same without the token embedding; ``megatron`` is
Narayanan et al. 2021's 72·l·h² form (GPT shape).
"""

from __future__ import annotations

from dataclasses import dataclass

from tracecomm.mfu.choices import FORMULAS, Attention, Formula
from tracecomm.mfu.model import ModelShape


@dataclass(frozen=True)
class Params:
    """Parameter counts (MoE: ``active`` counts the routed top-k and the shared experts)."""

    total: int  # every weight, both embeddings when untied, norms included
    active: int  # as total, with MoE layers at their active experts
    matmul: int  # N_mm: active layer matmul weights + LM head (no norms, no input embedding)
    input_embedding: int  # V·h
    norms: int  # (2L+1)·h, Llama-style


def params(shape: ModelShape) -> Params:
    h, layers = shape.hidden, shape.layers
    attention = _attention_weights(shape) * layers
    mlp_total = mlp_active = 0
    for layer in range(layers):
        total, active = _mlp_weights(shape, layer)
        mlp_total += total
        mlp_active += active
    head = shape.vocab * h
    embedding = shape.vocab * h
    norms = (2 * layers + 1) * h
    both = embedding + (0 if shape.tied else head)
    return Params(
        total=attention + mlp_total + norms + both,
        active=attention + mlp_active + norms + both,
        matmul=attention + mlp_active + head,
        input_embedding=embedding,
        norms=norms,
    )


def flops_per_token(
    shape: ModelShape, seq_len: int, formula: Formula = "exact", attention: Attention = "halved"
) -> int:
    """Training (forward + backward) FLOPs per token at sequence length ``seq_len``."""
    p = params(shape)
    h, layers, heads, d = shape.hidden, shape.layers, shape.heads, shape.head_dim
    full_square = 12 * layers * heads * d * seq_len
    if formula == "exact":
        return 6 * p.matmul + 3 * sum(
            core_attention(shape, seq_len, w, attention) for w in _windows(shape)
        )
    if formula == "6n":
        return 6 * p.active
    if formula == "6n-hf":
        return 6 * (p.active - p.input_embedding)
    if formula == "palm":
        return 6 * p.active + full_square
    if formula == "torchtitan":
        return 6 * (p.active - (0 if shape.tied else p.input_embedding)) + full_square
    if formula == "megatron":
        return 72 * layers * h * h + 12 * layers * h * seq_len + 6 * h * shape.vocab
    raise ValueError(f"unknown FLOP formula {formula!r}; one of {', '.join(FORMULAS)}")


def hfu_flops_per_token(shape: ModelShape, seq_len: int, attention: Attention = "halved") -> int:
    """Full activation recompute: every layer runs forward 4×, the LM head 3× (mfu.md §5.3)."""
    head = 2 * shape.hidden * shape.vocab
    layers = sum(
        layer_forward(shape, layer, seq_len, attention, window)
        for layer, window in enumerate(_windows(shape))
    )
    return 4 * layers + 3 * head


def layer_forward(
    shape: ModelShape,
    layer: int,
    seq_len: int,
    attention: Attention = "halved",
    window: int | None = None,
) -> int:
    """Forward FLOPs per token of one layer: projections + MLP (or MoE) + core attention."""
    _, active = _mlp_weights(shape, layer)
    return 2 * (_attention_weights(shape) + active) + core_attention(
        shape, seq_len, window, attention
    )


def core_attention(
    shape: ModelShape, seq_len: int, window: int | None, attention: Attention
) -> int:
    """QKᵀ + PV forward FLOPs per token of one layer. Each query meets T keys (full square),
    T/2 (causal-halved), or w (a sliding window shorter than the sequence)."""
    per_key = 2 * shape.heads * _qk_plus_v(shape)  # two matmuls, 2 FLOPs per multiply-add
    if window is not None and window < seq_len:
        return per_key * window
    return per_key * seq_len // (2 if attention == "halved" else 1)


def _qk_plus_v(shape: ModelShape) -> int:
    if shape.mla is not None:
        return shape.mla.nope + shape.mla.rope + shape.mla.v
    return 2 * shape.head_dim


def _windows(shape: ModelShape) -> tuple[int | None, ...]:
    return shape.windows or (None,) * shape.layers


def _attention_weights(shape: ModelShape) -> int:
    h, heads, d = shape.hidden, shape.heads, shape.head_dim
    mla = shape.mla
    if mla is None:
        return 2 * h * heads * d + 2 * h * shape.kv_heads * d  # Q, O; K, V
    qk = mla.nope + mla.rope
    q = h * heads * qk if mla.q_rank is None else h * mla.q_rank + mla.q_rank * heads * qk
    kv = h * (mla.kv_rank + mla.rope) + mla.kv_rank * heads * (mla.nope + mla.v)
    return q + kv + heads * mla.v * h


def _mlp_weights(shape: ModelShape, layer: int) -> tuple[int, int]:
    """(all, active) MLP weights of one layer; an MoE layer's router counts in both."""
    matrices = 3 if shape.gated else 2
    moe = shape.moe
    if moe is None or not moe.sparse_layers[layer]:
        dense = matrices * shape.hidden * shape.intermediate
        return dense, dense
    h = shape.hidden
    router = h * moe.experts
    shared = matrices * h * moe.shared_width
    expert = matrices * h * moe.width
    return moe.experts * expert + shared + router, moe.top_k * expert + shared + router
