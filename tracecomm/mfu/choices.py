"""The names the MFU inputs take (``--flops-formula``, ``--attention``, ``--dtype``), each list
once: the FLOP counter, the peak table, the checks and the options read them from here. It
imports nothing, so the CLI's help can show them before the FLOP counter loads."""

from __future__ import annotations

from typing import Literal, get_args

Formula = Literal["exact", "6n", "6n-hf", "palm", "torchtitan", "megatron"]
Attention = Literal["halved", "full"]
Dtype = Literal["bf16", "fp16", "fp8", "tf32", "fp32"]

FORMULAS: tuple[str, ...] = get_args(Formula)
ATTENTIONS: tuple[str, ...] = get_args(Attention)
DTYPES: tuple[str, ...] = get_args(Dtype)
