"""``tracecomm.toml`` (or a ``[tool.tracecomm]`` table of ``pyproject.toml``) in the run folder,
read in one place: the ``[model]`` / ``[device]`` inputs of MFU, the ``[rules]`` that classify
kernels, and the ``[check]`` budgets of the CI gate. Flags always win over the file.

A settings file comes with the traces and is as untrusted as they are: every key is checked
here, where the message can name the file and the key.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from tracecomm.check.budgets import DEFAULT_BUDGETS, BudgetError
from tracecomm.check.budgets import apply as apply_budgets
from tracecomm.errors import UsageError
from tracecomm.frameworks import PRIORITY, framework_key
from tracecomm.mfu.inputs import FIELDS_BY_KEY, SETTINGS_KEYS, InputError, ModelInputs, model_inputs

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

SETTINGS_FILE = "tracecomm.toml"


@dataclass(frozen=True)
class Settings:
    """What the run folder's settings file says (empty tables without one)."""

    path: Path | None = None
    model: ModelInputs = field(default_factory=ModelInputs)
    comm_rules: tuple[str, ...] = ()
    compute_rules: tuple[str, ...] = ()
    check: dict[str, Any] = field(default_factory=dict)
    run: RunTable = field(default_factory=lambda: RunTable())


@dataclass(frozen=True)
class RunTable:
    """The [run] table: what the training script said of its run (``tracecomm.profile``
    writes it). ``framework`` stands in when the traces name none (metrics.md §14a)."""

    framework: str | None = None  # its key (frameworks.PRIORITY)
    world_size: int | None = None
    steps: tuple[int, int] | None = None  # the steps recorded, first and last
    layout: dict[str, int] = field(default_factory=dict)  # {"dp": 8, "tp": 2}


def settings_path(runs: Sequence[str]) -> Path | None:
    """tracecomm.toml, else a pyproject.toml with a [tool.tracecomm] table, in the first run
    folder (a file's own folder) that has one."""
    folders = [p if p.is_dir() else p.parent for p in map(Path, runs) if p.exists()]
    for folder in folders:
        if (folder / SETTINGS_FILE).is_file():
            return folder / SETTINGS_FILE
        if (folder / "pyproject.toml").is_file() and "tracecomm" in _tool(
            folder / "pyproject.toml"
        ):
            return folder / "pyproject.toml"
    return None


def read_settings(runs: Sequence[str]) -> Settings:
    """The run's settings. Raises ``UsageError`` naming the file and the key at fault."""
    path = settings_path(runs)
    if path is None:
        return Settings()
    doc = _toml(path)
    table = doc.get("tool", {}).get("tracecomm", {}) if path.name == "pyproject.toml" else doc
    if not isinstance(table, dict):
        raise UsageError(f"{path}: [tool.tracecomm] must be a table")
    unknown = sorted(set(table) - {"model", "device", "rules", "check", "run"})
    if unknown:
        raise UsageError(
            f"{path}: unknown table or key {unknown[0]!r} (known: [model], [device], [rules], "
            "[check], [run])"
        )
    comm, compute = _rules(table, path)
    check = table.get("check", {})
    if not isinstance(check, dict):
        raise UsageError(f"{path}: [check] must be a table")
    try:  # every command checks the gate's budgets: a bad one is found before a CI run needs it
        apply_budgets(check, DEFAULT_BUDGETS)
    except BudgetError as exc:
        raise UsageError(f"{path}: [check] {exc}") from None
    return Settings(path, _model(table, path), comm, compute, dict(check), _run(table, path))


_NAME_LIMIT = 100


def _run(table: dict[str, Any], path: Path) -> RunTable:
    run = table.get("run", {})
    if not isinstance(run, dict):
        raise UsageError(f"{path}: [run] must be a table")
    unknown = sorted(set(run) - {"framework", "world_size", "steps", "layout"})
    if unknown:
        raise UsageError(
            f"{path}: [run] unknown key {unknown[0]!r} (framework, world_size, steps, layout)"
        )
    framework = run.get("framework")
    if framework is not None:
        key = framework_key(framework) if isinstance(framework, str) else None
        if key is None:
            raise UsageError(
                f"{path}: [run] framework {str(framework)[:_NAME_LIMIT]!r}: one of "
                f"{', '.join(PRIORITY)}"
            )
        framework = key
    world = run.get("world_size")
    if world is not None and not _positive(world):
        raise UsageError(f"{path}: [run] world_size {world!r}: expected a positive whole number")
    steps = run.get("steps")
    if steps is not None and not (
        isinstance(steps, list)
        and len(steps) == 2
        and all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in steps)
        and steps[0] <= steps[1]
    ):
        raise UsageError(f"{path}: [run] steps {steps!r}: expected [first, last] step numbers")
    layout = run.get("layout", {})
    if not isinstance(layout, dict) or not all(
        0 < len(k) <= _NAME_LIMIT and _positive(v) for k, v in layout.items()
    ):
        raise UsageError(f"{path}: [run.layout] maps parallel dimensions to sizes: dp = 8")
    return RunTable(framework, world, (steps[0], steps[1]) if steps else None, dict(layout))


def _positive(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _rules(table: dict[str, Any], path: Path) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(comm rules ``REGEX[=TYPE]``, compute patterns) from the [rules] table."""
    rules = table.get("rules", {})
    if not isinstance(rules, dict):
        raise UsageError(f"{path}: [rules] must be a table: comm = [...], compute = [...]")
    unknown = sorted(set(rules) - {"comm", "compute"})
    if unknown:
        raise UsageError(f"{path}: [rules] unknown key {unknown[0]!r} (comm, compute)")
    out = []
    for key in ("comm", "compute"):
        value = rules.get(key, [])
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise UsageError(f"{path}: [rules] {key} must be a list of regex strings")
        out.append(tuple(value))
    return out[0], out[1]


def _model(table: dict[str, Any], path: Path) -> ModelInputs:
    """The [model] and [device] tables, every value checked; paths in them are relative to the
    file."""
    model, device = table.get("model", {}), table.get("device", {})
    if not isinstance(model, dict) or not isinstance(device, dict):
        raise UsageError(f"{path}: [model] and [device] must be tables")
    known = {f.name for f in fields(ModelInputs)}
    values: dict[str, Any] = {}
    keys: dict[str, str] = {}
    for table_name, entries in (("model", model), ("device", device)):
        for key, value in entries.items():
            name = key.replace("-", "_")
            name = FIELDS_BY_KEY.get(name, name)
            if name not in known:
                raise UsageError(f"{path}: [{table_name}] unknown key {key!r}")
            values[name], keys[name] = value, f"[{table_name}] {key}"
    try:
        inputs = model_inputs(values, lambda name: f"{path}: {keys[name]}")
    except InputError as exc:
        raise UsageError(str(exc)) from None
    if inputs.model_config is not None:
        inputs = replace(inputs, model_config=path.parent / inputs.model_config)
    return inputs


def key_name(path: Path, field: str) -> str:
    """``tracecomm.toml [model] flops_per_step``: where the ``ModelInputs`` field ``field``
    stands in the settings file ``path``. The file's name, not its path: summaries carry a copy
    of it, with the same figures."""
    table, key = SETTINGS_KEYS[field]
    where = f"[tool.tracecomm.{table}]" if path.name == "pyproject.toml" else f"[{table}]"
    return f"{path.name} {where} {key}"


def _toml(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise UsageError(f"{path}: {exc}") from exc


def _tool(path: Path) -> dict[str, Any]:
    try:
        tool = _toml(path).get("tool", {})
    except UsageError:
        return {}
    return tool if isinstance(tool, dict) else {}
