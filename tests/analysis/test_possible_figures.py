"""Property: over generated jobs of every shape (pure data parallel, DP x TP, DP x PP with
and without the Megatron features, a straggler or an overloaded stage or neither, skewed host
clocks), no output of ``analyze`` holds a negative time or a share outside 0–100 %."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from tests.analysis.possible import impossible
from tests.conftest import analyze_json
from tracecomm.synth import RunSpec, dp_pp_run, dp_tp_run, fsdp_run, write_run


def job(seed: int) -> tuple[RunSpec, tuple[str, ...]]:
    """A small random job (and CLI options) drawn from ``seed``."""
    rng = random.Random(seed)
    slowdown = rng.choice([0.0, 0.05, 0.3, 1.0, 2.5])
    kind = rng.choice(["fsdp", "dptp", "pp", "megatron"])
    extra = rng.choice([(), ("--no-clock-align",), ("--detail", "instances")])
    if kind == "fsdp":
        world = rng.choice([4, 8, 16])
        slow = rng.randrange(world)
        return fsdp_run(
            world, steps=3, layers=2, seed=seed, slow_rank=slow, slowdown=slowdown
        ), extra
    if kind == "dptp":
        spec = dp_tp_run(
            dp=rng.choice([2, 4]), tp=2, steps=3, layers=2, seed=seed, slowdown=slowdown
        )
        return spec, extra
    dp, pp = rng.choice([1, 2]), rng.choice([2, 3, 4])
    layers = [2] * pp
    if rng.random() < 0.5:
        layers[rng.randrange(pp)] = 3
    megatron: dict[str, Any] = (
        dict(p2p_groups="pair", embedding_allreduce=True, recv_waits_outside=True)
        | dict(peer_ranks=rng.random() < 0.5, tp=rng.choice([1, 2]))
        if kind == "megatron"
        else {}
    )
    world = dp * pp * megatron.get("tp", 1)
    spec = dp_pp_run(
        dp,
        pp,
        microbatches=rng.choice([2, 4]),
        steps=3,
        layers_per_stage=layers,
        seed=seed,
        slow_rank=rng.randrange(world) if slowdown else None,
        slowdown=slowdown,
        **megatron,
    )
    return spec, extra


@pytest.mark.parametrize("seed", range(12))
def test_no_impossible_figure_in_any_generated_job(tmp_path: Path, seed: int) -> None:
    spec, extra = job(seed)
    write_run(spec, tmp_path)
    doc = analyze_json(tmp_path, *extra)
    assert list(impossible(doc)) == []
    st = doc["stragglers"]
    if st is not None and st["replay"] is not None:
        assert st["replay"]["reproduces"] or st["flag_basis"] == "root delay"
        for c in st["candidates"]:
            assert 0 <= c["step_if_fixed_ns"] <= st["median_step_ns"]
