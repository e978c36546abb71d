"""Command line: thin commands over one shared flow (``cli.flow``): parse options into the
request, run the analysis, pick a renderer by name, map errors to exit codes.

Heavy modules load inside the commands, so that ``tracecomm --help`` stays fast.
"""

from __future__ import annotations

import os
import sys

from tracecomm import collector
from tracecomm.cli.app import app
from tracecomm.cli.commands import register
from tracecomm.cli.exits import (
    EXIT_HTA_FAILED,
    EXIT_INTERNAL,
    EXIT_IO,
    EXIT_NO_INPUT,
    EXIT_OK,
    EXIT_PARTIAL,
    EXIT_REGRESSION,
    EXIT_USAGE,
    stderr,
)

__all__ = [
    "EXIT_HTA_FAILED",
    "EXIT_INTERNAL",
    "EXIT_IO",
    "EXIT_NO_INPUT",
    "EXIT_OK",
    "EXIT_PARTIAL",
    "EXIT_REGRESSION",
    "EXIT_USAGE",
    "app",
    "main",
]
register()


def main() -> None:
    """Console entry point: no traceback reaches the user unless TRACECOMM_DEBUG is set."""
    try:
        app()
    except KeyboardInterrupt:
        sys.exit(130)
    except BrokenPipeError:  # stderr itself closed: nothing left to say it on
        sys.exit(EXIT_IO)
    except SystemExit:
        raise
    except Exception as exc:
        if os.environ.get("TRACECOMM_DEBUG"):
            raise
        stderr(
            f"internal error: {type(exc).__name__}: {exc} "
            "(a bug; rerun with TRACECOMM_DEBUG=1 for the traceback and please report it)"
        )
        sys.exit(EXIT_INTERNAL)
    finally:
        collector.before_exit()  # whatever is printed is written: the last pass frees nothing
