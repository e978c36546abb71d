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
    saved = _saved(run, options)
    if saved is not None:
        if with_trace:
            fail("--export reads the traces: give the run folder, not a saved document", EXIT_USAGE)
        _draw_saved(saved, output, quiet)
    if with_trace:
        options["export_ranks"] = options.get("export_ranks") or ""  # "": the default ranks
        options["export_steps"] = options.get("export_steps") or None
    result = flow.report_for(flow.request(run, options, detail=["timeline"]), show_progress=True)
    if not quiet:
        flow.print_lines(flow.warning_lines(result))
    trace = _write_trace(result, output, quiet) if with_trace else None
    page = render_report(result, flow.view(), trace)
    _write(output, page, quiet)
    raise typer.Exit(EXIT_PARTIAL if result.partial else EXIT_OK)


def _write_trace(result: Any, output: Path, quiet: bool) -> str | None:
    """The exported trace beside the page (its name, for the page's link); None with the
    reason on stderr when there is nothing to export (the page is still written)."""
    from tracecomm.cli.commands.export import gzipped, nothing_to_export
    from tracecomm.render.tables import EXPORT

    why = nothing_to_export(result)
    if why is not None:
        if not quiet:
            stderr(f"warning: no trace written beside the page: {why}")
        return None
    path = output.with_name(f"{output.name.removesuffix('.html')}.trace.json.gz")
    data = gzipped(EXPORT["chrome"](result, flow.view()))
    flow.write_file(path, data, "the trace")
    if not quiet:
        stderr(f"wrote {path} ({len(data) / 1e6:.2f} MB): open it in https://ui.perfetto.dev")
    return path.name


def _saved(run: list[str], options: dict[str, Any]) -> SavedReport | None:
    """The saved analyze document given as RUN, read with the one loader; None for a run."""
    from tracecomm.run.saved import SavedReportError, load_saved_report, looks_saved

    saved = [p for p in map(Path, run) if p.is_file() and looks_saved(p)]
    if not saved:
        return None
    if len(run) > 1:
        fail(
            f"{saved[0]}: a saved analyze document is drawn alone, not with other runs", EXIT_USAGE
        )
    for name in ("project", "weak"):
        if options.get(name):
            fail(
                f"--{name} projects a run folder; a saved document is drawn as it was saved "
                "(save one with `tracecomm project RUN -f json`)",
                EXIT_USAGE,
            )
    try:
        return load_saved_report(saved[0])
    except SavedReportError as exc:
        fail(str(exc), EXIT_USAGE)


def _draw_saved(saved: SavedReport, output: Path, quiet: bool) -> None:
    from tracecomm.render.html import render_html

    doc = saved.document
    if not quiet:
        lines = [f"warning: {w}" for w in doc.warnings]
        for m in doc.missing_ranks:
            who = f"rank {m.rank}" if m.rank is not None else "a rank"
            lines.append(f"error: {who} missing: {f'{m.path}: ' if m.path else ''}{m.reason}")
        lines += [f"warning: skipped {s.path}: {s.reason}" for s in doc.skipped_files]
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
