"""``tracecomm analyze``: the report in the terminal, as JSON or as per-rank CSV."""

from __future__ import annotations

from typing import Any

import typer

from tracecomm.cli import flow
from tracecomm.cli.app import app
from tracecomm.cli.exits import EXIT_OK, EXIT_PARTIAL, EXIT_USAGE, fail
from tracecomm.cli.options import (
    ANALYZE_RUN,
    BRIEF,
    COMPAT,
    DETAIL,
    PROJECT,
    RUNS,
    TOP,
    WEAK,
    command,
    format_option,
)

FORMAT = format_option(
    "terminal", "json", "csv", help="terminal report, one JSON document, or per-rank CSV."
)


@command(app, (FORMAT, BRIEF, DETAIL, TOP, COMPAT), ANALYZE_RUN, (PROJECT, WEAK))
def analyze(
    ctx: typer.Context,
    run: RUNS,
    *,
    options: dict[str, Any],
) -> None:
    """Per-rank compute / communication breakdown of a run's profiler traces.

    Exit codes: 0 success; 2 usage error; 3 no usable input; 4 partial result (a rank is
    missing or was only partly readable; the report covers the others); 70 internal error.
    """
    from tracecomm.render.tables import REPORT

    fmt, top, quiet = options.pop("output_format"), options.pop("top"), options["quiet"]
    brief = options.pop("brief")
    if top is not None and top < 1:
        fail(f"--top {top}: list at least 1 rank", EXIT_USAGE)
    kept = flow.memo(options["cache"], "analyze", ctx.params)
    report = flow.report_for(flow.request(run, options), show_progress=fmt == "terminal")
    lines = [] if quiet else flow.warning_lines(report)
    code = EXIT_PARTIAL if report.partial else EXIT_OK
    flow.finish(kept, REPORT[fmt](report, flow.view(top, brief)), lines, code)
