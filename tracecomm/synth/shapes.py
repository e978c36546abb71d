"""``record_shapes`` for generated runs: Input Dims on the CPU ops of matmul and attention
kernels, so observed FLOPs can be checked against shapes chosen here."""

from __future__ import annotations

import dataclasses

from tracecomm.synth.names import FLASH_BWD, FLASH_FWD, GEMM_CUTLASS, GEMM_SM90
from tracecomm.synth.schedule import Op, RankSpec, RunSpec

# Kernel name -> (Input Dims, Concrete Inputs) of the aten op that launches it
# (names.PROFILES: aten::mm for the GEMMs, the flash attention ops for the flash kernels).
_QKV = (2, 2048, 32, 128)  # [B, S, H, D]
SHAPES: dict[str, tuple[tuple[tuple[int, ...], ...], tuple[str, ...]]] = {
    GEMM_SM90: (((2048, 4096), (4096, 4096)), ()),
    GEMM_CUTLASS: (((2048, 4096), (4096, 1024)), ()),
    # is_causal is input 8 of the forward, 11 of the backward
    FLASH_FWD: ((_QKV, _QKV, _QKV), ("",) * 8 + ("True",)),
    FLASH_BWD: ((_QKV, _QKV, _QKV, _QKV), ()),  # causality not recorded: a full square
}


def with_shapes(spec: RunSpec) -> RunSpec:
    """The same run with shapes recorded on every matmul and flash-attention op."""
    return dataclasses.replace(spec, ranks=tuple(_rank(r) for r in spec.ranks))


def _rank(rank: RankSpec) -> RankSpec:
    return dataclasses.replace(
        rank, steps=tuple(dataclasses.replace(s, ops=tuple(map(_op, s.ops))) for s in rank.steps)
    )


def _op(op: Op) -> Op:
    found = SHAPES.get(op.name) if op.kind == "compute" else None
    if found is None:
        return op
    return dataclasses.replace(op, shapes=found[0], concrete=found[1])


__all__ = ["SHAPES", "with_shapes"]
