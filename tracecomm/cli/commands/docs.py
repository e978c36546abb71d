"""``tracecomm docs``: the definitions the tool cites (metrics.md §N), as installed with it."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from tracecomm.cli import flow
from tracecomm.cli.app import app
from tracecomm.cli.exits import EXIT_NO_INPUT, fail
from tracecomm.cli.options import PATH, command

DOCS = {"metrics": "metrics.md", "architecture": "architecture.md"}
WHICH = Annotated[
    str,
    typer.Argument(
        metavar="TOPIC",
        help="metrics (every figure defined: the §N the tool cites) or architecture (the layers).",
    ),
]


def doc_path(name: str) -> Path | None:
    """The installed copy (a wheel carries ``tracecomm/docs/``), else the checkout's ``docs/``
    (an editable install)."""
    package = Path(__file__).resolve().parents[2]
    for folder in (package / "docs", package.parent / "docs"):
        if (folder / name).is_file():
            return folder / name
    return None


@command(app, (PATH,))
def docs(which: WHICH = "metrics", *, options: dict[str, Any]) -> None:
    """Show the definitions of every figure tracecomm prints (metrics.md), or how it is built.

    Exit codes: 0; 2 usage error; 3 the file is not installed.
    """
    if which not in DOCS:
        fail(f"{which!r}: one of {', '.join(DOCS)}", 2)
    path = doc_path(DOCS[which])
    if path is None:
        fail(f"{DOCS[which]} is not installed with this tracecomm", EXIT_NO_INPUT)
    flow.write_stdout(f"{path}\n".encode() if options["path"] else path.read_bytes())
