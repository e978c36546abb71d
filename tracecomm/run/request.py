"""One request object for every way in: the CLI builds it from its options, ``tracecomm.analyze``
from keywords of the same names (``steps="3:7"``, ``comm_pattern=[...]``,
``model_flops_per_step=3.16e15``, …). Every value is checked here, once, and a bad one is a
``UsageError`` that names the option.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypedDict

from tracecomm.analysis.options import AnalysisOptions
from tracecomm.colltypes import GLOO_OPS
from tracecomm.engine.options import BreakdownOptions
from tracecomm.errors import UsageError
from tracecomm.ingest.options import ReadOptions
from tracecomm.mfu.inputs import InputError, ModelInputs, flag
from tracecomm.mfu.inputs import model_inputs as checked_model_inputs
from tracecomm.mfu.opflops import SHAPED_OPS
from tracecomm.run.executors import ExecutorSpec, parse_executor

DETAILS = ("instances", "timeline")
KEPT_SHAPES = SHAPED_OPS | GLOO_OPS
COMPAT = ("hta", "hta-0.6", "hta-0.5")  # compat.hta.MODES
RANK_FROM = ("pid", "process_name")

_STEPS = re.compile(r"^\s*(-?\d+)?\s*(:)?\s*(-?\d+)?\s*$")
_STEPS_DASHED = re.compile(r"^\s*(\d+)\s*[-\u2013]\s*(\d+)\s*$")  # 5-7 or 5–7


class AnalyzeOptions(TypedDict, total=False):
    """``tracecomm analyze``'s options as the Python API takes them: each name is the flag's
    (``--model-flops-per-step`` is ``model_flops_per_step``), each value what the flag takes
    (its text) or its Python form. The one list of option names: ``OPTIONS`` is its keys, and a
    test holds the CLI's analyze flags to it."""

    steps: str | int | tuple[int | None, int | None]  # "3:7", "3:", ":7", 5, (3, 7)
    all_steps: bool
    step_range: str
    comm_pattern: str | Sequence[str]
    compute_pattern: str | Sequence[str]
    rank_from: str  # "pid" or "process_name"
    jobs: int | str
    executor: str  # "local", "dask", "dask://host:port"
    cache: str | Path
    no_clock_align: bool
    nccl_log: str | Path | Sequence[str | Path]
    link_gbps: float | str
    timeline_ranks: str | Sequence[int]
    pp_stages: int | str
    microbatches: int | str
    project: bool
    to: str | Sequence[int]
    weak: bool
    detail: str | Sequence[str]  # "instances", "timeline"
    compat: str  # "hta", "hta-0.6", "hta-0.5"
    max_inflate_ratio: float | str
    max_trace_size: str | int
    max_event_size: str | int
    export_ranks: str | Sequence[int]
    export_steps: str
    model_flops_per_step: float | str
    flops_per_token: float | str
    tokens_per_step: int | str
    model_config: str | Path
    seq_len: int | str
    global_batch: int | str
    flops_formula: str
    attention: str
    dtype: str
    peak_tflops: float | str


OPTIONS: tuple[str, ...] = tuple(AnalyzeOptions.__annotations__)
_MODEL_KEYS = OPTIONS[OPTIONS.index("model_flops_per_step") :]
_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([KMGT]?i?B?)?\s*$", re.IGNORECASE)
_SIZE_UNITS = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}


@dataclass(frozen=True)
class Request:
    """What one analysis of one run is asked to do, each layer's part apart."""

    inputs: tuple[str, ...]
    breakdown: BreakdownOptions = field(default_factory=BreakdownOptions)
    # the readers keep the recorded shapes of the ops the FLOP counter knows (observed TFLOP/s)
    # and of gloo's collectives (their message sizes)
    read: ReadOptions = field(default_factory=lambda: ReadOptions(shaped_ops=KEPT_SHAPES))
    model: ModelInputs = field(default_factory=ModelInputs)
    analysis: AnalysisOptions = field(default_factory=AnalysisOptions)
    jobs: int | None = None  # parse processes; None: one per core when the input pays for it
    executor: ExecutorSpec = field(default_factory=ExecutorSpec)
    cache: Path | None = None  # --cache DIR: parsed columns and results for repeat runs
    rank_from: str | None = None  # merged multi-rank traces: each process's rank by pid / name
    nccl_logs: tuple[Path, ...] = ()  # --nccl-log: logs outside the run folder


def request_of(inputs: str | Path | Sequence[str | Path], **options: Any) -> Request:
    """The request for ``inputs`` (run folders, trace files, URLs) with the CLI's options as
    keywords. Raises ``UsageError`` for an unknown option or a bad value."""
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise UsageError(f"unknown option {unknown[0]!r} (one of: {', '.join(OPTIONS)})")
    o = {name: options.get(name) for name in OPTIONS}
    paths = (inputs,) if isinstance(inputs, str | Path) else tuple(inputs)
    if not paths:
        raise UsageError("no run folder or trace file given")
    first, last = parse_steps(_text(o["steps"], "--steps"))
    comm = _strings(o["comm_pattern"], "--comm-pattern")
    compute = _strings(o["compute_pattern"], "--compute-pattern")
    _check_rules(comm, "--comm-pattern")
    _check_rules(compute, "--compute-pattern")
    step_range = _text(o["step_range"], "--step-range")
    _check_rules((step_range,) if step_range else (), "--step-range")
    detail = _choices(o["detail"], DETAILS, "--detail")
    return Request(
        inputs=tuple(str(p) for p in paths),
        breakdown=BreakdownOptions(first, last, bool(o["all_steps"]), comm, compute),
        read=replace(read_options(o), step_range=step_range),
        model=model_inputs(o),
        analysis=AnalysisOptions(
            align_clocks=not o["no_clock_align"],
            detail_instances="instances" in detail,
            link_gbps=_positive(o["link_gbps"], "--link-gbps", float),
            compat=_choice(o["compat"], COMPAT, "--compat"),
            timeline="timeline" in detail,
            timeline_ranks=rank_list(o["timeline_ranks"], "--timeline-ranks"),
            project_to=_projection(o["project"], o["to"]),
            weak=bool(o["weak"]),
            pp_stages=_positive(o["pp_stages"], "--pp-stages", int),
            microbatches=_positive(o["microbatches"], "--microbatches", int),
            export=o["export_ranks"] is not None or o["export_steps"] is not None,
            export_ranks=rank_list(o["export_ranks"], "--export-ranks"),
            export_steps=_export_steps(o["export_steps"]),
        ),
        jobs=_positive(o["jobs"], "--jobs", int),
        executor=parse_executor(_text(o["executor"], "--executor")),
        cache=cache_folder(o["cache"]),
        rank_from=_choice(o["rank_from"], RANK_FROM, "--rank-from"),
        nccl_logs=tuple(Path(p) for p in _strings(o["nccl_log"], "--nccl-log")),
    )


def read_options(options: Mapping[str, Any]) -> ReadOptions:
    """What the readers keep (the FLOP counter's ops' shapes) and their bounds."""
    base = ReadOptions(shaped_ops=KEPT_SHAPES)
    ratio = _positive(options.get("max_inflate_ratio"), "--max-inflate-ratio", float)
    trace = size_in_bytes(options.get("max_trace_size"), "--max-trace-size")
    event = size_in_bytes(options.get("max_event_size"), "--max-event-size")
    return ReadOptions(
        shaped_ops=base.shaped_ops,
        max_inflate_ratio=ratio or base.max_inflate_ratio,
        max_trace_bytes=trace or base.max_trace_bytes,
        max_event_bytes=event or base.max_event_bytes,
    )


def size_in_bytes(value: object, flag: str) -> int | None:
    """``64MiB``, ``2GB``, ``1.5G`` or a plain number of bytes (binary units with ``i``)."""
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    match = _SIZE.match(str(value)) if isinstance(value, str) else None
    if match is None:
        raise UsageError(f"{flag} {value!r}: expected a size such as 64MiB, 2GB or 1000000")
    number, unit = float(match.group(1)), (match.group(2) or "").lower()
    scale = _SIZE_UNITS[unit[:1]] if unit else 1
    if "i" in unit:
        scale = 1 << {"": 0, "k": 10, "m": 20, "g": 30, "t": 40}[unit[:1]]
    size = int(number * scale)
    if size <= 0:
        raise UsageError(f"{flag} {value!r}: must be positive")
    return size


def cache_folder(value: object) -> Path | None:
    """``--cache``: a folder that exists and is writable, or one that can be made where its
    nearest existing parent is."""
    if value is None:
        return None
    if not isinstance(value, str | Path) or not str(value):
        raise UsageError(f"--cache {value!r}: expected a folder")
    path = Path(value)
    if path.exists() and not path.is_dir():
        raise UsageError(f"--cache {path}: not a folder")
    try:  # the only true test of writable (root passes every access() check)
        path.mkdir(parents=True, exist_ok=True)
        os.rmdir(tempfile.mkdtemp(prefix=".probe-", dir=path))
    except OSError as exc:
        raise UsageError(f"--cache {path}: not writable ({exc.strerror or exc})") from None
    return path


def parse_steps(text: str | None) -> tuple[int | None, int | None]:
    """``3:7`` (inclusive; ``3-7`` too), ``3:``, ``:7`` or ``5`` to (first, last) step
    numbers."""
    if text is None:
        return None, None
    dashed = _STEPS_DASHED.match(text)
    # step numbers are never negative: "5-7" is a range, not 5 and -7
    match = _STEPS.match(f"{dashed.group(1)}:{dashed.group(2)}" if dashed else text)
    if not match or (match.group(1) is None and match.group(3) is None):
        raise UsageError(f"--steps {text!r}: expected A:B, A:, :B or A (ProfilerStep numbers)")
    first, colon, last = match.groups()
    lo = int(first) if first is not None else None
    hi = int(last) if last is not None else (None if colon else lo)
    if lo is not None and hi is not None and lo > hi:
        raise UsageError(f"--steps {text!r}: first step is after the last one")
    return lo, hi


def rank_list(value: str | Iterable[int] | None, flag: str) -> tuple[int, ...]:
    """``0,7,12`` (or a sequence of ints) to ranks."""
    if value is None or value == "":
        return ()
    if not isinstance(value, str):
        return tuple(_positive(v, flag, int, zero=True) or 0 for v in value)
    try:
        return tuple(int(part) for part in value.split(",") if part.strip())
    except ValueError:
        raise UsageError(f"{flag} {value!r}: expected numbers separated by commas") from None


def model_inputs(options: Mapping[str, Any]) -> ModelInputs:
    """The MFU inputs among the options, each checked (``mfu.inputs.model_inputs``)."""
    values = {k: options[k] for k in _MODEL_KEYS if options.get(k) is not None}
    try:
        return checked_model_inputs(values, flag)
    except InputError as exc:
        raise UsageError(str(exc)) from None


def _export_steps(value: object) -> tuple[int | None, int | None] | None:
    """``--export-steps``: None (the typical step), ``all`` (every analyzed step), or steps
    as ``--steps`` writes them."""
    if value is None:
        return None
    text = _text(value, "--export-steps")
    if text is not None and text.strip().lower() == "all":
        return (None, None)
    try:
        return parse_steps(text)
    except UsageError as exc:
        raise UsageError(str(exc).replace("--steps", "--export-steps", 1)) from None


def _projection(project: object, to: object) -> tuple[int, ...] | None:
    """None: no projection; (): the default sizes; else those world sizes."""
    if to is not None:
        sizes = rank_list(to, "--to")  # type: ignore[arg-type]
        if not sizes or min(sizes) < 1:
            raise UsageError(f"--to {to!r}: world sizes must be positive")
        return sizes
    return () if project else None


def _check_rules(rules: Sequence[str], flag: str) -> None:
    if not rules:
        return  # the checker compiles with polars: not loaded before the pool starts
    from tracecomm.engine.classify import check_pattern, rule_problem

    for rule in rules:
        problem = rule_problem(rule) if flag == "--comm-pattern" else check_pattern(rule)
        if problem:
            raise UsageError(f"{flag} {rule!r}: {problem}")


def _text(value: object, flag: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    if flag == "--steps" and isinstance(value, tuple | list) and len(value) == 2:
        lo, hi = value
        return f"{'' if lo is None else lo}:{'' if hi is None else hi}"
    raise UsageError(f"{flag} {value!r}: expected text")


def _strings(value: object, flag: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str | Path):
        return (str(value),)
    if isinstance(value, Iterable) and all(isinstance(v, str | Path) for v in value):
        return tuple(str(v) for v in value)
    raise UsageError(f"{flag} {value!r}: expected text, or a list of texts")


def _choice(value: object, allowed: Sequence[str], flag: str) -> str | None:
    if value is None:
        return None
    text = str(getattr(value, "value", value))  # an Enum member, or its value
    if text not in allowed:
        raise UsageError(f"{flag} {text!r}: one of {', '.join(allowed)}")
    return text


def _choices(value: object, allowed: Sequence[str], flag: str) -> tuple[str, ...]:
    if value is None:
        return ()
    items = [value] if isinstance(value, str) else list(value)  # type: ignore[call-overload]
    return tuple(c for item in items if (c := _choice(item, allowed, flag)) is not None)


def _positive(value: Any, flag: str, kind: type, zero: bool = False) -> Any:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise UsageError(f"{flag} {value!r}: expected a number")
    if kind is int and value != int(value):
        raise UsageError(f"{flag} {value!r}: expected a whole number")
    if not (value >= 0 if zero else value > 0) or value != value or value in (float("inf"),):
        raise UsageError(f"{flag} {value!r}: must be {'0 or more' if zero else 'positive'}")
    return kind(value)
