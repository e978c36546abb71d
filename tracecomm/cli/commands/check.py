"""The CI gate: ``tracecomm check`` against a baseline, and ``tracecomm baseline`` to write one."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from tracecomm.cli import flow
from tracecomm.cli.app import app
from tracecomm.cli.exits import EXIT_IO, EXIT_OK, EXIT_REGRESSION, EXIT_USAGE, fail, stderr
from tracecomm.cli.options import (
    ANALYZE_RUN,
    BASELINE,
    BUDGETS,
    NOISE_FLOOR,
    RUN_OR_JSON,
    command,
    format_option,
    output_option,
)

if TYPE_CHECKING:
    from tracecomm.check.figures import RunFigures

FORMAT = format_option(
    "terminal",
    "json",
    "github",
    "junit",
    "markdown",
    help="terminal, json, github (annotations), junit, markdown.",
)
OUTPUT = output_option("Where to write the baseline JSON.")


@command(app, (BASELINE, FORMAT, *BUDGETS, NOISE_FLOOR), ANALYZE_RUN)
def check(ctx: typer.Context, run: RUN_OR_JSON, *, options: dict[str, Any]) -> None:
    """Gate a run against a baseline: exit 1 when a figure got worse than its budget allows.

    Compares medians over steps and ranks (step time, exposed comm in total and per collective
    type, overlap, idle, MFU, straggler delay). A figure regresses when it is worse by more
    than its relative budget AND by more than its noise floor, or beyond an absolute cap.
    Budgets also come from a [check] table in tracecomm.toml (flags win).

    Exit codes: 0 pass; 1 regression; 2 usage or input error.
    """
    from tracecomm.check.budgets import DEFAULT_BUDGETS, BudgetError, apply
    from tracecomm.check.verdicts import NothingShared, verdicts
    from tracecomm.render.tables import CHECK

    fmt, baseline = options.pop("output_format"), options.pop("baseline")
    flags: dict[str, Any] = {o.name: options.pop(o.name) for o in BUDGETS}
    flags["noise_floor"] = _pairs(options.pop("noise_floor"), "--noise-floor")
    try:
        budgets = apply(flags, apply(_check_settings(run), DEFAULT_BUDGETS))
    except BudgetError as exc:
        fail(str(exc), EXIT_USAGE)
    # the github format also appends to $GITHUB_STEP_SUMMARY: a replay would skip that
    kept = flow.memo(options["cache"], "check", ctx.params) if fmt != "github" else None
    lines: list[str] = []
    current = _figures(run, options, lines)
    base = _figures(baseline, options, lines, document=True)
    try:
        result = verdicts(base, current, budgets)
    except NothingShared as exc:
        flow.print_lines(lines)
        fail(str(exc), EXIT_USAGE)
    code = EXIT_OK if result.passed else EXIT_REGRESSION
    out = CHECK[fmt](result, flow.view())
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if fmt == "github" and summary:
        try:
            with open(summary, "a", encoding="utf-8") as handle:
                handle.write(CHECK["markdown"](result, flow.view()).decode())
        except OSError as exc:
            fail(f"$GITHUB_STEP_SUMMARY {summary}: cannot write: {exc.strerror or exc}", EXIT_IO)
    flow.finish(kept, out, lines, code)


@command(app, (OUTPUT,), ANALYZE_RUN)
def baseline(run: RUN_OR_JSON, *, options: dict[str, Any]) -> None:
    """Write the compact baseline `tracecomm check --baseline` reads (figures only, versioned).

    Exit codes: 0 written; 2 usage or input error.
    """
    import orjson

    from tracecomm.check.figures import baseline_document
    from tracecomm.text import json_safe

    output = options.pop("output")
    lines: list[str] = []
    figures = _figures(run, options, lines)
    flow.print_lines(lines)
    document = json_safe(
        orjson.dumps(baseline_document(figures), option=orjson.OPT_INDENT_2) + b"\n"
    )
    flow.write_file(output, document, "the baseline")
    if not options["quiet"]:
        stderr(f"baseline of {len(figures.ranks)} ranks written to {output}")


def _figures(
    path: Path, options: Mapping[str, Any], lines: list[str], document: bool = False
) -> RunFigures:
    """Gate figures of a run folder (analyzed now), a saved analyze JSON (read with the one
    loader, ``run.saved.load_saved_report``) or a compact baseline; ``document``: a file is
    one of the two documents, never a trace. The analysis's warnings are added to ``lines``
    (unless --quiet)."""
    from tracecomm.check.figures import (
        BASELINE_KIND,
        BaselineError,
        from_report,
        read_baseline_file,
    )
    from tracecomm.run.saved import SavedReportError, load_saved_report
    from tracecomm.run.sniff import saved_kind

    kind = saved_kind(path) if path.is_file() else None
    try:
        if kind == BASELINE_KIND:
            return read_baseline_file(path)
        if kind is not None or (document and path.is_file()):
            return from_report(load_saved_report(path).report, str(path))
    except (BaselineError, SavedReportError) as exc:
        fail(str(exc), EXIT_USAGE)
    if not path.exists():
        fail(f"{path}: no such file or folder", EXIT_USAGE)
    report = flow.report_for(flow.request([path], options), no_input_code=EXIT_USAGE)
    if not options["quiet"]:
        lines.extend(flow.warning_lines(report))
    return from_report(report, str(path))


def _check_settings(run: Path) -> dict[str, Any]:
    """The [check] table of the run folder's settings file."""
    from tracecomm.errors import UsageError
    from tracecomm.run.settings import read_settings

    try:
        return read_settings([str(run)]).check
    except UsageError as exc:
        fail(str(exc), EXIT_USAGE)


def _pairs(items: list[str] | None, flag: str) -> dict[str, str] | None:
    if not items:
        return None
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep:
            fail(f"{flag} {item!r}: expected FIGURE=VALUE", EXIT_USAGE)
        out[name.strip()] = value.strip()
    return out
