"""What a recording writes, and where: the trace of each rank, the run's settings
(``tracecomm.toml``, as ``run.settings`` reads it) and the environment that puts the NCCL logs
and Flight Recorder dumps beside them. Pure but for the writes; no torch."""

from __future__ import annotations

import datetime as dt
import json
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tracecomm.mfu.inputs import SETTINGS_KEYS, ModelInputs
from tracecomm.run.settings import SETTINGS_FILE

TRACE_SUFFIX = ".pt.trace.json.gz"
# a leading dot: discovery skips the file while it is being written (ingest.discover)
_PARTIAL_PREFIX = "."
# the ModelInputs fields a recording knows (``tracecomm.profile``'s keywords), in the order the
# settings file has them
RECORDED = ("model_flops_per_step", "flops_per_token", "tokens_per_step", "dtype", "peak_tflops")
# TOML integers are 64-bit: a larger FLOP count is written as a string (mfu.inputs reads both)
TOML_INT_MAX = 2**63 - 1


def trace_name(rank: int) -> str:
    """``rank3.pt.trace.json.gz``: the global rank in the name (``ingest.discover`` reads it
    when a trace has no distributedInfo), so that ranks never write one file."""
    return f"rank{rank}{TRACE_SUFFIX}"


def partial_path(final: Path) -> Path:
    """Where a file is written before it is renamed into place: unique per host and process,
    so two writers on a shared file system never write one file, and an analysis that starts
    meanwhile never reads half a trace."""
    host = socket.gethostname().replace("/", "_")
    return final.with_name(f"{_PARTIAL_PREFIX}{host}.{os.getpid()}.{final.name}")


def write_atomically(path: Path, text: str) -> None:
    partial = partial_path(path)
    try:
        partial.write_text(text, encoding="utf-8")
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)


@dataclass(frozen=True)
class RunFacts:
    """What the training script says about its run, written into ``tracecomm.toml``."""

    model: ModelInputs = field(default_factory=ModelInputs)  # the [model] / [device] keys
    framework: str | None = None
    world_size: int = 1
    layout: Mapping[str, int] = field(default_factory=dict)  # {"dp": 8, "tp": 2, ...}
    steps: tuple[int, int] | None = None  # the recorded window, first and last


def settings_text(facts: RunFacts, written: dt.datetime | None = None) -> str:
    """``tracecomm.toml``: the [model] and [device] tables MFU reads, and the [run] table."""
    written = written or dt.datetime.now(dt.timezone.utc)
    lines = [
        f"# written by tracecomm.profile at {written.isoformat(timespec='seconds')}: what the",
        "# training script said about its run; `tracecomm analyze` reads it (flags win)",
    ]
    given, default = facts.model, ModelInputs()
    tables: dict[str, dict[str, object]] = {"model": {}, "device": {}}
    for name in RECORDED:
        value = getattr(given, name)
        if value != getattr(default, name):  # a value at analyze's default is left out
            table, key = SETTINGS_KEYS[name]
            tables[table][key] = value
    for table, values in tables.items():
        lines += _table(table, values)
    steps = list(facts.steps) if facts.steps else None
    run = {"framework": facts.framework, "world_size": facts.world_size, "steps": steps}
    lines += _table("run", run)
    lines += _table("run.layout", dict(facts.layout))
    return "\n".join(lines) + "\n"


def _table(name: str, values: Mapping[str, object]) -> list[str]:
    present = {k: v for k, v in values.items() if v is not None}
    if not present:
        return []
    return ["", f"[{name}]", *(f"{key} = {_toml_value(v)}" for key, v in present.items())]


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value) if abs(value) <= TOML_INT_MAX else _toml_string(str(value))
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return _toml_string(str(value))


def _toml_string(text: str) -> str:
    # JSON's escapes are TOML's (\" \\ \n \uXXXX); DEL is the one control JSON leaves raw
    return json.dumps(text, ensure_ascii=False).replace("\x7f", "\\u007f")


def write_settings(folder: Path, facts: RunFacts) -> Path:
    path = folder / SETTINGS_FILE
    write_atomically(path, settings_text(facts))
    return path


# NCCL reads these when a communicator is created, PyTorch's Flight Recorder when the process
# group is: the helper can set them only before ``init_process_group``.
NCCL_SUBSYSTEMS = "INIT,ENV,GRAPH"  # versions, settings, rings and trees; COLL is per call


def recording_environment(folder: Path | str) -> dict[str, str]:
    """The environment that writes NCCL's log (one file per process: ``%h`` host, ``%p`` pid)
    and the Flight Recorder's dumps (``nccl_trace_rank_<N>``, on a timeout) into ``folder``,
    where ``tracecomm analyze folder`` finds them (docs: nccl-logs.md). Both the current
    (``TORCH_FR_*``) and the older (``TORCH_NCCL_*``) PyTorch names are given."""
    folder = Path(folder).absolute()
    dump = str(folder / "nccl_trace_rank_")
    return {
        "NCCL_DEBUG": "INFO",
        "NCCL_DEBUG_SUBSYS": NCCL_SUBSYSTEMS,
        "NCCL_DEBUG_FILE": str(folder / "nccl.%h.%p.log"),
        "TORCH_FR_BUFFER_SIZE": "2000",
        "TORCH_NCCL_TRACE_BUFFER_SIZE": "2000",
        "TORCH_FR_DUMP_TEMP_FILE": dump,
        "TORCH_NCCL_DEBUG_INFO_TEMP_FILE": dump,
        "TORCH_NCCL_DUMP_ON_TIMEOUT": "1",
    }


def apply_environment(
    wanted: Mapping[str, str], environ: os._Environ[str] | dict[str, str], too_late: bool
) -> tuple[list[str], list[str]]:
    """Set what the process has not set itself. Returns (the names set, the names that take
    effect only before the process group exists: all of them when it does already)."""
    missing = [k for k in wanted if k not in environ]
    if too_late:
        return [], missing
    for key in missing:
        environ[key] = wanted[key]
    return missing, []
