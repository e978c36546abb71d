"""Every command-line option, declared once, and the groups commands take them in.

A command declares only its own parameters; ``command(app, GROUP, …)`` appends the groups'
options to its signature (typer reads ``__signature__``) and hands their values to the command
as one mapping, ``options``, which ``run.request.request_of`` turns into the request.
"""

from __future__ import annotations

import functools
import inspect
import typing
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import typer

MFU_PANEL = "MFU (model FLOPs and device peak)"
PROJECTION_PANEL = "Scaling projection"
GATE_PANEL = "Budgets (relative: 5% or 0.05; times: 12ms, 100us)"


@dataclass(frozen=True)
class Option:
    """One option: its parameter name, its typer annotation and its default."""

    name: str
    annotation: Any
    default: Any

    def parameter(self) -> inspect.Parameter:
        return inspect.Parameter(
            self.name,
            inspect.Parameter.KEYWORD_ONLY,
            default=self.default,
            annotation=self.annotation,
        )


def text(help: str) -> str:
    """Help text shown as written: rich would read ``tracecomm[hta]`` as markup and drop it."""
    from rich.markup import escape

    return escape(help)


def option(
    name: str, kind: Any, default: Any, *short: str, metavar: str = "", **info: Any
) -> Option:
    """``--name-with-dashes`` (plus ``short`` spellings) of type ``kind``. The help shows
    ``metavar`` (what to write, e.g. ``A:B``), never a type name; a flag shows nothing."""
    flag = "--" + name.replace("_", "-")
    info["help"] = text(info.get("help", ""))
    spec = typer.Option(flag, *short, metavar=metavar, **info)
    return Option(name, Annotated[kind, spec], default)


def choice(*values: str) -> Any:
    """A type whose values are exactly ``values``."""
    return Literal[values]


def format_option(*formats: str, help: str) -> Option:
    """``--format / -f``: each command renders its own set of formats."""
    spec = typer.Option("--format", "-f", metavar="|".join(formats), help=text(help))
    return Option("output_format", Annotated[choice(*formats), spec], formats[0])


def output_option(
    help: str,
    *extra: str,
    dir_okay: bool = False,
) -> Option:
    """``--output / -o``: the file (or folder) a command writes; required."""
    spec = typer.Option(
        "--output",
        "-o",
        *extra,
        dir_okay=dir_okay,
        metavar="DIR" if dir_okay else "FILE",
        help=text(help),
    )
    return Option("output", Annotated[Path, spec], ...)


RUNS = Annotated[
    list[str],
    typer.Argument(
        metavar="RUN",
        help=text(
            "Run folder(s), searched recursively for *.json[.gz], trace files, URLs (file://, "
            "s3://, gs:// with fsspec), or folders `tracecomm ingest` wrote."
        ),
    ),
]

# Which events, which steps -------------------------------------------------------------------
STEPS = option(
    "steps",
    str | None,
    None,
    metavar="A:B",
    help="ProfilerStep numbers to analyze, inclusive: 3:7, 3:, :7 or 5.",
)
ALL_STEPS = option("all_steps", bool, False, help="Also analyze incomplete (cut-short) steps.")
STEP_RANGE = option(
    "step_range",
    str | None,
    None,
    metavar="REGEX",
    help="Nsight Systems exports: NVTX ranges whose name matches REGEX (Rust syntax; its first "
    "group the step number) are the steps. Default: ProfilerStep#N, else ranges named "
    "train_step, iteration N, step N.",
)
COMM_PATTERN = option(
    "comm_pattern",
    list[str] | None,
    None,
    metavar="REGEX[=TYPE]",
    help="REGEX[=TYPE] (case-sensitive, Rust syntax): kernels and GPU ranges (NVTX) whose name "
    "matches count as communication, of collective TYPE (e.g. AllReduce). Repeatable.",
)
COMPUTE_PATTERN = option(
    "compute_pattern",
    list[str] | None,
    None,
    metavar="REGEX",
    help="REGEX: kernels and GPU ranges whose name matches count as compute, even when they look "
    "like a collective. Repeatable.",
)
RANK_FROM = option(
    "rank_from",
    choice("pid", "process_name") | None,
    None,
    metavar="pid|process_name",
    help="The trace files are merged traces holding several ranks: take each process's rank "
    "from its pid or its process_name metadata ('rank 3').",
)
SELECTION = (STEPS, ALL_STEPS, STEP_RANGE, COMM_PATTERN, COMPUTE_PATTERN, RANK_FROM)

# Where the per-rank work runs -----------------------------------------------------------------
JOBS = option(
    "jobs",
    int | None,
    None,
    "-j",
    metavar="N",
    help="Parallel parse processes (default: per core).",
)
EXECUTOR = option(
    "executor",
    str | None,
    None,
    metavar="local|dask|dask://HOST:PORT",
    help="Where the per-rank parse runs: local (default, a process pool), dask (a local Dask "
    "cluster of --jobs workers) or dask://HOST:PORT (a running scheduler; its workers read the "
    "inputs, only per-rank summaries come back). Needs tracecomm[dask].",
)
CACHE = option(
    "cache",
    Path | None,
    None,
    metavar="DIR",
    help="Keep each rank's parsed columns in this folder (Parquet) so the next analyze / check "
    "of the same files skips the parse. Off by default.",
)
RUNNING = (JOBS, EXECUTOR, CACHE)

# Cross-rank analysis -------------------------------------------------------------------------
NO_CLOCK_ALIGN = option(
    "no_clock_align", bool, False, help="Do not estimate per-host clock offsets."
)
NCCL_LOG = option(
    "nccl_log",
    list[Path] | None,
    None,
    metavar="FILE",
    help="An NCCL debug log outside the run folder (those inside are found). Repeatable.",
)
LINK_GBPS = option(
    "link_gbps",
    float | None,
    None,
    metavar="GBIT/S",
    help="Link bandwidth in Gbit/s: the bandwidth table adds the share of collectives whose bus "
    "bandwidth stays below it.",
)
TIMELINE_RANKS = option(
    "timeline_ranks",
    str | None,
    None,
    metavar="RANKS",
    help="Ranks for the one-step timeline, e.g. 0,7,12 (default: the fastest, median and slowest "
    "by median step window, and the worst straggler).",
)
PP_STAGES = option(
    "pp_stages",
    int | None,
    None,
    metavar="P",
    help="Pipeline stages p for the textbook bubble (default: from the send/recv pattern).",
)
MICROBATCHES = option(
    "microbatches",
    int | None,
    None,
    metavar="M",
    help="Micro-batches per step m for the textbook bubble (default: stage 0's sends).",
)
ANALYSIS = (NO_CLOCK_ALIGN, NCCL_LOG, LINK_GBPS, TIMELINE_RANKS, PP_STAGES, MICROBATCHES)

# Scaling projection --------------------------------------------------------------------------
PROJECT = option(
    "project",
    bool,
    False,
    help="Add the scaling projection (metrics.md §11) to N/2, 2N, 4N, 8N and 16N GPUs.",
    rich_help_panel=PROJECTION_PANEL,
)
WEAK = option(
    "weak",
    bool,
    False,
    help="Weak scaling (per-rank batch kept) instead of strong (global batch kept): for the "
    "projection, and for compare's scaling efficiency.",
    rich_help_panel=PROJECTION_PANEL,
)
TO = option(
    "to",
    str | None,
    None,
    metavar="SIZES",
    help="World sizes to project to, e.g. 256,512,1024 (default: N/2, 2N, 4N, 8N, 16N).",
    rich_help_panel=PROJECTION_PANEL,
)

# MFU ----------------------------------------------------------------------------------------
MODEL = (
    option(
        "model_flops_per_step",
        str | None,
        None,
        metavar="FLOPS",
        help="Model FLOPs of one training step (fwd + bwd), e.g. 3.16e15.",
        rich_help_panel=MFU_PANEL,
    ),
    option(
        "flops_per_token",
        str | None,
        None,
        metavar="FLOPS",
        help="Training FLOPs per token; needs --tokens-per-step.",
        rich_help_panel=MFU_PANEL,
    ),
    option(
        "tokens_per_step",
        int | None,
        None,
        metavar="N",
        help="Global tokens per step (each counted once).",
        rich_help_panel=MFU_PANEL,
    ),
    option(
        "model_config",
        Path | None,
        None,
        metavar="FILE",
        help="Hugging Face config.json (Llama-style, MoE, MLA); needs --seq-len and "
        "--global-batch.",
        rich_help_panel=MFU_PANEL,
    ),
    option(
        "seq_len",
        int | None,
        None,
        metavar="T",
        help="Training sequence length T.",
        rich_help_panel=MFU_PANEL,
    ),
    option(
        "global_batch",
        int | None,
        None,
        metavar="N",
        help="Sequences per step, all ranks.",
        rich_help_panel=MFU_PANEL,
    ),
    option(
        "flops_formula",
        str,
        "exact",
        metavar="FORMULA",
        help="With --model-config: exact (default), 6n, 6n-hf, palm, torchtitan, megatron.",
        rich_help_panel=MFU_PANEL,
    ),
    option(
        "attention",
        str,
        "halved",
        metavar="halved|full",
        help="Causal attention in the exact count: halved (default) or full (the square).",
        rich_help_panel=MFU_PANEL,
    ),
    option(
        "dtype",
        str,
        "bf16",
        metavar="DTYPE",
        help="Peak to compare with: bf16 (default), fp16, fp8, tf32, fp32.",
        rich_help_panel=MFU_PANEL,
    ),
    option(
        "peak_tflops",
        float | None,
        None,
        metavar="TFLOP/S",
        help="Dense peak TFLOP/s per device, overriding the peak table.",
        rich_help_panel=MFU_PANEL,
    ),
)

LIMITS_PANEL = "Limits (hostile input: a file past one is refused, with the option to raise it)"
LIMITS = (
    option(
        "max_inflate_ratio",
        float | None,
        None,
        metavar="RATIO",
        help="How many times its size a .gz trace may inflate (default 200; real traces: 8–30).",
        rich_help_panel=LIMITS_PANEL,
    ),
    option(
        "max_trace_size",
        str | None,
        None,
        metavar="SIZE",
        help="The largest trace, inflated, e.g. 64GiB (the default).",
        rich_help_panel=LIMITS_PANEL,
    ),
    option(
        "max_event_size",
        str | None,
        None,
        metavar="SIZE",
        help="The longest single event (or string) in a trace, e.g. 64MiB (the default).",
        rich_help_panel=LIMITS_PANEL,
    ),
)

QUIET = (option("quiet", bool, False, "-q", help="No warnings on stderr."),)

# analyze's own -------------------------------------------------------------------------------
DETAIL = option(
    "detail",
    list[str] | None,
    None,
    metavar="instances|timeline",
    help="Add bulky records to the JSON: 'instances' (every matched collective), 'timeline' (one "
    "step of the fastest, median and slowest rank, as the HTML report draws it). Repeatable.",
)
TOP = option(
    "top",
    int | None,
    None,
    metavar="K",
    help="Straggler ranks to list by root delay (default: 8 in the terminal, all in JSON).",
)
BRIEF = option(
    "brief", bool, False, help="Print only the bottom line: step time, MFU, the top findings."
)
COMPAT = option(
    "compat",
    choice("hta", "hta-0.6", "hta-0.5") | None,
    None,
    metavar="hta|hta-0.6|hta-0.5",
    help="Also print another tool's figures, reproduced exactly: 'hta' (HTA's current release, "
    "0.6.1; 'hta-0.6' the same), 'hta-0.5' (HTA 0.5.0).",
)

# The options of every command that analyzes a run, in help order.
ANALYZE_RUN = (*SELECTION, *RUNNING, *ANALYSIS, *MODEL, *LIMITS, *QUIET)


def command(
    app: typer.Typer, *groups: tuple[Option, ...], **typer_args: Any
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register ``fn`` as a command taking its own parameters plus the groups' options; the
    groups' values reach ``fn`` as the keyword ``options`` (a dict by parameter name)."""
    shared = [o for group in groups for o in group]

    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        hints = typing.get_type_hints(fn, include_extras=True)
        own = [
            p.replace(annotation=hints.get(p.name, p.annotation))
            for p in inspect.signature(fn).parameters.values()
            if p.name != "options"
        ]
        names = {o.name for o in shared}

        @functools.wraps(fn)
        def wrapper(**values: Any) -> Any:
            options = {k: values.pop(k) for k in list(values) if k in names}
            return fn(**values, options=options)

        params = own + [o.parameter() for o in shared]
        wrapper.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
        wrapper.__annotations__ = {p.name: p.annotation for p in params}
        from tracecomm.cli.app import Command

        # paragraphs as written, their lines joined: the help reflows them to the terminal
        doc = "\n\n".join(" ".join(p.split()) for p in (inspect.getdoc(fn) or "").split("\n\n"))
        return app.command(cls=Command, help=text(doc), **typer_args)(wrapper)

    return register


# compare's own ------------------------------------------------------------------------------
KEEP_ORDER = option(
    "keep_order",
    bool,
    False,
    help="Compare the runs in the order given (default: by world size); the first is the "
    "baseline every change is measured against.",
)
CHANGES = option(
    "changes",
    int | None,
    None,
    min=1,
    help="Changed collectives to list per pair, largest first (default 8; JSON: all).",
)
OPTIONAL_OUTPUT = Option(
    "output",
    Annotated[
        Path | None,
        typer.Option(
            "--output",
            "-o",
            dir_okay=False,
            help="Write the output to this file (default: stdout).",
        ),
    ],
    None,
)


# export's own -------------------------------------------------------------------------------
EXPORT_RANKS = option(
    "export_ranks",
    str | None,
    None,
    help="Ranks to write, e.g. 0,7,12 (default: the fastest, median and slowest by median step "
    "time, and the flagged stragglers).",
)
EXPORT_STEPS = option(
    "export_steps",
    str | None,
    None,
    help="ProfilerSteps to write: 5, 3:7, 3:, :7 or all (default: the median rank's typical "
    "step; a trace of many steps and ranks may not open in the Perfetto UI).",
)

# docs' own ---------------------------------------------------------------------------------
PATH = option("path", bool, False, help="Print where the file is instead of its text.")


# check's own ---------------------------------------------------------------------------------
def _budget(name: str, help: str) -> Option:
    return option(name, str | None, None, metavar="VALUE", help=help, rich_help_panel=GATE_PANEL)


BUDGETS = (
    _budget("max_step_time_increase", "Relative budget, e.g. 3% (default 3%)."),
    _budget("max_exposed_comm_increase", "Relative, total and per collective type (default 5%)."),
    _budget("max_idle_increase", "Relative (default 10%)."),
    _budget("max_overlap_decrease", "Relative (default 5%)."),
    _budget("max_mfu_decrease", "Relative (default 3%)."),
    _budget("max_straggler_delay_increase", "Relative (default 50%)."),
    _budget("max_step_time", "Absolute cap, e.g. 120ms."),
    _budget("max_exposed_comm", "Absolute cap, e.g. 12ms."),
    _budget("max_idle", "Absolute cap."),
    _budget("min_overlap", "Absolute floor in %, e.g. 70."),
    _budget("min_mfu", "Absolute floor, e.g. 0.35 or 35%."),
    _budget("max_straggler_delay", "Absolute cap on the worst rank's root delay."),
)
NOISE_FLOOR = option(
    "noise_floor",
    list[str] | None,
    None,
    metavar="FIGURE=VALUE",
    help="FIGURE=VALUE: a change below it never regresses (e.g. exposed_comm=50us). Repeatable.",
    rich_help_panel=GATE_PANEL,
)
BASELINE = option(
    "baseline",
    Path,
    ...,
    "-b",
    metavar="FILE|RUN",
    help="A baseline from `tracecomm baseline`, an analyze JSON, or a run folder.",
)
RUN_OR_JSON = Annotated[
    Path,
    typer.Argument(metavar="RUN", help=text("The run: a folder of traces, or its analyze JSON.")),
]
