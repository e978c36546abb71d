"""What the user says about the model: FLOPs per step from flags, a config file or the run's
settings (read by ``run.settings``)."""

from __future__ import annotations

import decimal
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, NamedTuple

from tracecomm.doc import Doc
from tracecomm.mfu.choices import ATTENTIONS, DTYPES, FORMULAS, Attention, Formula
from tracecomm.mfu.flops import flops_per_token, hfu_flops_per_token
from tracecomm.mfu.model import ConfigError, load_config


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


class SettingsKey(NamedTuple):
    """Where a ``ModelInputs`` field stands in a settings file (``run.settings``)."""

    table: str  # "model" or "device": tracecomm.toml's [model], pyproject's [tool.tracecomm.model]
    key: str


# Each ModelInputs field's table and key in a settings file, declared here only (two keys are
# not their field's name); its flag is the field's name (``flag``). ``record.files`` writes by
# it, ``run.settings`` reads by it, ``run.session`` names the key that gave the FLOPs.
SETTINGS_KEYS: dict[str, SettingsKey] = {
    "model_flops_per_step": SettingsKey("model", "flops_per_step"),
    "flops_per_token": SettingsKey("model", "flops_per_token"),
    "tokens_per_step": SettingsKey("model", "tokens_per_step"),
    "model_config": SettingsKey("model", "config"),
    "seq_len": SettingsKey("model", "seq_len"),
    "global_batch": SettingsKey("model", "global_batch"),
    "flops_formula": SettingsKey("model", "flops_formula"),
    "attention": SettingsKey("model", "attention"),
    "dtype": SettingsKey("model", "dtype"),
    "peak_tflops": SettingsKey("device", "peak_tflops"),
}
# a settings file's key to its field (a field's own name is read as well)
FIELDS_BY_KEY: dict[str, str] = {key: name for name, (_, key) in SETTINGS_KEYS.items()}


def flag(name: str) -> str:
    """``--model-flops-per-step``: analyze's flag for the ``ModelInputs`` field ``name``."""
    return "--" + name.replace("_", "-")


# The most a single device can be said to do: above it a --peak-tflops is a typo, not a GPU.
MAX_PEAK_TFLOPS = 1e6
_INTEGERS = ("tokens_per_step", "seq_len", "global_batch")
_CHOICES: dict[str, tuple[str, ...]] = {
    "flops_formula": FORMULAS,
    "attention": ATTENTIONS,
    "dtype": DTYPES,
}


def model_inputs(values: Mapping[str, Any], name: Callable[[str], str]) -> ModelInputs:
    """``ModelInputs`` from raw values (flags, or a settings file's keys), each checked for its
    type and range; ``name(key)`` says how to name a key in a message (``--seq-len``, or the
    file and the key). Raises ``InputError``."""
    known = {f.name for f in fields(ModelInputs)}
    out: dict[str, Any] = {}
    for key, value in values.items():
        if key not in known:
            raise InputError(f"{name(key)}: unknown key")
        if value is not None:
            out[key] = checked_input(key, value, name(key))
    return ModelInputs(**out)


def checked_input(key: str, value: Any, label: str) -> Any:
    """One input (a field of ``ModelInputs``), its value or its text, checked for its type and
    range, as the field holds it; ``label`` names it in the message. Raises ``InputError``."""
    if key in ("model_flops_per_step", "flops_per_token"):
        return flop_count(value, label)
    if key in _INTEGERS:
        number = _number(value, int)
        if number is None or number <= 0:
            raise InputError(f"{label} {value!r}: expected a positive whole number")
        return number
    if key in _CHOICES:
        if not isinstance(value, str) or value not in _CHOICES[key]:
            raise InputError(f"{label} {value!r}: one of {', '.join(_CHOICES[key])}")
        return value
    if key == "model_config":
        if not isinstance(value, str | Path) or not str(value):
            raise InputError(f"{label} {value!r}: expected a file path")
        return Path(value)
    if key == "peak_tflops":
        peak = _number(value, float)
        if peak is None:
            raise InputError(f"{label} {value!r}: expected a number of TFLOP/s")
        if not (math.isfinite(peak) and 0 < peak <= MAX_PEAK_TFLOPS):
            raise InputError(
                f"{label} {value!r}: a device peak is a positive TFLOP/s figure up to "
                f"{MAX_PEAK_TFLOPS:g}"
            )
        return float(peak)
    raise InputError(f"{label}: unknown key")  # pragma: no cover - every field is handled above


def _number(value: Any, kind: type[int] | type[float]) -> Any:
    """``value`` as a number of ``kind`` (``int``: whole), from its text too (``"4096"``); None
    when it is neither."""
    if isinstance(value, str):
        try:
            value = kind(value)
        except ValueError:
            return None
    if isinstance(value, bool) or not isinstance(value, int if kind is int else int | float):
        return None
    return value


def flop_count(value: Any, label: str) -> int:
    """A FLOP count as an integer: 3162058002530304, 3.162e15 or "3_162e12" (read as an exact
    decimal: 3.16e15 is a whole number)."""
    if isinstance(value, bool) or not isinstance(value, int | float | str | decimal.Decimal):
        raise InputError(f"{label} {value!r} is not a number")
    try:
        number = decimal.Decimal(str(value).replace("_", ""))
    except decimal.InvalidOperation:
        raise InputError(f"{label} {value!r} is not a number") from None
    if not number.is_finite() or number <= 0:
        raise InputError(f"{label} {value!r} must be a positive number")
    return int(number.to_integral_value(decimal.ROUND_HALF_UP))


class ModelFlops(Doc, frozen=True):
    """The model FLOPs of one training step, and how they were obtained."""

    per_step: int
    per_token: int | None
    tokens_per_step: int | None
    source: str  # e.g. "config.json, exact (causal attention halved), T=4096"
    hfu_per_step: int | None = None  # with full activation recompute (config only)


def check(inputs: ModelInputs) -> None:
    if inputs.flops_formula not in FORMULAS:
        raise InputError(f"--flops-formula {inputs.flops_formula!r}: one of {', '.join(FORMULAS)}")
    if inputs.attention not in ATTENTIONS:
        raise InputError(f"--attention {inputs.attention!r}: one of {', '.join(ATTENTIONS)}")
    if inputs.dtype not in DTYPES:
        raise InputError(f"--dtype {inputs.dtype!r}: one of {', '.join(DTYPES)}")
    for name in ("model_flops_per_step", "flops_per_token", "tokens_per_step", "seq_len"):
        value = getattr(inputs, name)
        if value is not None and (not isinstance(value, int) or value <= 0):
            raise InputError(f"{name.replace('_', '-')} must be a positive integer, got {value!r}")
    if inputs.peak_tflops is not None and not inputs.peak_tflops > 0:
        raise InputError(f"--peak-tflops must be positive, got {inputs.peak_tflops!r}")


def model_flops(
    inputs: ModelInputs, given_in: Callable[[str], str | None] = lambda name: None
) -> ModelFlops | None:
    """FLOPs per step from exactly one source; None when none is given. ``given_in(field)``
    names the settings file and key that gave a field's value, None where a flag (or the API's
    keyword) did: the FLOPs' source says where they were given."""
    check(inputs)
    ways = ("model_flops_per_step", "flops_per_token", "model_config")
    sources = [flag(name) for name in ways if getattr(inputs, name) is not None]
    if len(sources) > 1:
        raise InputError(f"give one source of model FLOPs, not {' and '.join(sources)}")
    if inputs.model_flops_per_step is not None:
        source = given_in("model_flops_per_step") or flag("model_flops_per_step")
        return ModelFlops(inputs.model_flops_per_step, None, inputs.tokens_per_step, source)
    if inputs.flops_per_token is not None:
        if inputs.tokens_per_step is None:
            raise InputError("--flops-per-token needs --tokens-per-step")
        return ModelFlops(
            inputs.flops_per_token * inputs.tokens_per_step,
            inputs.flops_per_token,
            inputs.tokens_per_step,
            given_in("flops_per_token") or "--flops-per-token × --tokens-per-step",
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
