"""Exit codes (docs/analyze.md, "Exit codes") and the one error style: ``tracecomm: error: …``."""

from __future__ import annotations

import sys
from typing import NoReturn

import typer

from tracecomm.text import visible

EXIT_OK = 0
EXIT_REGRESSION = 1  # tracecomm check: a figure passed its budget; crosscheck: a figure differs
EXIT_USAGE = 2  # bad option or path (also click's own usage errors)
EXIT_NO_INPUT = 3  # nothing usable: no traces found, or every file failed
EXIT_PARTIAL = 4  # a report was produced, but some rank is missing or was only partly readable
EXIT_HTA_FAILED = 5  # tracecomm crosscheck: HTA itself raised on the run (its exception, one line)
EXIT_INTERNAL = 70  # a bug in tracecomm (EX_SOFTWARE), and nothing else
EXIT_IO = 74  # the output could not be written: full disk, closed pipe, unwritable path (EX_IOERR)


def stderr(message: str) -> None:
    """One line on stderr; names read from inputs may hold control characters: made visible."""
    sys.stderr.write(f"tracecomm: {visible(message)}\n")


def fail(message: str, code: int) -> NoReturn:
    stderr(f"error: {message}")
    raise typer.Exit(code)
