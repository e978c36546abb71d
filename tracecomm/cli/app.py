"""The typer application every command registers on."""

from __future__ import annotations

from typing import Annotated

import typer

from tracecomm._version import __version__

app = typer.Typer(
    name="tracecomm",
    help="Why is a distributed training run slower than its GPUs? Reads PyTorch profiler "
    "(Kineto) traces and reports compute / communication overlap, exposed collectives and idle "
    "time per rank.",
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"tracecomm {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version."),
    ] = False,
) -> None:
    """tracecomm: compute / communication analysis of distributed training traces."""
