"""Observed FLOPs from recorded shapes (mfu.md §8): formulas, and a generated run's totals."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tracecomm.cli import EXIT_OK, app
from tracecomm.mfu.opflops import op_flops
from tracecomm.synth import expected_run, fsdp_run, write_run
from tracecomm.synth.shapes import with_shapes


@pytest.mark.parametrize(
    ("name", "dims", "concrete", "flops", "family"),
    [
        ("aten::mm", [[64, 128], [128, 32]], None, 2 * 64 * 128 * 32, "matmul"),
        ("aten::addmm", [[32], [64, 128], [128, 32]], None, 2 * 64 * 128 * 32, "matmul"),
        ("aten::bmm", [[4, 64, 128], [4, 128, 32]], None, 2 * 4 * 64 * 128 * 32, "matmul"),
        ("aten::baddbmm", [[], [4, 8, 16], [4, 16, 2]], None, 2 * 4 * 8 * 16 * 2, "matmul"),
        # 1×3×32×32 input, 16 3×3 filters, stride 1, padding 1: output 32×32
        (
            "aten::convolution",
            [[1, 3, 32, 32], [16, 3, 3, 3], [16], [], [], [], [], [], []],
            ["", "", "", "[1, 1]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "1"],
            2 * 1 * 16 * 32 * 32 * 3 * 3 * 3,
            "conv",
        ),
        (
            "aten::convolution_backward",
            [[1, 16, 32, 32], [1, 3, 32, 32], [16, 3, 3, 3]],
            None,
            2 * 2 * 1 * 16 * 32 * 32 * 3 * 3 * 3,
            "conv",
        ),
        # SDPA [B, H, S, D]: QKᵀ and PV, halved when is_causal (input 4) is True
        (
            "aten::_scaled_dot_product_flash_attention",
            [[2, 8, 512, 64]] * 3,
            ["", "", "", "0.0", "True"],
            2 * 2 * 8 * 512 * 512 * 128 // 2,
            "attention",
        ),
        (
            "aten::_scaled_dot_product_flash_attention_backward",
            [[2, 8, 512, 64]] * 4,
            None,
            2 * 2 * 8 * 512 * 512 * (2 * 64 + 3 * 64),
            "attention",
        ),
    ],
)
def test_op_formulas(name: str, dims: Any, concrete: Any, flops: int, family: str) -> None:
    found = op_flops(name, dims, concrete)
    assert found is not None and found[:2] == (flops, family)


def test_unusable_shapes_count_nothing() -> None:
    assert op_flops("aten::mm", [[64, 128]]) is None
    assert op_flops("aten::convolution", [[1, 3, 8, 8], [4, 3, 3, 3]]) is None  # no strides


def expected_observed(spec: Any) -> dict[int, tuple[int, int, int]]:
    """Per rank (flops, counted kernel ns, all compute kernel ns) over the complete steps,
    straight from the schedule: 2·M·K·N per GEMM; flash forward causal (halved), backward
    without a causal flag counted as a full square, 2·B·H·S²·(2·D + 3·D)."""
    out = {}
    figures = expected_run(spec)
    for rank in spec.ranks:
        flops = counted = every = 0
        for step in rank.steps:
            if step.number not in figures[rank.rank].complete_steps:
                continue
            for op in step.ops:
                if op.kind != "compute" or not op.launched:
                    continue
                every += op.dur_ns
                if not op.shapes:
                    continue
                counted += op.dur_ns
                if len(op.shapes) == 2:
                    (m, k), (_, n) = op.shapes
                    flops += 2 * m * k * n
                else:
                    b, s, h, d = op.shapes[0]
                    if len(op.shapes) == 3:
                        flops += 2 * b * h * s * s * 2 * d // 2
                    else:
                        flops += 2 * b * h * s * s * 5 * d
        out[rank.rank] = (flops, counted, every)
    return out


def test_generated_run_with_shapes(tmp_path: Path) -> None:
    spec = with_shapes(fsdp_run(world_size=2, steps=3, seed=5))
    write_run(spec, tmp_path)
    result = CliRunner().invoke(app, ["analyze", str(tmp_path), "--format", "json"])
    assert result.exit_code == EXIT_OK, result.stderr
    doc = json.loads(result.stdout)
    want = expected_observed(spec)
    for rank in doc["ranks"]:
        got = rank["observed"]
        flops, counted, every = want[rank["rank"]]
        assert (got["flops"], got["kernel_ns"], got["compute_kernel_ns"]) == (
            flops,
            counted,
            every,
        )
        assert got["attention_causal_unknown_flops"] > 0  # the backward's flag is missing
        assert got["tflops_while_running"] == pytest.approx(flops / counted / 1e3)
    observed = doc["throughput"]["observed"]
    total = sum(f for f, _, _ in want.values())
    assert observed["flops_per_step"] == pytest.approx(total / 3)
    assert observed["tflops_while_running"] == pytest.approx(
        total / sum(c for _, c, _ in want.values()) / 1e3
    )
