"""Errors raised by the library; only ``cli.py`` turns them into messages and exit codes."""

from __future__ import annotations

from pathlib import Path


class TracecommError(Exception):
    """Base class: the message is one line a user can act on."""


class UsageError(TracecommError):
    """The command line asks for something impossible (missing path, bad option value)."""


class TraceError(TracecommError):
    """One input file cannot be used; other ranks may still be analyzed."""

    def __init__(self, path: Path | str, reason: str) -> None:
        self.path = str(path)
        self.reason = reason
        super().__init__(f"{self.path}: {reason}")

    def __reduce__(self) -> tuple[type, tuple[str, str]]:
        # rebuilt from (path, reason), so it survives a trip back from a worker process
        return type(self), (self.path, self.reason)


class NotATrace(TraceError):
    """A JSON file that is not a Kineto trace (no ``traceEvents``): skipped in folder scans."""


class OutputError(TracecommError):
    """What was asked for could not be written (full disk, unwritable folder)."""


class NoUsableInput(TracecommError):
    """Nothing left to analyze after discovery and parsing."""
