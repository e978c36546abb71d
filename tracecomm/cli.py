"""Command line: parse options, run the pipeline, pick a renderer, map errors to exit codes.

Heavy modules (polars, numpy, the pipeline) are imported inside commands so that
``tracecomm --help`` stays fast.
"""

from __future__ import annotations

import dataclasses
import decimal
import os
import re
import sys
from collections.abc import Callable
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from tracecomm import __version__
from tracecomm.mfu.inputs import ModelInputs

if TYPE_CHECKING:
    from tracecomm.analysis.model import Report

EXIT_OK = 0
EXIT_USAGE = 2  # bad option or path (also click's own usage errors)
EXIT_NO_INPUT = 3  # nothing usable: no traces found, or every file failed
EXIT_PARTIAL = 4  # a report was produced, but some rank is missing or was only partly readable
EXIT_INTERNAL = 70  # a bug in tracecomm (EX_SOFTWARE)

_MFU: dict[str, Any] = {"rich_help_panel": "MFU (model FLOPs and device peak)"}

app = typer.Typer(
    name="tracecomm",
    help="Why is a distributed training run slower than its GPUs? Reads PyTorch profiler "
    "(Kineto) traces and reports compute / communication overlap, exposed collectives and idle "
    "time per rank.",
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)


class Detail(str, Enum):
    instances = "instances"


class OutputFormat(str, Enum):
    terminal = "terminal"
    json = "json"
    csv = "csv"


def _version(value: bool) -> None:
    if value:
        typer.echo(f"tracecomm {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version."),
    ] = False,
) -> None:
    """tracecomm: compute / communication analysis of distributed training traces."""


_STEPS = re.compile(r"^\s*(-?\d+)?\s*(:)?\s*(-?\d+)?\s*$")


def parse_steps(text: str | None) -> tuple[int | None, int | None]:
    """``3:7`` (inclusive), ``3:``, ``:7`` or ``5`` to (first, last) step numbers."""
    if text is None:
        return None, None
    match = _STEPS.match(text)
    if not match or (match.group(1) is None and match.group(3) is None):
        raise typer.BadParameter(f"{text!r}: expected A:B, A:, :B or A (ProfilerStep numbers)")
    first, colon, last = match.groups()
    lo = int(first) if first is not None else None
    hi = int(last) if last is not None else (None if colon else lo)
    if lo is not None and hi is not None and lo > hi:
        raise typer.BadParameter(f"{text!r}: first step is after the last one")
    return lo, hi


@app.command()
def analyze(
    run: Annotated[
        list[Path],
        typer.Argument(help="Run folder(s), searched recursively for *.json[.gz], or trace files."),
    ],
    output_format: Annotated[
        OutputFormat,
        typer.Option("--format", "-f", help="terminal report, one JSON document, or per-rank CSV."),
    ] = OutputFormat.terminal,
    steps: Annotated[
        str | None,
        typer.Option(help="ProfilerStep numbers to analyze, inclusive: 3:7, 3:, :7 or 5."),
    ] = None,
    all_steps: Annotated[
        bool, typer.Option("--all-steps", help="Also analyze incomplete (cut-short) steps.")
    ] = False,
    comm_pattern: Annotated[
        list[str] | None,
        typer.Option(
            "--comm-pattern",
            help="Regex (case-sensitive, Rust syntax): kernels whose name matches count as "
            "communication. Repeatable.",
        ),
    ] = None,
    jobs: Annotated[
        int | None,
        typer.Option("--jobs", "-j", min=1, help="Parallel parse processes (default: per core)."),
    ] = None,
    no_clock_align: Annotated[
        bool,
        typer.Option("--no-clock-align", help="Do not estimate per-host clock offsets."),
    ] = False,
    detail: Annotated[
        list[Detail] | None,
        typer.Option(help="Add bulky records to the JSON: 'instances' (every matched collective)."),
    ] = None,
    top: Annotated[
        int | None,
        typer.Option(
            "--top",
            min=1,
            help="Straggler ranks to list by root delay (default: 8 in the terminal, all in JSON).",
        ),
    ] = None,
    model_flops_per_step: Annotated[
        str | None,
        typer.Option(help="Model FLOPs of one training step (fwd + bwd), e.g. 3.16e15.", **_MFU),
    ] = None,
    flops_per_token: Annotated[
        str | None,
        typer.Option(help="Training FLOPs per token; needs --tokens-per-step.", **_MFU),
    ] = None,
    tokens_per_step: Annotated[
        int | None,
        typer.Option(min=1, help="Global tokens per step (each counted once).", **_MFU),
    ] = None,
    model_config: Annotated[
        Path | None,
        typer.Option(
            help="Hugging Face config.json (Llama-style, MoE, MLA); needs --seq-len and "
            "--global-batch.",
            **_MFU,
        ),
    ] = None,
    seq_len: Annotated[
        int | None, typer.Option(min=1, help="Training sequence length T.", **_MFU)
    ] = None,
    global_batch: Annotated[
        int | None, typer.Option(min=1, help="Sequences per step, all ranks.", **_MFU)
    ] = None,
    flops_formula: Annotated[
        str,
        typer.Option(
            help="With --model-config: exact (default), 6n, 6n-hf, palm, torchtitan, megatron.",
            **_MFU,
        ),
    ] = "exact",
    attention: Annotated[
        str,
        typer.Option(
            help="Causal attention in the exact count: halved (default) or full (the square).",
            **_MFU,
        ),
    ] = "halved",
    dtype: Annotated[
        str,
        typer.Option(help="Peak to compare with: bf16 (default), fp16, fp8, tf32, fp32.", **_MFU),
    ] = "bf16",
    peak_tflops: Annotated[
        float | None,
        typer.Option(help="Dense peak TFLOP/s per device, overriding the peak table.", **_MFU),
    ] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No warnings on stderr.")] = False,
) -> None:
    """Per-rank compute / communication breakdown of a run's profiler traces.

    Exit codes: 0 success; 2 usage error; 3 no usable input; 4 partial result (a rank is
    missing or was only partly readable; the report covers the others); 70 internal error.
    """
    first, last = parse_steps(steps)
    patterns = tuple(comm_pattern or ())
    if patterns:
        from tracecomm.engine.classify import check_pattern

        for pattern in patterns:
            problem = check_pattern(pattern)
            if problem:
                raise typer.BadParameter(f"{pattern!r}: {problem}", param_hint="--comm-pattern")
    model = ModelInputs(
        model_flops_per_step=_flops(model_flops_per_step, "--model-flops-per-step"),
        flops_per_token=_flops(flops_per_token, "--flops-per-token"),
        tokens_per_step=tokens_per_step,
        model_config=model_config,
        seq_len=seq_len,
        global_batch=global_batch,
        flops_formula=flops_formula,
        attention=attention,
        dtype=dtype,
        peak_tflops=peak_tflops,
    )
    report = _run(
        [str(p) for p in run],
        first,
        last,
        all_steps,
        patterns,
        jobs,
        not no_clock_align,
        Detail.instances in (detail or ()),
        model,
        show_progress=output_format is OutputFormat.terminal,
    )
    if not quiet:
        for line in report.warnings:
            _stderr(f"warning: {line}")
        for missing in report.missing:
            who = f"rank {missing.rank}" if missing.rank is not None else "a rank"
            where = f"{missing.path}: " if missing.path else ""
            _stderr(f"error: {who} missing: {where}{missing.reason}")
        for skipped in report.skipped:
            _stderr(f"warning: skipped {skipped.path}: {skipped.reason}")
    if top is not None and report.stragglers is not None:
        ranks = report.stragglers.ranks[:top]
        report = dataclasses.replace(
            report, stragglers=dataclasses.replace(report.stragglers, ranks=ranks)
        )
    _render(report, output_format, top)
    raise typer.Exit(EXIT_PARTIAL if report.partial else EXIT_OK)


def _run(
    inputs: list[str],
    first: int | None,
    last: int | None,
    all_steps: bool,
    patterns: tuple[str, ...],
    jobs: int | None,
    align_clocks: bool,
    detail_instances: bool,
    model: ModelInputs,
    show_progress: bool,
) -> Report:
    from tracecomm.engine import BreakdownOptions
    from tracecomm.errors import NoUsableInput, UsageError
    from tracecomm.pipeline import AnalyzeOptions
    from tracecomm.pipeline import analyze as run_pipeline

    opts = AnalyzeOptions(
        BreakdownOptions(first, last, all_steps, patterns),
        jobs,
        align_clocks,
        detail_instances,
        model,
    )
    try:
        return run_pipeline(inputs, opts, _progress() if show_progress else None)
    except UsageError as exc:
        _fail(str(exc), EXIT_USAGE)
    except NoUsableInput as exc:
        _fail(str(exc), EXIT_NO_INPUT)


def _progress() -> Callable[[int, int, str], None] | None:
    """A rich progress bar on stderr, only when stderr is a terminal (never in pipes or CI logs)."""
    if not sys.stderr.isatty():
        return None
    from rich.console import Console
    from rich.progress import Progress

    progress = Progress(console=Console(stderr=True), transient=True)
    task = progress.add_task("parsing traces", total=None)

    def report(done: int, total: int, path: str) -> None:
        if done == 0:
            progress.start()
        name = os.path.basename(path) if path else "parsing traces"
        progress.update(task, completed=done, total=total, description=name)
        if done == total:
            progress.stop()

    return report


def _render(report: Report, output_format: OutputFormat, top: int | None) -> None:
    if output_format is OutputFormat.json:
        from tracecomm.render.formats import render_json

        sys.stdout.buffer.write(render_json(report))
    elif output_format is OutputFormat.csv:
        from tracecomm.render.formats import render_csv

        sys.stdout.write(render_csv(report))
    else:
        from tracecomm.render.terminal import render_terminal

        render_terminal(report, sys.stdout, straggler_rows=top)
    sys.stdout.flush()


def _flops(text: str | None, flag: str) -> int | None:
    """A FLOP count as an integer: 3162058002530304, 3.162e15 or 3_162e12."""
    if text is None:
        return None
    try:
        value = decimal.Decimal(text.replace("_", ""))
    except decimal.InvalidOperation:
        raise typer.BadParameter(f"{text!r} is not a number", param_hint=flag) from None
    if not value.is_finite() or value <= 0:
        raise typer.BadParameter(f"{text!r} must be a positive number", param_hint=flag)
    return int(value.to_integral_value(decimal.ROUND_HALF_UP))


def _stderr(message: str) -> None:
    sys.stderr.write(f"tracecomm: {message}\n")


def _fail(message: str, code: int) -> NoReturn:
    _stderr(f"error: {message}")
    raise typer.Exit(code)


def main() -> None:
    """Console entry point: no traceback reaches the user unless TRACECOMM_DEBUG is set."""
    try:
        app()
    except (KeyboardInterrupt, BrokenPipeError):
        sys.exit(130)
    except SystemExit:
        raise
    except Exception as exc:
        if os.environ.get("TRACECOMM_DEBUG"):
            raise
        _stderr(
            f"internal error: {type(exc).__name__}: {exc} "
            "(a bug; rerun with TRACECOMM_DEBUG=1 for the traceback and please report it)"
        )
        sys.exit(EXIT_INTERNAL)


if __name__ == "__main__":
    main()
