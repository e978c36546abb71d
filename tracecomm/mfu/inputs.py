"""What the user says about the model: FLOPs per step from flags, a config file or the run's
settings (read by ``run.settings``)."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from pathlib import Path

from tracecomm.mfu.flops import FORMULAS, Attention, Formula, flops_per_token, hfu_flops_per_token
from tracecomm.mfu.model import ConfigError, load_config
from tracecomm.mfu.peaks import DTYPES


class InputError(ValueError):
    """Model inputs that contradict each other or cannot be read (a usage error)."""


@dataclass(frozen=True)
class ModelInputs:
    """Flags of ``analyze`` (or keys of tracecomm.toml's [model] / [device] tables)."""

    model_flops_per_step: int | None = None
    flops_per_token: int | None = None
    tokens_per_step: int | None = None
    model_config: Path | None = None
    seq_len: int | None = None
    global_batch: int | None = None
    flops_formula: str = "exact"
    attention: str = "halved"
    dtype: str = "bf16"
    peak_tflops: float | None = None

    def over(self, base: ModelInputs) -> ModelInputs:
        """These inputs, with every value left at its default taken from ``base``."""
        default = ModelInputs()
        return replace(
            base,
            **{
                f.name: getattr(self, f.name)
                for f in fields(self)
                if getattr(self, f.name) != getattr(default, f.name)
            },
        )


@dataclass(frozen=True)
class ModelFlops:
    """The model FLOPs of one training step, and how they were obtained."""

    per_step: int
    per_token: int | None
    tokens_per_step: int | None
    source: str  # e.g. "config.json, exact (causal attention halved), T=4096"
    hfu_per_step: int | None = None  # with full activation recompute (config only)


def check(inputs: ModelInputs) -> None:
    if inputs.flops_formula not in FORMULAS:
        raise InputError(f"--flops-formula {inputs.flops_formula!r}: one of {', '.join(FORMULAS)}")
    if inputs.attention not in ("halved", "full"):
        raise InputError(f"--attention {inputs.attention!r}: 'halved' or 'full'")
    if inputs.dtype not in DTYPES:
        raise InputError(f"--dtype {inputs.dtype!r}: one of {', '.join(DTYPES)}")
    for name in ("model_flops_per_step", "flops_per_token", "tokens_per_step", "seq_len"):
        value = getattr(inputs, name)
        if value is not None and (not isinstance(value, int) or value <= 0):
            raise InputError(f"{name.replace('_', '-')} must be a positive integer, got {value!r}")
    if inputs.peak_tflops is not None and not inputs.peak_tflops > 0:
        raise InputError(f"--peak-tflops must be positive, got {inputs.peak_tflops!r}")


def model_flops(inputs: ModelInputs) -> ModelFlops | None:
    """FLOPs per step from exactly one source; None when none is given."""
    check(inputs)
    sources = [
        name
        for name, given in (
            ("--model-flops-per-step", inputs.model_flops_per_step is not None),
            ("--flops-per-token", inputs.flops_per_token is not None),
            ("--model-config", inputs.model_config is not None),
        )
        if given
    ]
    if len(sources) > 1:
        raise InputError(f"give one source of model FLOPs, not {' and '.join(sources)}")
    if inputs.model_flops_per_step is not None:
        return ModelFlops(
            inputs.model_flops_per_step, None, inputs.tokens_per_step, "--model-flops-per-step"
        )
    if inputs.flops_per_token is not None:
        if inputs.tokens_per_step is None:
            raise InputError("--flops-per-token needs --tokens-per-step")
        return ModelFlops(
            inputs.flops_per_token * inputs.tokens_per_step,
            inputs.flops_per_token,
            inputs.tokens_per_step,
            "--flops-per-token × --tokens-per-step",
        )
    if inputs.model_config is not None:
        return _from_config(inputs)
    return None


def _from_config(inputs: ModelInputs) -> ModelFlops:
    assert inputs.model_config is not None
    if inputs.seq_len is None or inputs.global_batch is None:
        raise InputError("--model-config needs --seq-len and --global-batch")
    if not isinstance(inputs.global_batch, int) or inputs.global_batch <= 0:
        raise InputError(f"global-batch must be a positive integer, got {inputs.global_batch!r}")
    try:
        shape = load_config(inputs.model_config)
    except ConfigError as exc:
        raise InputError(str(exc)) from exc
    formula: Formula = inputs.flops_formula  # type: ignore[assignment]
    attention: Attention = inputs.attention  # type: ignore[assignment]
    per_token = flops_per_token(shape, inputs.seq_len, formula, attention)
    tokens = inputs.global_batch * inputs.seq_len
    convention = (
        f"exact, causal attention {'halved' if attention == 'halved' else 'as a full square'}"
        if formula == "exact"
        else formula
    )
    return ModelFlops(
        per_token * tokens,
        per_token,
        tokens,
        f"{inputs.model_config.name} ({shape.model_type or 'model'}), {convention}, "
        f"T={inputs.seq_len}",
        hfu_flops_per_token(shape, inputs.seq_len, attention) * tokens,
    )
