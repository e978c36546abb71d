"""FLOPs of one recorded op from its ``Input Dims`` (mfu.md §8): matmuls, convolutions and
attention, the formulas of ``torch.utils.flop_counter``. What these count is a lower bound on
the hardware FLOPs (ops without a formula, fused or compiled kernels are missed)."""

from __future__ import annotations

import math
from typing import Any, Literal

Family = Literal["matmul", "conv", "attention"]

MATMUL_OPS = frozenset(
    {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::_scaled_mm"}
)
CONV_OPS = frozenset({"aten::convolution", "aten::convolution_backward"})
# [B, H, S, D] layout (SDPA's own ops) and [B, S, H, D] (the flash kernels' aten ops)
_SDPA_FWD = {
    "aten::_scaled_dot_product_flash_attention": 4,  # position of is_causal in the inputs
    "aten::_scaled_dot_product_efficient_attention": 6,
    "aten::_scaled_dot_product_cudnn_attention": 6,
}
_SDPA_BWD = {
    "aten::_scaled_dot_product_flash_attention_backward": 11,
    "aten::_scaled_dot_product_efficient_attention_backward": 11,
    "aten::_scaled_dot_product_cudnn_attention_backward": 14,
}
_FLASH_FWD = {"aten::_flash_attention_forward": 8}
_FLASH_BWD = {"aten::_flash_attention_backward": 11}
ATTENTION_OPS = frozenset({*_SDPA_FWD, *_SDPA_BWD, *_FLASH_FWD, *_FLASH_BWD})
SHAPED_OPS = MATMUL_OPS | CONV_OPS | ATTENTION_OPS


def op_flops(name: str, dims: Any, concrete: Any = None) -> tuple[int, Family, bool | None] | None:
    """(FLOPs, family, causal) of one op; causal is None when the trace does not say (the
    attention is then counted as a full square). None when the shapes do not fit."""
    try:
        if name in MATMUL_OPS:
            return _matmul(name, dims), "matmul", None
        if name in CONV_OPS:
            flops = _conv(name, dims, concrete)
            return None if flops is None else (flops, "conv", None)
        return _attention(name, dims, concrete)
    except (TypeError, ValueError, IndexError):
        return None


def _matmul(name: str, dims: list[list[int]]) -> int:
    a, b = (dims[1], dims[2]) if name in ("aten::addmm", "aten::baddbmm") else (dims[0], dims[1])
    if len(a) == 2:
        (m, k), (_, n) = a, b
        return 2 * m * k * n
    (batch, m, k), (_, _, n) = a, b
    return 2 * batch * m * k * n


def _conv(name: str, dims: list[list[int]], concrete: Any) -> int | None:
    if name == "aten::convolution_backward":
        grad_out, _, weight = dims[0], dims[1], dims[2]
        mask = _bools(concrete, 10) if concrete else None
        per_output = 2 * math.prod(grad_out) * math.prod(weight[1:])
        # grad of the input and of the weight, each one forward's worth (unless masked off)
        return per_output * (sum(mask[:2]) if mask else 2)
    if not concrete:
        return None  # output size needs stride / padding / dilation (Concrete Inputs)
    x, weight = dims[0], dims[1]
    stride, padding, dilation = (_ints(concrete[i]) for i in (3, 4, 5))
    spatial = [
        (size + 2 * p - d * (k - 1) - 1) // s + 1
        for size, k, s, p, d in zip(x[2:], weight[2:], stride, padding, dilation, strict=True)
    ]
    return 2 * x[0] * weight[0] * math.prod(spatial) * math.prod(weight[1:])


def _attention(name: str, dims: list[list[int]], concrete: Any) -> tuple[int, Family, bool | None]:
    if name in _SDPA_FWD or name in _SDPA_BWD:
        first = 1 if name in _SDPA_BWD else 0
        q, k, v = dims[first], dims[first + 1], dims[first + 2]
        b, h, s_q, d_q = q
        s_kv, d_v = k[2], v[3]
        causal_at = (_SDPA_FWD | _SDPA_BWD)[name]
    else:
        first = 1 if name in _FLASH_BWD else 0
        q, k, v = dims[first], dims[first + 1], dims[first + 2]
        b, s_q, h, d_q = q
        s_kv, d_v = k[1], v[3]
        causal_at = (_FLASH_FWD | _FLASH_BWD)[name]
    pairs = b * h * s_q * s_kv
    backward = name in _SDPA_BWD or name in _FLASH_BWD
    # forward: QKᵀ and PV; backward: dV, dP, dQ, dK and the QKᵀ recompute (flop_counter)
    flops = 2 * pairs * (2 * d_v + 3 * d_q) if backward else 2 * pairs * (d_q + d_v)
    causal = _bool(concrete[causal_at]) if concrete and len(concrete) > causal_at else None
    return (flops // 2 if causal else flops), "attention", causal


# Kineto's ``Input type`` spellings -> (bytes per element, the peak table's dtype column)
_ELEMENT = (
    ("float8", 1, "fp8"),
    ("bfloat16", 2, "bf16"),
    ("half", 2, "fp16"),
    ("float16", 2, "fp16"),
    ("double", 8, "fp64"),
    ("float", 4, "fp32"),
    ("long", 8, None),
    ("int64", 8, None),
    ("int", 4, None),
    ("bool", 1, None),
    ("char", 1, None),
    ("byte", 1, None),
)


def element(type_name: object) -> tuple[int, str | None] | None:
    """(bytes per element, dtype) of one ``Input type`` entry (``c10::BFloat16``, ``float``);
    None for a scalar or an unknown type."""
    text = str(type_name).lower().removeprefix("c10::")
    for needle, size, dtype in _ELEMENT:
        if needle in text:
            return size, dtype
    return None


def op_bytes(name: str, dims: Any, types: Any, concrete: Any = None) -> tuple[int, str] | None:
    """(bytes, dtype) an op must move at the least (metrics.md §15): each tensor input read
    once and each output written once, in the first tensor input's element size (the ideal
    traffic of a roofline; caches that re-read make the real traffic larger). None when the
    shapes or types do not say."""
    try:
        tensors = [
            (math.prod(d), e)
            for d, t in zip(dims, types or (), strict=False)
            if isinstance(d, list) and d and (e := element(t)) is not None
        ]
        if not tensors:
            return None
        size = tensors[0][1][0]
        dtype = tensors[0][1][1]
        out = _output_elements(name, dims, concrete)
        if out is None or dtype is None:
            return None
        return sum(n * e[0] for n, e in tensors) + out * size, dtype
    except (TypeError, ValueError, IndexError):
        return None


def _output_elements(name: str, dims: list[list[int]], concrete: Any) -> int | None:
    if name in MATMUL_OPS:
        a, b = (
            (dims[1], dims[2]) if name in ("aten::addmm", "aten::baddbmm") else (dims[0], dims[1])
        )
        return math.prod(a[:-1]) * b[-1]
    if name == "aten::convolution_backward":
        mask = _bools(concrete, 10) if concrete else None
        grads = (math.prod(dims[1]), math.prod(dims[2]))  # grad of the input, of the weight
        return sum(n for n, on in zip(grads, mask[:2] if mask else (True, True), strict=True) if on)
    if name in CONV_OPS:
        if not concrete:
            return None
        x, weight = dims[0], dims[1]
        stride, padding, dilation = (_ints(concrete[i]) for i in (3, 4, 5))
        spatial = [
            (size + 2 * p - d * (k - 1) - 1) // s + 1
            for size, k, s, p, d in zip(x[2:], weight[2:], stride, padding, dilation, strict=True)
        ]
        return x[0] * weight[0] * math.prod(spatial)
    if name in _SDPA_BWD or name in _FLASH_BWD:
        return sum(math.prod(dims[i]) for i in (1, 2, 3))  # dQ, dK, dV
    if name in _SDPA_FWD:
        q, v = dims[0], dims[2]
        return q[0] * q[1] * q[2] * v[3]
    if name in _FLASH_FWD:
        q, v = dims[0], dims[2]
        return q[0] * q[1] * q[2] * v[3]
    return None


def _ints(text: str) -> list[int]:
    return [int(t) for t in str(text).strip("[]() ").split(",") if t.strip()]


def _bool(text: Any) -> bool | None:
    value = str(text).strip().lower()
    return True if value in ("true", "1") else False if value in ("false", "0") else None


def _bools(concrete: Any, at: int) -> list[bool] | None:
    if len(concrete) <= at:
        return None
    values = [_bool(t) for t in str(concrete[at]).strip("[]() ").split(",")]
    return [bool(v) for v in values] if values and None not in values else None
