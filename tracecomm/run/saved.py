"""A saved ``analyze --format json`` document as a run to compare (metrics.md §18).

The document is untrusted input: only the fields a comparison reads are decoded, typed
(msgspec), and checked for physical sense the way a summary is (every window's parts whole,
not negative and adding up to it; shares in 0–100; MFU and times not negative). Anything else
is a ``SavedReportError`` with one line naming the file and the problem, never a traceback.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import msgspec

from tracecomm.analysis.projection import ProjectedSize
from tracecomm.analysis.runrecord import (
    ProjectionRecord,
    RunRecord,
    StepRecord,
    model_record,
    recoverable_by,
)
from tracecomm.engine.idle import IDLE_CAUSES
from tracecomm.engine.model import Figures, TypeFigures
from tracecomm.errors import UsageError

REPORT_SCHEMA_VERSION = 1  # render.document.SCHEMA_VERSION (run may not import render)
_SNIFF_BYTES = 256
# the largest saved report read (a 4,096-rank analyze JSON with every step is ~100 MB)
MAX_SAVED_BYTES = 1 << 30


class SavedReportError(UsageError):
    """A file given as a saved analyze JSON that cannot be used."""


class _Figures(msgspec.Struct):
    window_ns: int
    compute_ns: int
    comm_ns: int
    overlapped_comm_ns: int
    exposed_comm_ns: int
    exposed_memory_ns: int
    idle_ns: int


class _Type(msgspec.Struct):
    coll_type: str
    kernels: int
    comm_ns: int
    exposed_comm_ns: int


class _Window(msgspec.Struct):
    figures: _Figures
    by_type: list[_Type]
    idle_by_cause: dict[str, int] | None = None


class _Step(msgspec.Struct):
    step: int
    included: bool
    window: _Window | None
    cpu_span_ns: int | None = None


class _Rank(msgspec.Struct):
    rank: int
    window: _Window | None
    steps: list[_Step]


class _Summary(msgspec.Struct):
    ranks_analyzed: int
    world_size: int | None
    median_rank: int | None


class _Flops(msgspec.Struct):
    per_step: float
    per_token: float | None = None
    tokens_per_step: int | None = None
    source: str | None = None


class _Energy(msgspec.Struct):
    energy_per_step_j: float
    avg_power_w: float
    tokens_per_j: float | None = None


class _Throughput(msgspec.Struct):
    steps: list[int]
    step_time_ns: int | None
    device_count: int
    flops: _Flops | None = None
    tokens_per_s: float | None = None
    mfu: float | None = None
    energy: _Energy | None = None


class _Stragglers(msgspec.Struct):
    recoverable_pct: float | None = None
    recoverable_pct_replay: float | None = None


class _Size(msgspec.Struct):
    world_size: int
    step_ns: int
    compute_ns: int
    comm_ns: dict[str, int]
    exposed_comm_ns: dict[str, int]
    exposed_comm_total_ns: int
    relative_throughput: float
    mfu: float | None = None


class _Projection(msgspec.Struct):
    reason: str | None = None
    measured_world: int | None = None
    rank: int | None = None
    step: int | None = None
    scaling: str | None = None
    sizes: list[_Size] | None = None


class _Tool(msgspec.Struct):
    name: str


class _Document(msgspec.Struct):
    schema_version: int
    tool: _Tool
    summary: _Summary
    ranks: list[_Rank]
    throughput: _Throughput | None = None
    stragglers: _Stragglers | None = None
    projection: _Projection | None = None
    partial: bool = False
    warnings: list[str] = msgspec.field(default_factory=list)


_DECODER = msgspec.json.Decoder(_Document)


_OTHER_KIND = re.compile(rb'^\{\s*"kind"\s*:\s*"(tracecomm-[a-z]+)"')


def looks_saved(path: Path) -> bool:
    """A file that starts like an analyze document (``{"schema_version"``): Kineto traces start
    ``{"schemaVersion"`` or with other keys, and are read as traces. Raises
    ``SavedReportError`` for another tracecomm document (a baseline, a comparison): it holds
    no per-step figures to compare."""
    try:
        with path.open("rb") as handle:
            head = handle.read(_SNIFF_BYTES).lstrip()
    except OSError:
        return False
    other = _OTHER_KIND.match(head)
    if other:
        kind = other.group(1).decode()
        raise SavedReportError(
            f"{path}: a {kind} document holds no per-step figures to compare: give the run "
            "folder, its summaries or its `analyze --format json` document"
        )
    return head[:1] == b"{" and head[1:].lstrip().startswith(b'"schema_version"')


def read_saved(path: Path, label: str) -> RunRecord:
    """The run of a saved analyze document. Raises ``SavedReportError``."""
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
        raise SavedReportError(f"{path}: not an analyze JSON document ({exc})") from None
    if doc.tool.name != "tracecomm":
        raise SavedReportError(f"{path}: not a tracecomm document (tool {doc.tool.name!r})")
    if doc.schema_version != REPORT_SCHEMA_VERSION:
        raise SavedReportError(
            f"{path}: report schema version {doc.schema_version}; this tracecomm reads "
            f"{REPORT_SCHEMA_VERSION}: analyze the run again"
        )
    problem = _problem(doc)
    if problem:
        raise SavedReportError(f"{path}: impossible figures: {problem}")
    return _record(doc, label)


def _problem(doc: _Document) -> str | None:
    s = doc.summary
    if s.ranks_analyzed < 1 or (s.world_size is not None and s.world_size < 1):
        return "no analyzed rank"
    for rank in doc.ranks:
        windows = [rank.window, *(st.window for st in rank.steps)]
        for w in (w for w in windows if w is not None):
            f = w.figures
            parts = (f.compute_ns, f.exposed_comm_ns, f.exposed_memory_ns, f.idle_ns)
            values = (f.window_ns, f.comm_ns, f.overlapped_comm_ns, *parts)
            if min(values) < 0 or sum(parts) != f.window_ns or f.overlapped_comm_ns > f.comm_ns:
                return f"rank {rank.rank}: a window whose figures do not add up"
            if any(min(t.kernels, t.comm_ns, t.exposed_comm_ns) < 0 for t in w.by_type):
                return f"rank {rank.rank}: a negative figure by collective type"
            causes = w.idle_by_cause
            if causes is not None and (
                min(causes.values(), default=0) < 0
                or sum(causes.values()) != f.idle_ns
                or not set(causes) <= set(IDLE_CAUSES)
            ):
                return f"rank {rank.rank}: idle causes that do not add up to the idle time"
        for st in rank.steps:
            if st.cpu_span_ns is not None and st.cpu_span_ns < 0:
                return f"rank {rank.rank}: a negative step span"
    tp = doc.throughput
    if tp is not None:
        if tp.step_time_ns is not None and tp.step_time_ns <= 0:
            return f"step_time_ns {tp.step_time_ns}"
        if tp.device_count < 1:
            return f"device_count {tp.device_count}"
        for name in ("tokens_per_s", "mfu"):
            if not _non_negative(getattr(tp, name)):
                return f"{name} {getattr(tp, name)!r}"
        if tp.flops is not None and not (
            _non_negative(tp.flops.per_step) and _non_negative(tp.flops.per_token)
        ):
            return "negative model FLOPs"
        e = tp.energy
        if e is not None and not all(
            _non_negative(v) for v in (e.energy_per_step_j, e.avg_power_w, e.tokens_per_j)
        ):
            return "negative energy figures"
    shares = doc.stragglers
    if shares is not None:
        for value in (shares.recoverable_pct, shares.recoverable_pct_replay):
            if value is not None and not (_non_negative(value) and value <= 100):
                return f"recoverable share {value!r} outside 0–100 %"
    p = doc.projection
    if p is not None and p.sizes:
        for size in p.sizes:
            if min(size.world_size - 1, size.step_ns, size.exposed_comm_total_ns) < 0:
                return "a projected size with negative figures"
            if not _non_negative(size.relative_throughput) or not _non_negative(size.mfu):
                return "a projected size with a negative throughput or MFU"
    return None


def _non_negative(value: float | None) -> bool:
    return value is None or (math.isfinite(value) and value >= 0)


def _record(doc: _Document, label: str) -> RunRecord:
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
    )


def _figures(w: _Window) -> tuple[Figures, tuple[TypeFigures, ...]]:
    f = w.figures
    return (
        Figures(
            f.window_ns,
            f.compute_ns,
            f.comm_ns,
            f.overlapped_comm_ns,
            f.exposed_comm_ns,
            f.exposed_memory_ns,
            f.idle_ns,
        ),
        tuple(TypeFigures(t.coll_type, t.kernels, t.comm_ns, t.exposed_comm_ns) for t in w.by_type),
    )


def _steps(doc: _Document) -> list[StepRecord]:
    out = []
    for rank in doc.ranks:
        if not rank.steps and rank.window is not None:
            figures, types = _figures(rank.window)
            out.append(StepRecord(rank.rank, None, None, figures, types, rank.window.idle_by_cause))
        for s in rank.steps:
            if s.included and s.window is not None:
                figures, types = _figures(s.window)
                out.append(
                    StepRecord(
                        rank.rank, s.step, s.cpu_span_ns, figures, types, s.window.idle_by_cause
                    )
                )
    return out


def _projection(p: _Projection | None) -> ProjectionRecord | str | None:
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
