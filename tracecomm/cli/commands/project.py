"""``tracecomm project``: the scaling projection alone (metrics.md §11)."""

from __future__ import annotations

from typing import Any

import typer

from tracecomm.cli import flow
from tracecomm.cli.app import app
from tracecomm.cli.exits import EXIT_NO_INPUT, EXIT_OK, EXIT_PARTIAL
from tracecomm.cli.options import ANALYZE_RUN, RUNS, TO, WEAK, command, format_option

FORMAT = format_option("terminal", "json", help="terminal table or one JSON document.")


@command(app, (TO, WEAK, FORMAT), ANALYZE_RUN)
def project(run: RUNS, *, options: dict[str, Any]) -> None:
    """What this job would do at other world sizes (metrics.md §11): fitted per-collective
    latency and bandwidth, and the median rank's step replayed at each size. An estimate.

    Exit codes: 0; 2 usage error; 3 no usable input or nothing to project from; 4 partial.
    """
    from tracecomm.render.tables import PROJECTION

    fmt, quiet = options.pop("output_format"), options["quiet"]
    asked = {"to": options.get("to"), "weak": options.get("weak")}
    saved = flow.saved_document(run, {"project": True, **asked})
    if saved is not None:
        result = saved.report
    else:
        req = flow.request(run, options, project=True)
        result = flow.report_for(req, show_progress=fmt == "terminal")
    if not quiet:
        flow.print_lines(flow.warning_lines(result))
    flow.write_stdout(PROJECTION[fmt](result, flow.view()))
    if result.projection is None or result.projection.reason is not None:
        raise typer.Exit(EXIT_NO_INPUT)
    raise typer.Exit(EXIT_PARTIAL if result.partial else EXIT_OK)
