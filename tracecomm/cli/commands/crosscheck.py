"""``tracecomm crosscheck``: HTA itself on the run, beside tracecomm's --compat figures."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from tracecomm.cli import flow
from tracecomm.cli.app import app
from tracecomm.cli.exits import EXIT_OK, EXIT_REGRESSION, EXIT_USAGE, fail
from tracecomm.cli.options import QUIET, command

RUN = Annotated[Path, typer.Argument(help="A run folder of traces.")]


@command(app, QUIET)
def crosscheck(run: RUN, *, options: dict[str, Any]) -> None:
    """Run HolisticTraceAnalysis 0.5.0 itself on the run and print its overlap and temporal
    breakdown next to tracecomm's --compat hta figures, per rank, with the difference.

    Needs the optional extra: pip install 'tracecomm[hta]'.
    Exit codes: 0 every figure agrees to the printed precision; 1 some figure differs;
    2 usage error (HTA not installed, no such folder); 3 no usable input.
    """
    from tracecomm.compat.crosscheck import Crosscheck, HtaMissing, compare, run_hta
    from tracecomm.render.tables import CROSSCHECK

    if not run.is_dir():
        fail(f"{run}: not a folder of traces", EXIT_USAGE)
    report = flow.analyze(flow.request([run], {"compat": "hta"}))
    if not options["quiet"]:
        flow.print_lines(flow.warning_lines(report))
    try:
        theirs = run_hta(run)
    except HtaMissing as exc:
        fail(str(exc), EXIT_USAGE)
    rows = tuple(compare(list(report.hta_compat or ()), theirs))
    flow.write_stdout(CROSSCHECK["terminal"](Crosscheck(str(run), rows), flow.view()))
    raise typer.Exit(EXIT_OK if all(r.agrees for r in rows) else EXIT_REGRESSION)
