"""``tracecomm crosscheck``: HTA itself on the run, beside tracecomm's --compat figures."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from tracecomm.cli import flow
from tracecomm.cli.app import app
from tracecomm.cli.exits import EXIT_HTA_FAILED, EXIT_OK, EXIT_REGRESSION, EXIT_USAGE, fail
from tracecomm.cli.options import QUIET, command

RUN = Annotated[Path, typer.Argument(metavar="RUN", help="A run folder of traces.")]


@command(app, QUIET)
def crosscheck(run: RUN, *, options: dict[str, Any]) -> None:
    """Run the installed HolisticTraceAnalysis itself on the run and print its overlap and
    temporal breakdown next to tracecomm's figures for that HTA release (--compat hta for 0.6,
    hta-0.5 for 0.5), per rank, with the difference.

    Needs the optional extra: pip install 'tracecomm[hta]' (HTA 0.6.1, PyPI traceinsight).
    Exit codes: 0 every figure agrees to the printed precision; 1 some figure differs;
    2 usage error (HTA not installed, no such folder); 3 no usable input; 5 HTA itself failed
    on the run (its exception is printed in one line).
    """
    from tracecomm.compat.crosscheck import (
        Crosscheck,
        HtaFailed,
        HtaMissing,
        compare,
        discovery_notes,
        installed,
        run_hta,
    )
    from tracecomm.render.tables import CROSSCHECK

    if not run.is_dir():
        fail(f"{run}: not a folder of traces", EXIT_USAGE)
    try:
        hta = installed()
    except HtaMissing as exc:
        fail(str(exc), EXIT_USAGE)
    report = flow.report_for(flow.request([run], {"compat": hta.mode}))
    files = {r.rank: r.path for r in report.ranks}  # HTA reads the files tracecomm read
    if not options["quiet"]:
        flow.print_lines(flow.warning_lines(report))
        notes = [*hta.notes, *discovery_notes(run, files)]
        flow.print_lines([f"warning: {note}" for note in notes])
    try:
        theirs = run_hta(run, hta.version, files)
    except HtaFailed as exc:
        fail(str(exc), EXIT_HTA_FAILED)
    rows = tuple(compare(list(report.hta_compat or ()), theirs))
    check = Crosscheck(str(run), hta.mode, hta.version, rows)
    flow.write_stdout(CROSSCHECK["terminal"](check, flow.view()))
    raise typer.Exit(EXIT_OK if all(r.agrees for r in rows) else EXIT_REGRESSION)
