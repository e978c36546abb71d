"""What ``tracecomm export`` writes (metrics.md §17): which ranks and steps, each rank's events
of them (taken in the first pass when the command names both, else the chosen ranks read
again: ``engine.views``), its clock offset, the waits inside its collectives, and the markers
the trace shows as instant events.

Default ranks: the fastest, median and slowest (by median step time) and every flagged
straggler; default step: the median rank's typical step (``analysis.timeline``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

import polars as pl

from tracecomm.analysis.crossrank import Matching
from tracecomm.analysis.export_model import ExportedRank, Marker, TraceExport
from tracecomm.analysis.model import ExportReader, RankReport, RankResult, Side
from tracecomm.analysis.report import Report
from tracecomm.analysis.timeline import typical_step
from tracecomm.engine.export import RankExport
from tracecomm.text import ms

MAX_DEFAULT_STRAGGLERS = 8
__all__ = [
    "ExportedRank",
    "Marker",
    "TraceExport",
    "export_markers",
    "export_roles",
    "trace_export",
]


def trace_export(
    report: Report,
    side: Side,
    chosen_ranks: Sequence[int],
    chosen_steps: tuple[int | None, int | None] | None,
    reader: ExportReader | None,
) -> TraceExport:
    by_rank = {r.rank: r for r in report.ranks}
    roles = export_roles(report, chosen_ranks)
    steps = _steps(report, by_rank, chosen_steps)
    if not roles:
        return TraceExport((), (), (), "no analyzed rank")
    if not steps:
        reason = (
            "the run has no analyzed ProfilerStep (the export writes whole steps)"
            if not report.summary.steps
            else f"--export-steps selects none of the analyzed steps "
            f"({report.summary.steps[0]}–{report.summary.steps[-1]})"
        )
        return TraceExport((), (), (), reason)
    taken = _events(by_rank, side.results, list(roles), steps, reader)
    out = []
    for rank, role in roles.items():
        r = by_rank[rank]
        offset = _offset(report, rank)
        got = taken[rank]
        if isinstance(got, RankExport) and not got.windows:
            timeline = r.timeline.upper()
            got = f"no device work in step(s) {', '.join(map(str, steps))} ({timeline} timeline)"
        events = got if isinstance(got, RankExport) else None
        out.append(
            ExportedRank(
                rank,
                role,
                r.host,
                r.devices,
                offset,
                events,
                _waits(side.matching, rank, steps, offset),
                reason=got if isinstance(got, str) else None,
            )
        )
    return TraceExport(steps, tuple(out), export_markers(report, roles))


def _events(
    by_rank: Mapping[int, RankReport],
    results: Mapping[int, RankResult],
    ranks: Sequence[int],
    steps: tuple[int, ...],
    reader: ExportReader | None,
) -> dict[int, RankExport | str]:
    """Each exported rank's events of ``steps``: as the first pass took them (the command named
    the ranks and steps), else read again, the ranks' files each once."""
    out: dict[int, RankExport | str] = {}
    again = {}
    for rank in ranks:
        result = results.get(rank)
        views = result.views if result is not None else None
        first = views.export if views is not None else None
        if first is not None and _same_steps(first, by_rank[rank], steps):
            out[rank] = replace(first, rank=rank)
        elif result is not None and result.origin is not None and reader is not None:
            again[rank] = result.origin
        else:
            out[rank] = "no events of it to export: a rank read from a summary holds none"
    if again:
        assert reader is not None
        out |= reader(again, steps)
    return out


def _same_steps(export: RankExport, rank: RankReport, steps: tuple[int, ...]) -> bool:
    """The first pass took the steps the export writes (it took every step of the range the
    rank ran; the export writes those some rank analyzed)."""
    ran = {s.step for s in rank.steps if s.window is not None}
    return [w.step for w in export.windows] == [s for s in steps if s in ran]


def export_roles(report: Report, chosen: Sequence[int]) -> dict[int, str]:
    """Rank -> why it is exported, in the order the trace lists them."""
    analyzed = {r.rank for r in report.ranks}
    if chosen:
        return {r: "chosen" for r in chosen if r in analyzed}
    order = report.summary.slowest_first
    if not order:
        return {}
    roles: dict[int, list[str]] = {order[-1]: ["fastest"]}
    if report.summary.median_rank is not None:
        roles.setdefault(report.summary.median_rank, []).append("median")
    roles.setdefault(order[0], []).append("slowest")
    flagged = [r.rank for r in (report.stragglers.ranks if report.stragglers else ()) if r.flagged]
    for rank in flagged[:MAX_DEFAULT_STRAGGLERS]:
        roles.setdefault(rank, []).append("straggler")
    return {rank: "/".join(names) for rank, names in roles.items()}


def export_markers(report: Report, roles: dict[int, str]) -> tuple[Marker, ...]:
    """The instant events of the trace: one per finding (metrics.md §14), on each exported rank
    it names (on the whole trace when it names none of them), then the run's notes and
    warnings."""
    markers: list[Marker] = []
    for f in report.findings:
        cost = f" — {ms(f.cost_ns)} ms per step ({f.cost_pct:.1f} %)" if f.cost_ns else ""
        text = f"{f.title}{cost}: {f.advice[0]}" if f.advice else f"{f.title}{cost}"
        severity = "warning" if f.severity != "uncosted" else "info"
        on = [r for r in f.ranks if r in roles]
        if on and len(on) < len(roles):
            markers += [Marker(f.kind, text, rank=r, severity=severity) for r in on]
        else:
            markers.append(Marker(f.kind, text, severity=severity))
    for note in report.notes:
        if set(note.ranks) & set(roles):
            markers.append(Marker("note", note.text))
    markers.extend(Marker("warning", w, severity="warning") for w in report.warnings)
    return tuple(markers)


def _steps(
    report: Report,
    by_rank: dict[int, RankReport],
    chosen: tuple[int | None, int | None] | None,
) -> tuple[int, ...]:
    anchor = report.summary.median_rank
    median = by_rank.get(anchor) if anchor is not None else None
    if chosen is None:
        step = typical_step(median) if median is not None else None
        return () if step is None else (step,)
    lo, hi = chosen
    return tuple(
        s for s in report.summary.steps if (lo is None or s >= lo) and (hi is None or s <= hi)
    )


def _offset(report: Report, rank: int) -> int:
    cr = report.cross_rank
    if cr is None or not cr.clocks.aligned:
        return 0
    for clock in cr.clocks.hosts:
        if rank in clock.ranks:
            return clock.offset_ns or 0
    return 0


def _waits(cr: Matching | None, rank: int, steps: tuple[int, ...], offset: int) -> pl.DataFrame:
    """Per collective of the rank in ``steps``: how long it waited inside the kernel for the
    last member to arrive (§6: latest start − own start), on its own clock."""
    schema = pl.Schema({"start_ns": pl.Int64(), "wait_ns": pl.Int64(), "kind": pl.String()})
    if cr is None:
        return pl.DataFrame(schema=schema)
    parts = []
    aligned = cr.aligned
    if aligned.height:
        per = aligned.with_columns(
            (pl.col("start_ns").max().over("pg", "key") - pl.col("start_ns")).alias("wait_ns")
        ).filter((pl.col("rank") == rank) & pl.col("step").is_in(list(steps)))
        parts.append(per.select("start_ns", "wait_ns", pl.col("coll_type").alias("kind")))
    p2p = cr.p2p_waits
    if p2p.height:
        mine = p2p.filter((pl.col("rank") == rank) & pl.col("step").is_in(list(steps)))
        parts.append(
            mine.select(
                "start_ns", pl.col("wait").alias("wait_ns"), pl.lit("SendRecv").alias("kind")
            )
        )
    if not parts:
        return pl.DataFrame(schema=schema)
    waits = pl.concat([p.cast(schema) for p in parts]).filter(pl.col("wait_ns") > 0)
    return waits.with_columns(pl.col("start_ns") + offset).sort("start_ns")
