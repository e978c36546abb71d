"""A saved ``analyze --format json`` document: the one loader every command reads it with
(``report``, ``check``, ``baseline``, ``compare``; metrics.md §18).

The document is untrusted input. It is read whole into the Report itself
(``analysis.report.Report``: every field, no unknown one, each of its type and bounds), its
tool and schema version are checked, then its figures for physical sense
(``analysis.document_checks``: every window's parts adding up to it, median steps holding
their parts, MFU not negative, …). Anything else is a ``SavedReportError`` with one line naming
the file and the problem, never a traceback: the same line whichever command read it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from tracecomm.analysis.document_checks import document_problem
from tracecomm.analysis.report import Report
from tracecomm.doc import SCHEMA_VERSION
from tracecomm.errors import UsageError

REPORT_SCHEMA_VERSION = SCHEMA_VERSION
# the largest saved report read (a 4,096-rank analyze JSON with every step is ~100 MB)
MAX_SAVED_BYTES = 1 << 30


class SavedReportError(UsageError):
    """A file given as a saved analyze JSON that cannot be used."""


@dataclass(frozen=True)
class SavedReport:
    """A saved analyze document, read and checked."""

    path: Path
    report: Report

    def builtins(self) -> dict[str, Any]:
        """The document as JSON-ready values, keys in the order analyze wrote them."""
        out: dict[str, Any] = msgspec.to_builtins(self.report, str_keys=True)
        return out


_DECODER = msgspec.json.Decoder(Report)


class _Envelope(msgspec.Struct):
    """What a document that is not a readable analyze document says it is."""

    kind: Any = None
    schema_version: Any = None
    tool: Any = None


_ENVELOPE = msgspec.json.Decoder(_Envelope)


def load_saved_report(path: Path) -> SavedReport:
    """The saved analyze document at ``path``, typed and checked. Raises ``SavedReportError``."""
    try:
        size = path.stat().st_size
        if size > MAX_SAVED_BYTES:
            raise SavedReportError(f"{path}: {size:,} bytes: larger than a saved report can be")
        raw = path.read_bytes()
    except OSError as exc:
        raise SavedReportError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        doc = _DECODER.decode(raw)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise SavedReportError(f"{path}: {_not_readable(raw, exc)}") from None
    except RecursionError:  # a value nested past what a document holds (options are free JSON)
        raise SavedReportError(
            f"{path}: not an analyze JSON document (nested too deeply)"
        ) from None
    if doc.schema_version != REPORT_SCHEMA_VERSION:
        raise SavedReportError(f"{path}: {_not_readable(raw, ValueError())}")
    problem = document_problem(doc)
    if problem:
        raise SavedReportError(f"{path}: impossible figures: {problem}")
    return SavedReport(path, doc)


def _not_readable(raw: bytes, exc: Exception) -> str:
    """Why a document did not decode: another kind of document, another tool, another schema
    version, or (the rest) what the decoder found."""
    try:
        envelope = _ENVELOPE.decode(raw)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        return f"not an analyze JSON document ({exc})"
    if isinstance(envelope.kind, str) and envelope.kind.startswith("tracecomm-"):
        return (
            f"a {envelope.kind} document holds no per-step figures: give the run folder, its "
            "summaries or its `analyze --format json` document"
        )
    tool = envelope.tool.get("name") if isinstance(envelope.tool, dict) else None
    if isinstance(tool, str) and tool != "tracecomm":
        return f"not a tracecomm document (tool {tool!r})"
    version = envelope.schema_version
    if type(version) is int and version != REPORT_SCHEMA_VERSION:
        return (
            f"report schema version {version}; this tracecomm reads "
            f"{REPORT_SCHEMA_VERSION}: analyze the run again"
        )
    return f"not an analyze JSON document ({exc})"
