"""``tracecomm report``: the self-contained HTML report, of a run analyzed now or of its saved
``analyze --format json`` document."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from tracecomm.cli import flow
from tracecomm.cli.app import app
from tracecomm.cli.exits import EXIT_OK, EXIT_PARTIAL, EXIT_USAGE, fail, stderr
from tracecomm.cli.options import (
    ANALYZE_RUN,
    EXPORT_RANKS,
    EXPORT_STEPS,
    PROJECT,
    RUNS,
    WEAK,
    command,
    option,
    output_option,
)

if TYPE_CHECKING:
    from tracecomm.run.saved import SavedReport

OUTPUT = output_option("The HTML file to write: one self-contained page that opens offline.")
WITH_TRACE = option(
    "export",
    bool,
    False,
    help="Also write the exported trace (as `tracecomm export` does, metrics.md §17) next to the "
    "page as PAGE.trace.json.gz, linked from the page with how to open it in Perfetto "
    "(--export-ranks and --export-steps choose what it holds).",
)


@command(app, (OUTPUT, WITH_TRACE, EXPORT_RANKS, EXPORT_STEPS), ANALYZE_RUN, (PROJECT, WEAK))
def report(run: RUNS, *, options: dict[str, Any]) -> None:
    """A self-contained HTML report of the run: headline, per-rank bars, straggler heat map,
    one-step timeline, collective bandwidth and the scaling view.

    The page embeds the same JSON document as `analyze --format json --detail timeline`. RUN
    may also be one such saved document: the page is drawn from it as it was saved (the
    analysis options apply to run folders).

    Exit codes as for analyze: 0, 2, 3, 4 (written, but a rank is missing), 70.
    """
    from tracecomm.render.html import render_report

    output, quiet = options.pop("output"), options["quiet"]
    with_trace = options.pop("export")
    if not with_trace and (options.get("export_ranks") or options.get("export_steps")):
        fail("--export-ranks and --export-steps choose what --export writes", EXIT_USAGE)
    saved = flow.saved_document(run, options)
    if saved is not None:
        if with_trace:
            fail("--export reads the traces: give the run folder, not a saved document", EXIT_USAGE)
        _draw_saved(saved, output, quiet)
    if with_trace:
        options["export_ranks"] = options.get("export_ranks") or ""  # "": the default ranks
        options["export_steps"] = options.get("export_steps") or None
    analysis = flow.analysis_for(flow.request(run, options, detail=["timeline"]), True)
    result = analysis.report
    if not quiet:
        flow.print_lines(flow.warning_lines(result))
    trace = _write_trace(analysis, output, quiet) if with_trace else None
    page = render_report(result, flow.view(), trace)
    _write(output, page, quiet)
    raise typer.Exit(EXIT_PARTIAL if result.partial else EXIT_OK)


def _write_trace(result: Any, output: Path, quiet: bool) -> str | None:
    """The exported trace beside the page (its name, for the page's link); None with the
    reason on stderr when there is nothing to export (the page is still written)."""
    from tracecomm.cli.commands.export import gzipped, nothing_to_export
    from tracecomm.render.tables import EXPORT

    why = nothing_to_export(result.side.export)
    if why is not None:
        if not quiet:
            stderr(f"warning: no trace written beside the page: {why}")
        return None
    path = output.with_name(f"{output.name.removesuffix('.html')}.trace.json.gz")
    data = gzipped(EXPORT["chrome"](result.report, flow.view(side=result.side)))
    flow.write_file(path, data, "the trace")
    if not quiet:
        stderr(f"wrote {path} ({len(data) / 1e6:.2f} MB): open it in https://ui.perfetto.dev")
    return path.name


def _draw_saved(saved: SavedReport, output: Path, quiet: bool) -> None:
    from tracecomm.render.html import render_html

    doc = saved.report
    if not quiet:
        lines = flow.warning_lines(doc)
        if doc.timeline is None:
            lines.append(
                f"note: {saved.path} was saved without --detail timeline: the page has no "
                "one-step timeline"
            )
        flow.print_lines(lines)
    _write(output, render_html(saved.builtins()).encode(), quiet)
    raise typer.Exit(EXIT_PARTIAL if doc.partial else EXIT_OK)


def _write(output: Path, page: bytes, quiet: bool) -> None:
    flow.write_file(output, page, "the report")
    if not quiet:
        stderr(f"wrote {output} ({len(page) / 1e6:.2f} MB)")
