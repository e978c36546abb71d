"""Every worked example of mfu.md §5, from config files written here (exact integers)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import LLAMA2_7B
from tracecomm.mfu.flops import flops_per_token, hfu_flops_per_token, layer_forward, params
from tracecomm.mfu.model import ConfigError, ModelShape, load_config

T = 4096

LLAMA2_70B = {
    **LLAMA2_7B,
    "hidden_size": 8192,
    "intermediate_size": 28672,
    "num_hidden_layers": 80,
    "num_attention_heads": 64,
    "num_key_value_heads": 8,
}
LLAMA3_8B = {
    **LLAMA2_7B,
    "intermediate_size": 14336,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
}
MIXTRAL_8X7B = {
    **LLAMA3_8B,
    "model_type": "mixtral",
    "vocab_size": 32000,
    "num_local_experts": 8,
    "num_experts_per_tok": 2,
}
DEEPSEEK_V3 = {
    "model_type": "deepseek_v3",
    "hidden_size": 7168,
    "intermediate_size": 18432,
    "moe_intermediate_size": 2048,
    "num_hidden_layers": 61,
    "num_attention_heads": 128,
    "num_key_value_heads": 128,
    "n_routed_experts": 256,
    "n_shared_experts": 1,
    "num_experts_per_tok": 8,
    "first_k_dense_replace": 3,
    "q_lora_rank": 1536,
    "kv_lora_rank": 512,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "vocab_size": 129280,
    "num_nextn_predict_layers": 1,
    "tie_word_embeddings": False,
}


def shape_of(config: dict[str, Any], tmp_path: Path) -> ModelShape:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return load_config(path)


# mfu.md §5.1: N total, N_mm, input embedding, norms
@pytest.mark.parametrize(
    ("config", "total", "matmul", "embedding", "norms"),
    [
        (LLAMA2_7B, 6_738_415_616, 6_607_077_376, 131_072_000, 266_240),
        (LLAMA2_70B, 68_976_648_192, 68_713_185_280, 262_144_000, 1_318_912),
        (LLAMA3_8B, 8_030_261_248, 7_504_658_432, 525_336_576, 266_240),
    ],
    ids=["llama2-7b", "llama2-70b", "llama3-8b"],
)
def test_parameter_counts(
    tmp_path: Path, config: dict[str, Any], total: int, matmul: int, embedding: int, norms: int
) -> None:
    p = params(shape_of(config, tmp_path))
    assert (p.total, p.matmul, p.input_embedding, p.norms) == (total, matmul, embedding, norms)


def test_mixtral_total_and_active(tmp_path: Path) -> None:
    p = params(shape_of(MIXTRAL_8X7B, tmp_path))
    assert (p.total, p.active) == (46_702_792_704, 12_879_925_248)


# mfu.md §5.2: forward FLOPs per token of one layer, full and causal-halved
@pytest.mark.parametrize(
    ("config", "full", "halved"),
    [
        (LLAMA2_7B, 471_859_200, 438_304_768),
        (LLAMA2_70B, 1_845_493_760, 1_778_384_896),
        (LLAMA3_8B, 503_316_480, 469_762_048),
    ],
)
def test_layer_forward(tmp_path: Path, config: dict[str, Any], full: int, halved: int) -> None:
    shape = shape_of(config, tmp_path)
    assert layer_forward(shape, 0, T, "full") == full
    assert layer_forward(shape, 0, T, "halved") == halved


# mfu.md §5.3: training FLOPs per token, every convention
TABLE = {
    "6n": (40_430_493_696, 413_859_889_152, 48_181_567_488, 77_279_551_488),
    "6n-hf": (39_644_061_696, 412_287_025_152, 45_029_548_032, 76_493_119_488),
    "palm": (46_872_944_640, 446_072_143_872, 54_624_018_432, 83_722_002_432),
    "torchtitan": (46_086_512_640, 444_499_279_872, 51_471_998_976, 82_935_570_432),
    "exact-full": (46_084_915_200, 444_491_366_400, 51_470_401_536, 82_933_972_992),
    "exact": (42_863_689_728, 428_385_239_040, 48_249_176_064, 79_712_747_520),
    "megatron": (45_883_588_608, 420_332_175_360, 48_249_176_064, None),
}
MODELS = (LLAMA2_7B, LLAMA2_70B, LLAMA3_8B, MIXTRAL_8X7B)


@pytest.mark.parametrize("convention", sorted(TABLE))
def test_training_flops_per_token(tmp_path: Path, convention: str) -> None:
    for config, want in zip(MODELS, TABLE[convention], strict=True):
        if want is None:
            continue
        shape = shape_of(config, tmp_path)
        if convention == "exact-full":
            got = flops_per_token(shape, T, "exact", attention="full")
        else:
            got = flops_per_token(shape, T, convention)  # type: ignore[arg-type]
        assert got == want, (convention, config["model_type"], config["hidden_size"])


def test_hfu_with_full_recompute(tmp_path: Path) -> None:
    want = (56_889_442_304, 570_656_030_720, 63_281_561_600, 106_021_519_360)
    got = tuple(hfu_flops_per_token(shape_of(c, tmp_path), T) for c in MODELS)
    assert got == want


def test_deepseek_v3(tmp_path: Path) -> None:
    """mfu.md §5.5: MLA, 3 dense + 58 MoE layers, one shared expert, top-8 of 256."""
    shape = shape_of(DEEPSEEK_V3, tmp_path)
    p = params(shape)
    assert p.total - p.norms == 671_025_397_760
    assert p.active - p.norms == 37_551_276_032
    assert p.matmul == 36_624_596_992  # N_a: active, no input embedding
    assert flops_per_token(shape, T) == 250_449_887_232
    assert flops_per_token(shape, T, attention="full") == 281_152_192_512
    # the 6·N row (both embeddings, norms left out) to 4 significant figures
    assert flops_per_token(shape, T, "6n") == pytest.approx(225_307_656_192, rel=5e-4)


def test_mfu_worked_example(tmp_path: Path) -> None:
    """mfu.md §5.4: Llama-3-8B, 8 × H100 SXM (989.4 bf16), 65,536 tokens in 1.000 s."""
    shape = shape_of(LLAMA3_8B, tmp_path)
    peak = 8 * 989.4e12
    want = {"exact": 39.95, "6n": 39.89, "torchtitan": 42.62, "palm": 45.23}
    for formula, pct in want.items():
        step_flops = flops_per_token(shape, T, formula) * 65_536  # type: ignore[arg-type]
        assert round(100 * step_flops / (1.0 * peak), 2) == pct
    full = flops_per_token(shape, T, "exact", attention="full") * 65_536
    assert full == 3_373_164_235_063_296
    assert round(100 * full / peak, 2) == 42.62


def test_sliding_window_layers_see_w_keys(tmp_path: Path) -> None:
    windowed = {**LLAMA2_7B, "model_type": "mistral", "sliding_window": 1024}
    shape = shape_of(windowed, tmp_path)
    plain = shape_of(LLAMA2_7B, tmp_path)
    # causal-halved T/2 = 2048 keys per query without the window, 1024 with it
    core = 4 * 32 * 128  # FLOPs per key per token per layer
    assert layer_forward(plain, 0, T) - layer_forward(shape, 0, T, window=1024) == core * 1024


def test_unusable_configs_name_the_problem(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="num_hidden_layers"):
        shape_of({"model_type": "llama", "hidden_size": 8}, tmp_path)
    with pytest.raises(ConfigError, match="unknown MLP kind"):
        shape_of({**LLAMA2_7B, "model_type": "mystery"}, tmp_path)
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "bad.json")
