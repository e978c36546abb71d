"""``tracecomm analyze``: the report in the terminal, as JSON or as per-rank CSV."""

from __future__ import annotations

from pathlib import Path
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
    choice,
    command,
    format_option,
    option,
)
from tracecomm.render.tables import CSV_TABLES as TABLES

FORMAT = format_option(
    "terminal", "json", "csv", help="terminal report, one JSON document, or CSV (--table)."
)
TABLE = option(
    "table",
    choice(*TABLES),
    "ranks",
    metavar="|".join(TABLES),
    help="The table -f csv writes: one row per rank (default), per rank and step, per "
    "collective type, per straggler candidate, per matched collective instance (two or more "
    "ranks), or per top kernel.",
)


PARQUET = option(
    "parquet",
    Path | None,
    None,
    metavar="FILE",
    help="Write the --table (default: ranks) to FILE as Parquet instead of printing a report.",
)


@command(app, (FORMAT, TABLE, PARQUET, BRIEF, DETAIL, TOP, COMPAT), ANALYZE_RUN, (PROJECT, WEAK))
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
    brief, table, parquet = options.pop("brief"), options.pop("table"), options.pop("parquet")
    if table != "ranks" and fmt != "csv" and parquet is None:
        fail(
            f"--table {table}: a table is written as CSV (-f csv) or Parquet (--parquet)",
            EXIT_USAGE,
        )
    if parquet is not None and fmt != "terminal":
        fail(f"--parquet {parquet}: the table goes to the file; -f {fmt} has no place", EXIT_USAGE)
    if top is not None and top < 1:
        fail(f"--top {top}: list at least 1 rank", EXIT_USAGE)
    saved = flow.saved_document(run, options)
    if saved is not None:
        if table == "instances":
            fail(
                f"--table instances: {saved.path} holds no per-rank instances (a saved document "
                "keeps the report's figures): give the run folder",
                EXIT_USAGE,
            )
        report, side, kept = saved.report, None, None
    else:
        kept = flow.memo(options["cache"], "analyze", ctx.params) if parquet is None else None
        analysis = flow.analysis_for(flow.request(run, options), show_progress=fmt == "terminal")
        report, side = analysis.report, analysis.side
    lines = [] if quiet else flow.warning_lines(report)
    code = EXIT_PARTIAL if report.partial else EXIT_OK
    if parquet is not None:
        from tracecomm.render.formats import render_parquet

        data = render_parquet(report, flow.view(table=table, side=side))
        flow.write_file(parquet, data, "the table")
        flow.print_lines(lines)
        raise typer.Exit(code)
    flow.finish(kept, REPORT[fmt](report, flow.view(top, brief, table, side)), lines, code)
