"""A saved ``analyze --format json`` document: the one loader every command reads it with
(``report``, ``check``, ``baseline``, ``compare``; metrics.md §18).

The document is untrusted input. It is read whole into the typed document
(``analysis.document.ReportDocument``: every field, no unknown one, each of its type and
bounds), its tool and schema version are checked, then its figures for physical sense
(``analysis.document_checks``: every window's parts adding up to it, median steps holding
their parts, MFU not negative, …). Anything else is a ``SavedReportError`` with one line naming
the file and the problem, never a traceback: the same line whichever command read it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from tracecomm.analysis import document as d
from tracecomm.analysis.document_checks import document_problem
from tracecomm.analysis.projection import ProjectedSize
from tracecomm.analysis.runrecord import (
    ProjectionRecord,
    RunRecord,
    StepRecord,
    model_record,
    recoverable_by,
)
from tracecomm.errors import UsageError

REPORT_SCHEMA_VERSION = d.SCHEMA_VERSION
_SNIFF_BYTES = 256
# the largest saved report read (a 4,096-rank analyze JSON with every step is ~100 MB)
MAX_SAVED_BYTES = 1 << 30


class SavedReportError(UsageError):
    """A file given as a saved analyze JSON that cannot be used."""


@dataclass(frozen=True)
class SavedReport:
    """A saved analyze document, read and checked."""

    path: Path
    document: d.ReportDocument

    def builtins(self) -> dict[str, Any]:
        """The document as JSON-ready values, keys in the order analyze wrote them."""
        out: dict[str, Any] = msgspec.to_builtins(self.document, str_keys=True)
        return out


_DECODER = msgspec.json.Decoder(d.ReportDocument)


class _Envelope(msgspec.Struct):
    """What a document that is not a readable analyze document says it is."""

    kind: Any = None
    schema_version: Any = None
    tool: Any = None


_ENVELOPE = msgspec.json.Decoder(_Envelope)
_KIND = re.compile(rb'^\{\s*"kind"\s*:\s*"(tracecomm-[a-z]+)"')
_SAVED = re.compile(rb'^\{\s*"schema_version"')


def saved_kind(path: Path) -> str | None:
    """What the first bytes of a file say it is: ``"analyze"`` for an analyze document
    (``{"schema_version"``), the kind of another tracecomm document (``tracecomm-baseline``,
    ``tracecomm-compare``, …), None for anything else (a Kineto trace starts
    ``{"schemaVersion"`` or with other keys)."""
    try:
        with path.open("rb") as handle:
            head = handle.read(_SNIFF_BYTES).lstrip()
    except OSError:
        return None
    other = _KIND.match(head)
    if other:
        return other.group(1).decode()
    return "analyze" if _SAVED.match(head) else None


def looks_saved(path: Path) -> bool:
    """A file to read with ``load_saved_report`` rather than as a trace: an analyze document,
    or another tracecomm document (which the loader refuses, in one line)."""
    return saved_kind(path) is not None


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
    problem = document_problem(doc)
    if problem:
        raise SavedReportError(f"{path}: impossible figures: {problem}")
    return SavedReport(path, doc)


def _not_readable(raw: bytes, exc: Exception) -> str:
    """Why a document did not decode: another kind of document, another tool, another schema
    version, or (the rest) what the decoder found."""
    try:
        envelope = _ENVELOPE.decode(raw)
    except (msgspec.DecodeError, msgspec.ValidationError):
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


def read_saved(path: Path, label: str) -> RunRecord:
    """The run of a saved analyze document, to compare. Raises ``SavedReportError``."""
    return saved_record(load_saved_report(path), label)


def saved_record(saved: SavedReport, label: str) -> RunRecord:
    doc = saved.document
    tp, st = doc.throughput, doc.stragglers
    flops = tp.flops if tp is not None else None
    energy = tp.energy if tp is not None else None
    replayed = st.recoverable_pct_replay if st is not None else None
    first_order = st.recoverable_pct if st is not None else None
    return RunRecord(
        label=label,
        source="analyze JSON",
        world_size=doc.summary.world_size,
        ranks_analyzed=doc.summary.ranks_analyzed,
        median_rank=doc.summary.median_rank,
        rate_steps=tuple(tp.steps) if tp is not None else (),
        steps=tuple(_steps(doc)),
        step_time_ns=tp.step_time_ns if tp is not None else None,
        device_count=tp.device_count if tp is not None else doc.summary.ranks_analyzed,
        model=model_record(
            flops.per_step if flops else None,
            flops.per_token if flops else None,
            flops.tokens_per_step if flops else None,
            flops.source if flops else None,
        ),
        tokens_per_s=tp.tokens_per_s if tp is not None else None,
        mfu=tp.mfu if tp is not None else None,
        recoverable_pct=replayed if replayed is not None else first_order,
        recoverable_by=recoverable_by(replayed, first_order),
        avg_power_w=energy.avg_power_w if energy is not None else None,
        energy_per_step_j=energy.energy_per_step_j if energy is not None else None,
        tokens_per_j=energy.tokens_per_j if energy is not None else None,
        partial=doc.partial,
        collectives=None,
        projection=_projection(doc.projection),
        warnings=tuple(doc.warnings),
        frameworks=tuple(f.label for f in doc.frameworks.detected) if doc.frameworks else (),
    )


def _steps(doc: d.ReportDocument) -> list[StepRecord]:
    out = []
    for rank in doc.ranks:
        if not rank.steps and rank.window is not None:
            w = rank.window
            out.append(StepRecord(rank.rank, None, None, w.figures, w.by_type, w.idle_by_cause))
        for s in rank.steps:
            if s.included and s.window is not None:
                w = s.window
                out.append(
                    StepRecord(
                        rank.rank, s.step, s.cpu_span_ns, w.figures, w.by_type, w.idle_by_cause
                    )
                )
    return out


def _projection(p: d.Projection | None) -> ProjectionRecord | str | None:
    if p is None:
        return (
            "the saved report holds no projection (write it with "
            "`tracecomm project RUN --to N,… -f json`)"
        )
    if p.reason is not None:
        return p.reason
    if p.sizes is None or p.measured_world is None or p.rank is None or p.step is None:
        return "the saved report's projection is incomplete"
    return ProjectionRecord(
        p.measured_world,
        p.scaling or "strong",
        p.rank,
        p.step,
        tuple(
            ProjectedSize(
                s.world_size,
                s.step_ns,
                s.compute_ns,
                s.comm_ns,
                s.exposed_comm_ns,
                s.exposed_comm_total_ns,
                s.relative_throughput,
                s.mfu,
            )
            for s in p.sizes
        ),
    )
