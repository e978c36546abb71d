"""``tracecomm ingest``: per-rank summaries, for ``tracecomm analyze OUT`` later."""

from __future__ import annotations

from typing import Any

import typer

from tracecomm.cli import flow
from tracecomm.cli.app import app
from tracecomm.cli.exits import (
    EXIT_IO,
    EXIT_NO_INPUT,
    EXIT_OK,
    EXIT_PARTIAL,
    EXIT_USAGE,
    fail,
    stderr,
)
from tracecomm.cli.options import (
    LIMITS,
    NCCL_LOG,
    QUIET,
    RUNNING,
    RUNS,
    SELECTION,
    command,
    output_option,
)

OUTPUT = output_option(
    "Folder for the per-rank summaries (*.tcsum.parquet); never inside the run.",
    "--out",
    dir_okay=True,
)


@command(app, (OUTPUT,), SELECTION, RUNNING, (NCCL_LOG,), LIMITS, QUIET)
def ingest(run: RUNS, *, options: dict[str, Any]) -> None:
    """Parse each rank and write its summary (a few KB of Parquet), for `analyze OUT` later.

    Run it where the traces are (a job's epilogue, on each node, into one shared folder):
    `tracecomm analyze OUT` then reads only the summaries and gives the figures `analyze RUN`
    gives. Steps and rules are fixed here. Exit codes: 0 written; 2 usage error; 3 no usable
    input; 4 some file produced no rank (its failure is stored and reported by analyze).
    """
    from tracecomm.errors import NoUsableInput, OutputError, UsageError
    from tracecomm.run.pool import return_freed_pages

    return_freed_pages()  # before the run's modules load polars
    from tracecomm.run.executors import open_executor
    from tracecomm.run.session import ingest as run_ingest

    out, quiet = options.pop("output"), options["quiet"]
    req = flow.request(run, options)
    executor = None
    try:
        executor = open_executor(req.executor, req.jobs)
        done = run_ingest(req, out, flow.progress(), executor)
    except UsageError as exc:
        fail(str(exc), EXIT_USAGE)
    except NoUsableInput as exc:
        fail(str(exc), EXIT_NO_INPUT)
    except OutputError as exc:
        fail(str(exc), EXIT_IO)
    finally:
        if executor is not None:
            executor.close()
    if not quiet:
        for failure in done.failures:
            stderr(f"warning: {failure.path}: {failure.reason}")
        stderr(f"{done.ranks} rank summaries written to {done.out}")
    if not done.ranks:
        raise typer.Exit(EXIT_NO_INPUT)
    real = [f for f in done.failures if not f.not_a_trace]
    raise typer.Exit(EXIT_PARTIAL if real else EXIT_OK)
