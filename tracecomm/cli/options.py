"""Every command-line option, declared once, and the groups commands take them in.

The options ``tracecomm.analyze`` takes too are declared in ``run.options`` (``AnalyzeOptions``:
type, choices, metavar, help, panel); this module makes their typer parameters and declares the
CLI's own (formats, outputs, budgets). A command declares only its own parameters;
``command(app, GROUP, …)`` appends the groups' options to its signature (typer reads
``__signature__``) and hands their values to the command as one mapping, ``options``, which
``run.request.request_of`` turns into the request.
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

from tracecomm.run.options import SPECS, OptionSpec

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


def _declared(spec: OptionSpec) -> Option:
    kind = choice(*spec.kind.choices) if spec.kind.literal else spec.kind.cli
    default = spec.flag.default
    if default is None and kind is bool:
        default = False  # a switch is off
    short = (spec.flag.short,) if spec.flag.short else ()
    return option(
        spec.name,
        kind if default is not None else kind | None,
        default,
        *short,
        metavar=spec.metavar,
        help=spec.flag.help,
        rich_help_panel=spec.flag.panel,
    )


# tracecomm.analyze's options, each as run.options.AnalyzeOptions declares it
_DECLARED = {name: _declared(spec) for name, spec in SPECS.items()}


def declared(*names: str) -> tuple[Option, ...]:
    """The options ``names`` as ``run.options`` declares them (type, default, metavar, help and
    panel), one object each wherever a group takes it."""
    return tuple(_DECLARED[name] for name in names)


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

# tracecomm.analyze's options, in the groups commands take them in ----------------------------
SELECTION = declared(
    "steps", "all_steps", "step_range", "comm_pattern", "compute_pattern", "rank_from"
)
RUNNING = declared("jobs", "executor", "cache")
ANALYSIS = declared(
    "no_clock_align", "nccl_log", "link_gbps", "timeline_ranks", "pp_stages", "microbatches"
)
(NCCL_LOG,) = declared("nccl_log")  # ingest's, of the analysis options
PROJECT, WEAK, TO = declared("project", "weak", "to")
MODEL = declared(
    "model_flops_per_step",
    "flops_per_token",
    "tokens_per_step",
    "model_config",
    "seq_len",
    "global_batch",
    "flops_formula",
    "attention",
    "dtype",
    "peak_tflops",
)
LIMITS = declared("max_inflate_ratio", "max_trace_size", "max_event_size")
DETAIL, COMPAT = declared("detail", "compat")  # analyze's own
EXPORT_RANKS, EXPORT_STEPS = declared("export_ranks", "export_steps")  # export's own

QUIET = (option("quiet", bool, False, "-q", help="No warnings on stderr."),)

# analyze's own -------------------------------------------------------------------------------
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
