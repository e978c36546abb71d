"""``tracecomm report``: the self-contained HTML report."""

from __future__ import annotations

from typing import Any

import typer

from tracecomm.cli import flow
from tracecomm.cli.app import app
from tracecomm.cli.exits import EXIT_OK, EXIT_PARTIAL, stderr
from tracecomm.cli.options import ANALYZE_RUN, PROJECT, RUNS, WEAK, command, output_option

OUTPUT = output_option("The HTML file to write: one self-contained page that opens offline.")


@command(app, (OUTPUT,), ANALYZE_RUN, (PROJECT, WEAK))
def report(run: RUNS, *, options: dict[str, Any]) -> None:
    """A self-contained HTML report of the run: headline, per-rank bars, straggler heat map,
    one-step timeline, collective bandwidth and the scaling view.

    The page embeds the same JSON document as `analyze --format json --detail timeline`.
    Exit codes as for analyze: 0, 2, 3, 4 (written, but a rank is missing), 70.
    """
    from tracecomm.render.tables import REPORT

    output, quiet = options.pop("output"), options["quiet"]
    result = flow.analyze(flow.request(run, options, detail=["timeline"]), show_progress=True)
    if not quiet:
        flow.print_lines(flow.warning_lines(result))
    page = REPORT["html"](result, flow.view())
    flow.write_file(output, page, "the report")
    if not quiet:
        stderr(f"wrote {output} ({len(page) / 1e6:.2f} MB)")
    raise typer.Exit(EXIT_PARTIAL if result.partial else EXIT_OK)
