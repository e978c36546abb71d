"""``tracecomm export``: the chosen ranks and steps as one Chrome / Perfetto trace."""

from __future__ import annotations

import gzip
from typing import TYPE_CHECKING, Any

import typer

from tracecomm.cli import flow
from tracecomm.cli.app import app
from tracecomm.cli.exits import EXIT_NO_INPUT, EXIT_OK, EXIT_PARTIAL, EXIT_USAGE, fail, stderr
from tracecomm.cli.options import (
    ANALYZE_RUN,
    EXPORT_RANKS,
    EXPORT_STEPS,
    RUNS,
    command,
    output_option,
)

if TYPE_CHECKING:
    from tracecomm.analysis.export_model import TraceExport

OUTPUT = output_option(
    "The trace to write: view.json.gz (gzip) or view.json; opens in ui.perfetto.dev and "
    "chrome://tracing, and tracecomm reads it back (--rank-from pid)."
)
# The Perfetto UI parses a JSON trace in the browser tab: beyond about this much JSON it runs
# out of memory (trace_processor_shell --httpd opens larger ones).
PERFETTO_UI_BYTES = 1 << 30


@command(app, (OUTPUT, EXPORT_RANKS, EXPORT_STEPS), ANALYZE_RUN)
def export(run: RUNS, *, options: dict[str, Any]) -> None:
    """One merged trace of chosen ranks and steps (metrics.md §17), with tracecomm's own tracks
    per rank: exposed communication by collective type, idle by cause, waits inside
    collectives, and the report's findings as instant events.

    Exit codes: 0; 2 usage error; 3 no usable input or no step to export; 4 written, but a
    rank is missing or was only partly readable; 74 the file could not be written.
    """
    from tracecomm.render.export import event_count
    from tracecomm.render.tables import EXPORT

    output, quiet = options.pop("output"), options["quiet"]
    steps = options.get("export_steps") or None
    options["export_steps"] = steps
    options["export_ranks"] = options.get("export_ranks") or ""  # "": the default ranks
    saved = flow.saved_document(run, {})
    if saved is not None:
        fail(
            f"{saved.path}: a saved analyze document holds no events to export: give the run "
            "folder",
            EXIT_USAGE,
        )
    analysis = flow.analysis_for(flow.request(run, options), show_progress=True)
    result = analysis.report
    if not quiet:
        flow.print_lines(flow.warning_lines(result))
    found = analysis.side.export
    why = nothing_to_export(found)
    if why is not None or found is None:
        stderr(f"error: nothing to export: {why}")
        raise typer.Exit(EXIT_NO_INPUT)
    data = EXPORT["chrome"](result, flow.view(side=analysis.side))
    written = gzipped(data) if output.name.endswith(".gz") else data
    flow.write_file(output, written, "the trace")
    if not quiet:
        for r in found.ranks:
            if r.reason:
                stderr(f"warning: rank {r.rank} not written: {r.reason}")
        ranks = ", ".join(f"{r.rank} ({r.role})" for r in found.ranks if r.events is not None)
        steps_text = ", ".join(map(str, found.steps))
        stderr(
            f"wrote {output}: ranks {ranks}; step(s) {steps_text}; {event_count(data):,} events, "
            f"{len(written) / 1e6:.2f} MB ({len(data) / 1e6:.2f} MB of JSON)"
        )
        if len(data) > PERFETTO_UI_BYTES:
            stderr(
                "warning: the Perfetto UI loads JSON traces of up to about 1 GB in a browser "
                "tab; write fewer steps or ranks (--export-steps, --export-ranks), or open it "
                "with trace_processor_shell --httpd"
            )
    raise typer.Exit(EXIT_PARTIAL if result.partial else EXIT_OK)


def nothing_to_export(found: TraceExport | None) -> str | None:
    """Why the export holds no rank's events; None when it holds some (also for ``report
    --export``)."""
    if found is not None and any(r.events is not None for r in found.ranks):
        return None
    why = found.reason if found is not None else None
    if found is not None and found.ranks and why is None:
        why = "; ".join(f"rank {r.rank}: {r.reason}" for r in found.ranks[:3])
    return why or "no analyzed rank"


def gzipped(data: bytes) -> bytes:
    """The trace as written to a .gz name (no timestamp: the same run gives the same bytes)."""
    return gzip.compress(data, compresslevel=6, mtime=0)
