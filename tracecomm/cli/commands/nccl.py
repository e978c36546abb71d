"""``tracecomm nccl``: the NCCL side alone, for users who have no traces."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from tracecomm.cli import flow
from tracecomm.cli.app import app
from tracecomm.cli.exits import EXIT_NO_INPUT, EXIT_USAGE, fail, stderr
from tracecomm.cli.options import QUIET, command, format_option

FORMAT = format_option("terminal", "json", help="terminal report or one JSON document.")
LOGS = Annotated[
    list[Path],
    typer.Argument(
        metavar="LOG",
        help="NCCL debug logs, Flight Recorder dumps (nccl_trace_rank_N), or folders of them.",
    ),
]


@command(app, (FORMAT,), QUIET)
def nccl(logs: LOGS, *, options: dict[str, Any]) -> None:
    """The NCCL side alone: versions, networks, transports, WARNs, watchdog timeouts and hangs
    from NCCL_DEBUG logs and Flight Recorder dumps, for users who have no traces.

    Exit codes: 0 success (findings do not change it); 2 usage error; 3 no NCCL log or dump.
    """
    from tracecomm.nccl.discover import analyze_nccl, discover
    from tracecomm.render.tables import NCCL

    missing = [p for p in logs if not p.exists()]
    if missing:
        fail(f"{missing[0]}: no such file or folder", EXIT_USAGE)
    # a file named on the command line is read as a log even without a log suffix
    found = discover(logs, [p for p in logs if p.is_file()])
    summary, warnings = analyze_nccl(found)
    if not options["quiet"]:
        for line in warnings:
            stderr(f"warning: {line}")
    if summary is None:
        fail(f"{', '.join(map(str, logs))}: no NCCL log or Flight Recorder dump", EXIT_NO_INPUT)
    flow.write_stdout(NCCL[options["output_format"]]((summary, warnings), flow.view()))
