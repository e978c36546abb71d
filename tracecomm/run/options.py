"""The analysis options, declared once: ``AnalyzeOptions``.

Each field is one option. Its name is the flag's (``model_flops_per_step`` is
``--model-flops-per-step``); its annotation holds the Python type ``tracecomm.analyze`` takes,
the option's ``Kind`` (the type the CLI parses the flag's text to, its choices, and how
``run.request.request_of`` reads a value: the Python form or its text) and its ``Flag`` (how the
flag shows in the help). ``cli.options`` builds the typer parameters from ``SPECS``,
``request_of`` reads every value with them, and ``OPTIONS`` is their names.

Polars- and typer-free (the CLI imports it to show its help); what checks a value with polars
(a regex) loads when there is one to check.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, TypedDict, get_type_hints

from tracecomm.compat.rules import MODES
from tracecomm.errors import UsageError
from tracecomm.mfu.choices import ATTENTIONS, DTYPES, FORMULAS

DETAILS = ("instances", "timeline")  # --detail: the bulky records the JSON may add
# --rank-from: where a merged trace of several ranks says each process's rank (ingest.load)
RANK_FROM = ("pid", "process_name")
COMPAT: tuple[str, ...] = tuple(MODES)  # --compat: the HTA releases reproduced

MFU_PANEL = "MFU (model FLOPs and device peak)"
PROJECTION_PANEL = "Scaling projection"
LIMITS_PANEL = "Limits (hostile input: a file past one is refused, with the option to raise it)"


@dataclass(frozen=True)
class Kind:
    """How an option's value is written. ``cli``: the type typer parses the flag's text to (a
    ``Literal`` of ``choices`` when ``literal``: typer refuses any other). ``read(value, spec)``:
    a value of the option's Python type, or its text, to what the request holds; anything else
    is a ``UsageError`` that names the flag."""

    cli: Any
    read: Callable[[Any, OptionSpec], Any]
    choices: tuple[str, ...] = ()
    literal: bool = False


@dataclass(frozen=True)
class Flag:
    """The option on the command line: its help, what the help shows for its value (never a
    type name; a switch shows nothing), a short spelling, the help panel, and the default the
    help shows (the API's is None, "not given", which means the same)."""

    help: str
    metavar: str = ""
    short: str | None = None
    panel: str | None = None
    default: Any = None


@dataclass(frozen=True)
class OptionSpec:
    """One option, as ``AnalyzeOptions`` declares it."""

    name: str
    python: Any  # the type tracecomm.analyze takes
    kind: Kind
    flag: Flag

    @property
    def flag_name(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def metavar(self) -> str:
        """The help's word for the value: the flag's, else its choices (``pid|process_name``)."""
        return self.flag.metavar or "|".join(self.kind.choices)

    def read(self, value: Any) -> Any:
        """``value`` as the request holds it; None (not given) stays None."""
        return None if value is None else self.kind.read(value, self)


# Reading values ------------------------------------------------------------------------------
_STEPS = re.compile(r"^\s*(-?\d+)?\s*(:)?\s*(-?\d+)?\s*$")
_STEPS_DASHED = re.compile(r"^\s*(\d+)\s*[-\u2013]\s*(\d+)\s*$")  # 5-7 or 5–7
_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([KMGT]?i?B?)?\s*$", re.IGNORECASE)
_SIZE_UNITS = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}
_TRUE = ("1", "true", "t", "yes", "y", "on")  # what click reads as a boolean
_FALSE = ("0", "false", "f", "no", "n", "off")


def parse_steps(text: str | None, flag: str = "--steps") -> tuple[int | None, int | None]:
    """``3:7`` (inclusive; ``3-7`` too), ``3:``, ``:7`` or ``5`` to (first, last) step
    numbers."""
    if text is None:
        return None, None
    dashed = _STEPS_DASHED.match(text)
    # step numbers are never negative: "5-7" is a range, not 5 and -7
    match = _STEPS.match(f"{dashed.group(1)}:{dashed.group(2)}" if dashed else text)
    if not match or (match.group(1) is None and match.group(3) is None):
        raise UsageError(f"{flag} {text!r}: expected A:B, A:, :B or A (ProfilerStep numbers)")
    first, colon, last = match.groups()
    lo = int(first) if first is not None else None
    hi = int(last) if last is not None else (None if colon else lo)
    if lo is not None and hi is not None and lo > hi:
        raise UsageError(f"{flag} {text!r}: first step is after the last one")
    return lo, hi


def size_in_bytes(value: object, flag: str) -> int:
    """``64MiB``, ``2GB``, ``1.5G`` or a plain number of bytes (binary units with ``i``)."""
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


def cache_folder(value: object, flag: str = "--cache") -> Path:
    """``--cache``: a folder that exists and is writable, or one that can be made where its
    nearest existing parent is."""
    if not isinstance(value, str | Path) or not str(value):
        raise UsageError(f"{flag} {value!r}: expected a folder")
    path = Path(value)
    if path.exists() and not path.is_dir():
        raise UsageError(f"{flag} {path}: not a folder")
    import tempfile

    try:  # the only true test of writable (root passes every access() check)
        path.mkdir(parents=True, exist_ok=True)
        os.rmdir(tempfile.mkdtemp(prefix=".probe-", dir=path))
    except OSError as exc:
        raise UsageError(f"{flag} {path}: not writable ({exc.strerror or exc})") from None
    return path


def rank_list(value: object, flag: str) -> tuple[int, ...]:
    """``0,7,12``, a rank, or a sequence of ranks (or of their text) to ranks."""
    if value == "":
        return ()
    if isinstance(value, str):
        try:
            return tuple(int(part) for part in value.split(",") if part.strip())
        except ValueError:
            raise UsageError(f"{flag} {value!r}: expected numbers separated by commas") from None
    items = value if isinstance(value, Iterable) else [value]
    return tuple(_positive(v, flag, int, zero=True) for v in items)


def _positive(value: Any, flag: str, kind: type[int] | type[float], zero: bool = False) -> Any:
    """A positive number (or 0 or more) of ``kind``, or its text (``"4"``, ``"2.5"``)."""
    number = value
    if isinstance(value, str):
        for parse in (int, float) if kind is int else (float,):
            try:
                number = parse(value)
                break
            except ValueError:
                pass
    if isinstance(number, bool) or not isinstance(number, int | float):
        raise UsageError(f"{flag} {value!r}: expected a number")
    bad = not math.isfinite(number) or not (number >= 0 if zero else number > 0)
    if kind is int and not bad and number != int(number):
        raise UsageError(f"{flag} {value!r}: expected a whole number")
    if bad:
        raise UsageError(f"{flag} {value!r}: must be {'0 or more' if zero else 'positive'}")
    return kind(number)


def _text(value: object, flag: str) -> str:
    if isinstance(value, str):
        return value
    raise UsageError(f"{flag} {value!r}: expected text")


def _texts(value: object, flag: str) -> tuple[str, ...]:
    if isinstance(value, str | Path):
        return (str(value),)
    if isinstance(value, Iterable) and all(isinstance(v, str | Path) for v in value):
        return tuple(str(v) for v in value)
    raise UsageError(f"{flag} {value!r}: expected text, or a list of texts")


def _choice(value: object, allowed: Sequence[str], flag: str) -> str:
    text = str(getattr(value, "value", value))  # an Enum member, or its value
    if text not in allowed:
        raise UsageError(f"{flag} {text!r}: one of {', '.join(allowed)}")
    return text


def _check_rules(rules: Sequence[str], flag: str, as_rules: bool) -> None:
    if not rules:
        return  # the checker compiles with polars: not loaded before the pool starts
    from tracecomm.engine.classify import check_pattern, rule_problem

    for rule in rules:
        problem = rule_problem(rule) if as_rules else check_pattern(rule)
        if problem:
            raise UsageError(f"{flag} {rule!r}: {problem}")


def _read_steps(value: object, o: OptionSpec) -> tuple[int | None, int | None]:
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    elif isinstance(value, tuple | list) and len(value) == 2:
        lo, hi = value
        value = f"{'' if lo is None else lo}:{'' if hi is None else hi}"
    return parse_steps(_text(value, o.flag_name), o.flag_name)


def _read_export_steps(value: object, o: OptionSpec) -> tuple[int | None, int | None]:
    """The typical step when not given; ``all``: every analyzed step; else as ``--steps``."""
    if isinstance(value, str) and value.strip().lower() == "all":
        return (None, None)
    return _read_steps(value, o)


def _read_switch(value: object, o: OptionSpec) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in _TRUE + _FALSE:
        return value.strip().lower() in _TRUE
    raise UsageError(f"{o.flag_name} {value!r}: expected True or False")


def _read_pattern(value: object, o: OptionSpec) -> str:
    text = _text(value, o.flag_name)
    _check_rules((text,) if text else (), o.flag_name, as_rules=False)
    return text


def _read_patterns(value: object, o: OptionSpec) -> tuple[str, ...]:
    patterns = _texts(value, o.flag_name)
    _check_rules(patterns, o.flag_name, as_rules=False)
    return patterns


def _read_rules(value: object, o: OptionSpec) -> tuple[str, ...]:
    rules = _texts(value, o.flag_name)
    _check_rules(rules, o.flag_name, as_rules=True)
    return rules


def _read_executor(value: object, o: OptionSpec) -> Any:
    from tracecomm.run.executors import parse_executor

    return parse_executor(_text(value, o.flag_name))


def _read_whole(value: object, o: OptionSpec) -> int:
    return int(_positive(value, o.flag_name, int))


def _read_real(value: object, o: OptionSpec) -> float:
    return float(_positive(value, o.flag_name, float))


def _read_sizes(value: object, o: OptionSpec) -> tuple[int, ...]:
    sizes = rank_list(value, o.flag_name)
    if not sizes or min(sizes) < 1:
        raise UsageError(f"{o.flag_name} {value!r}: world sizes must be positive")
    return sizes


def _read_model(value: object, o: OptionSpec) -> Any:
    """An MFU input, checked as the settings file's are (``mfu.inputs``), from its text too."""
    from tracecomm.mfu.inputs import InputError, checked_input

    try:
        return checked_input(o.name, value, o.flag_name)
    except InputError as exc:
        raise UsageError(str(exc)) from None


def one_of(choices: tuple[str, ...]) -> Kind:
    """One of ``choices``; typer refuses any other on the command line."""
    return Kind(str, lambda v, o: _choice(v, choices, o.flag_name), choices, literal=True)


def some_of(choices: tuple[str, ...]) -> Kind:
    """Any of ``choices``, the flag repeated (one, or a list of them, in Python)."""

    def read(value: object, o: OptionSpec) -> tuple[str, ...]:
        items = [value] if isinstance(value, str) or not isinstance(value, Iterable) else value
        return tuple(_choice(item, choices, o.flag_name) for item in items)

    return Kind(list[str], read, choices)


def model_choice(choices: tuple[str, ...]) -> Kind:
    """An MFU input that is one of ``choices``, checked as the settings file's are."""
    return Kind(str, _read_model, choices)


def listed(choices: Sequence[str], default: str) -> str:
    """``a (default), b, c``: the choices as the help lists them."""
    return ", ".join(f"{c} (default)" if c == default else c for c in choices)


# The kinds: each option's Python type, with how the CLI parses it and how a value is read
Switch = Annotated[bool | str, Kind(bool, _read_switch)]
Steps = Annotated[str | int | tuple[int | None, int | None], Kind(str, _read_steps)]
ExportSteps = Annotated[str | int | tuple[int | None, int | None], Kind(str, _read_export_steps)]
Pattern = Annotated[str, Kind(str, _read_pattern)]
Patterns = Annotated[str | Sequence[str], Kind(list[str], _read_patterns)]
Rules = Annotated[str | Sequence[str], Kind(list[str], _read_rules)]
Executor = Annotated[str, Kind(str, _read_executor)]
Folder = Annotated[str | Path, Kind(Path, lambda v, o: cache_folder(v, o.flag_name))]
Files = Annotated[
    str | Path | Sequence[str | Path],
    Kind(list[Path], lambda v, o: tuple(Path(p) for p in _texts(v, o.flag_name))),
]
Whole = Annotated[int | str, Kind(int, _read_whole)]  # a positive whole number
Real = Annotated[float | str, Kind(float, _read_real)]  # a positive number
Ranks = Annotated[str | int | Sequence[int], Kind(str, lambda v, o: rank_list(v, o.flag_name))]
Sizes = Annotated[str | int | Sequence[int], Kind(str, _read_sizes)]  # world sizes
Bytes = Annotated[str | int, Kind(str, lambda v, o: size_in_bytes(v, o.flag_name))]
Flops = Annotated[float | str, Kind(str, _read_model)]  # 3.16e15, exactly
ModelWhole = Annotated[int | str, Kind(int, _read_model)]
ModelFile = Annotated[str | Path, Kind(Path, _read_model)]
Peak = Annotated[float | str, Kind(float, _read_model)]


class AnalyzeOptions(TypedDict, total=False):
    """``tracecomm analyze``'s options as the Python API takes them: each name is the flag's
    (``--model-flops-per-step`` is ``model_flops_per_step``), each value what the flag takes
    (its text) or its Python form. The one list of options: ``OPTIONS`` is its keys, the CLI's
    flags are built from it, and a test holds the analyzing commands' flags to it."""

    # Which events, which steps
    steps: Annotated[
        Steps,
        Flag("ProfilerStep numbers to analyze, inclusive: 3:7, 3:, :7 or 5.", "A:B"),
    ]
    all_steps: Annotated[Switch, Flag("Also analyze incomplete (cut-short) steps.")]
    step_range: Annotated[
        Pattern,
        Flag(
            "Nsight Systems exports: NVTX ranges whose name matches REGEX (Rust syntax; its "
            "first group the step number) are the steps. Default: ProfilerStep#N, else ranges "
            "named train_step, iteration N, step N.",
            "REGEX",
        ),
    ]
    comm_pattern: Annotated[
        Rules,
        Flag(
            "REGEX[=TYPE] (case-sensitive, Rust syntax): kernels and GPU ranges (NVTX) whose "
            "name matches count as communication, of collective TYPE (e.g. AllReduce). "
            "Repeatable.",
            "REGEX[=TYPE]",
        ),
    ]
    compute_pattern: Annotated[
        Patterns,
        Flag(
            "REGEX: kernels and GPU ranges whose name matches count as compute, even when they "
            "look like a collective. Repeatable.",
            "REGEX",
        ),
    ]
    rank_from: Annotated[
        str,
        one_of(RANK_FROM),
        Flag(
            "The trace files are merged traces holding several ranks: take each process's rank "
            "from its pid or its process_name metadata ('rank 3')."
        ),
    ]
    # Where the per-rank work runs
    jobs: Annotated[Whole, Flag("Parallel parse processes (default: per core).", "N", "-j")]
    executor: Annotated[
        Executor,
        Flag(
            "Where the per-rank parse runs: local (default, a process pool), dask (a local Dask "
            "cluster of --jobs workers) or dask://HOST:PORT (a running scheduler; its workers "
            "read the inputs, only per-rank summaries come back). Needs tracecomm[dask].",
            "local|dask|dask://HOST:PORT",
        ),
    ]
    cache: Annotated[
        Folder,
        Flag(
            "Keep each rank's parsed columns in this folder (Parquet) so the next analyze / "
            "check of the same files skips the parse. Off by default.",
            "DIR",
        ),
    ]
    # Cross-rank analysis
    no_clock_align: Annotated[Switch, Flag("Do not estimate per-host clock offsets.")]
    nccl_log: Annotated[
        Files,
        Flag(
            "An NCCL debug log outside the run folder (those inside are found). Repeatable.",
            "FILE",
        ),
    ]
    link_gbps: Annotated[
        Real,
        Flag(
            "Link bandwidth in Gbit/s: the bandwidth table adds the share of collectives whose "
            "bus bandwidth stays below it.",
            "GBIT/S",
        ),
    ]
    timeline_ranks: Annotated[
        Ranks,
        Flag(
            "Ranks for the one-step timeline, e.g. 0,7,12 (default: the fastest, median and "
            "slowest by median step window, and the worst straggler).",
            "RANKS",
        ),
    ]
    pp_stages: Annotated[
        Whole,
        Flag(
            "Pipeline stages p for the textbook bubble (default: from the send/recv pattern).",
            "P",
        ),
    ]
    microbatches: Annotated[
        Whole,
        Flag("Micro-batches per step m for the textbook bubble (default: stage 0's sends).", "M"),
    ]
    # Scaling projection
    project: Annotated[
        Switch,
        Flag(
            "Add the scaling projection (metrics.md §11) to N/2, 2N, 4N, 8N and 16N GPUs.",
            panel=PROJECTION_PANEL,
        ),
    ]
    to: Annotated[
        Sizes,
        Flag(
            "World sizes to project to, e.g. 256,512,1024 (default: N/2, 2N, 4N, 8N, 16N).",
            "SIZES",
            panel=PROJECTION_PANEL,
        ),
    ]
    weak: Annotated[
        Switch,
        Flag(
            "Weak scaling (per-rank batch kept) instead of strong (global batch kept): for the "
            "projection, and for compare's scaling efficiency.",
            panel=PROJECTION_PANEL,
        ),
    ]
    # What the JSON adds, and another tool's figures
    detail: Annotated[
        str | Sequence[str],
        some_of(DETAILS),
        Flag(
            "Add bulky records to the JSON: 'instances' (every matched collective), 'timeline' "
            "(one step of the fastest, median and slowest rank, as the HTML report draws it). "
            "Repeatable."
        ),
    ]
    compat: Annotated[
        str,
        one_of(COMPAT),
        Flag(
            "Also print another tool's figures, reproduced exactly: 'hta' (HTA's current "
            "release, 0.6.1; 'hta-0.6' the same), 'hta-0.5' (HTA 0.5.0)."
        ),
    ]
    # Bounds on hostile input
    max_inflate_ratio: Annotated[
        Real,
        Flag(
            "How many times its size a .gz trace may inflate (default 200; real traces: 8–30).",
            "RATIO",
            panel=LIMITS_PANEL,
        ),
    ]
    max_trace_size: Annotated[
        Bytes,
        Flag("The largest trace, inflated, e.g. 64GiB (the default).", "SIZE", panel=LIMITS_PANEL),
    ]
    max_event_size: Annotated[
        Bytes,
        Flag(
            "The longest single event (or string) in a trace, e.g. 64MiB (the default).",
            "SIZE",
            panel=LIMITS_PANEL,
        ),
    ]
    # export's
    export_ranks: Annotated[
        Ranks,
        Flag(
            "Ranks to write, e.g. 0,7,12 (default: the fastest, median and slowest by median "
            "step time, and the flagged stragglers)."
        ),
    ]
    export_steps: Annotated[
        ExportSteps,
        Flag(
            "ProfilerSteps to write: 5, 3:7, 3:, :7 or all (default: the median rank's typical "
            "step; a trace of many steps and ranks may not open in the Perfetto UI)."
        ),
    ]
    # MFU: the fields of mfu.inputs.ModelInputs, checked there
    model_flops_per_step: Annotated[
        Flops,
        Flag(
            "Model FLOPs of one training step (fwd + bwd), e.g. 3.16e15.",
            "FLOPS",
            panel=MFU_PANEL,
        ),
    ]
    flops_per_token: Annotated[
        Flops,
        Flag("Training FLOPs per token; needs --tokens-per-step.", "FLOPS", panel=MFU_PANEL),
    ]
    tokens_per_step: Annotated[
        ModelWhole,
        Flag("Global tokens per step (each counted once).", "N", panel=MFU_PANEL),
    ]
    model_config: Annotated[
        ModelFile,
        Flag(
            "Hugging Face config.json (Llama-style, MoE, MLA); needs --seq-len and --global-batch.",
            "FILE",
            panel=MFU_PANEL,
        ),
    ]
    seq_len: Annotated[ModelWhole, Flag("Training sequence length T.", "T", panel=MFU_PANEL)]
    global_batch: Annotated[
        ModelWhole,
        Flag("Sequences per step, all ranks.", "N", panel=MFU_PANEL),
    ]
    flops_formula: Annotated[
        str,
        model_choice(FORMULAS),
        Flag(
            f"With --model-config: {listed(FORMULAS, 'exact')}.",
            "FORMULA",
            panel=MFU_PANEL,
            default="exact",
        ),
    ]
    attention: Annotated[
        str,
        model_choice(ATTENTIONS),
        Flag(
            "Causal attention in the exact count: halved (default) or full (the square).",
            panel=MFU_PANEL,
            default="halved",
        ),
    ]
    dtype: Annotated[
        str,
        model_choice(DTYPES),
        Flag(
            f"Peak to compare with: {listed(DTYPES, 'bf16')}.",
            "DTYPE",
            panel=MFU_PANEL,
            default="bf16",
        ),
    ]
    peak_tflops: Annotated[
        Peak,
        Flag(
            "Dense peak TFLOP/s per device, overriding the peak table.",
            "TFLOP/S",
            panel=MFU_PANEL,
        ),
    ]


def _specs() -> dict[str, OptionSpec]:
    out = {}
    for name, hint in get_type_hints(AnalyzeOptions, include_extras=True).items():
        kind = next(m for m in hint.__metadata__ if isinstance(m, Kind))
        flag = next(m for m in hint.__metadata__ if isinstance(m, Flag))
        out[name] = OptionSpec(name, hint.__origin__, kind, flag)
    return out


SPECS: dict[str, OptionSpec] = _specs()
OPTIONS: tuple[str, ...] = tuple(SPECS)
