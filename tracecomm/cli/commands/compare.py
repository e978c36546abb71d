"""``tracecomm compare``: runs side by side, and where the time went (metrics.md §18)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import typer

from tracecomm.cli import flow
from tracecomm.cli.app import app
from tracecomm.cli.exits import EXIT_NO_INPUT, EXIT_OK, EXIT_PARTIAL, EXIT_USAGE, fail
from tracecomm.cli.options import (
    ANALYZE_RUN,
    CHANGES,
    KEEP_ORDER,
    OPTIONAL_OUTPUT,
    RUNS,
    WEAK,
    choice,
    command,
    format_option,
    option,
)

FORMAT = format_option(
    "terminal",
    "json",
    "markdown",
    "html",
    "csv",
    help="terminal tables, one JSON document (compare.schema.json), Markdown for a PR comment, "
    "an HTML page with the scaling plot, or CSV (--table).",
)
COMPARE_TABLES = ("kernel-changes",)
TABLE = option(
    "table",
    choice(*COMPARE_TABLES) | None,
    None,
    metavar="|".join(COMPARE_TABLES),
    help="Write this table as CSV (what -f csv writes): every changed kernel of every pair, "
    "largest change first.",
)


@command(app, (FORMAT, TABLE, OPTIONAL_OUTPUT, KEEP_ORDER, WEAK, CHANGES), ANALYZE_RUN)
def compare(runs: RUNS, *, options: dict[str, Any]) -> None:
    """Compare runs of one model: several world sizes (a scaling study), or before and after
    a change.

    Each RUN is a run folder, the summaries `tracecomm ingest` wrote, or a saved
    `analyze --format json` document. Per run: world size, step time, tokens/s (in total and
    per GPU), scaling efficiency against the first run (strong: t1·N1 / (tk·Nk); --weak:
    t1 / tk), MFU, the typical step's partition (busy, exposed comm by collective type,
    exposed memory, idle by cause), the straggler share, power and energy. Per pair: the
    typical step's difference part by part (adding up to the ns), and the collectives that
    changed most, and the kernels that changed most (`--table kernel-changes`: all of them, as
    CSV). The first run is projected (metrics.md §11) to the others' world sizes and
    checked against them. The analysis options apply to every run folder.

    Exit codes: 0; 2 usage error (a malformed saved report too); 3 no usable input; 4 partial
    (a run is missing ranks); 74 output not written.
    """
    from tracecomm.errors import NoUsableInput, UsageError
    from tracecomm.render import View
    from tracecomm.render.tables import COMPARE
    from tracecomm.run.compare import compare_runs

    fmt, output = options.pop("output_format"), options.pop("output")
    keep, weak, rows = options.pop("keep_order"), options.pop("weak"), options.pop("changes")
    quiet, table = options.pop("quiet"), options.pop("table")
    if table is not None and fmt not in ("terminal", "csv"):
        fail(f"--table {table}: a table is written as CSV (-f csv), not -f {fmt}", EXIT_USAGE)
    if table is not None or fmt == "csv":
        fmt, table = "csv", table or COMPARE_TABLES[0]
    try:
        result = compare_runs(
            runs,
            weak=weak,
            keep_order=keep,
            analyze_run=lambda req, _: flow.analysis_for(req, show_progress=fmt == "terminal"),
            **options,
        )
    except UsageError as exc:
        fail(str(exc), EXIT_USAGE)
    except NoUsableInput as exc:
        fail(str(exc), EXIT_NO_INPUT)
    if not quiet:
        flow.print_lines([f"warning: {w}" for w in result.warnings])
    view = flow.view(rows) if output is None else View(top=rows)
    if table is not None:
        view = replace(view, table=table)
    out = COMPARE[fmt](result, view)
    if output is None:
        flow.write_stdout(out)
    else:
        flow.write_file(output, out, "the comparison")
    raise typer.Exit(EXIT_PARTIAL if result.partial else EXIT_OK)
