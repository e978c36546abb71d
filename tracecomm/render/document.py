"""The Report as one JSON-ready document (schema: tracecomm/schema/report.schema.json).

Times are integer nanoseconds (``*_ns``); percentages are floats or null when undefined.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, Any

import msgspec

from tracecomm.analysis.crossrank import CrossRank
from tracecomm.analysis.document import SCHEMA_VERSION
from tracecomm.analysis.model import RankReport, Report
from tracecomm.analysis.projection import Projection
from tracecomm.analysis.stragglers import Stragglers
from tracecomm.engine.model import Figures, KernelStats, StepFigures, WindowFigures

if TYPE_CHECKING:
    pass


def report_document(report: Report, top: int | None = None) -> dict[str, Any]:
    """``top``: list only that many straggler ranks (``--top``; all by default)."""
    s = report.summary
    return {
        "schema_version": SCHEMA_VERSION,
        "tool": {"name": "tracecomm", "version": report.tool_version},
        "inputs": list(report.inputs),
        "options": report.options,
        "summary": {
            "ranks_analyzed": s.ranks_analyzed,
            "world_size": s.world_size,
            "timelines": list(s.timelines),
            "steps": list(s.steps),
            "median_rank": s.median_rank,
            "worst_rank": s.worst_rank,
            "worst_by": s.worst_by,
            "slowest_first": list(s.slowest_first),
            "total": figures_document(s.total),
            "idle_by_cause": s.idle_by_cause,
            "idle_by_cause_pct": s.idle_by_cause_pct,
        },
        "ranks": [_rank(r) for r in report.rank_reports],
        "by_type": [
            {
                "coll_type": t.coll_type,
                "kernels": t.kernels,
                "ranks": t.ranks,
                "comm_ns": t.comm_ns,
                "exposed_comm_ns": t.exposed_comm_ns,
            }
            for t in report.type_summaries
        ],
        "missing_ranks": [
            {"rank": m.rank, "path": m.path, "reason": m.reason} for m in report.missing
        ],
        "absent_ranks": list(report.absent_ranks),
        "skipped_files": [{"path": f.path, "reason": f.reason} for f in report.skipped],
        "warnings": list(report.warnings),
        "notes": [{"text": n.text, "ranks": list(n.ranks)} for n in report.notes],
        "cross_rank": _cross_rank(report.cross_rank),
        "stragglers": _stragglers(report.stragglers, top),
        "throughput": None if report.throughput is None else part(report.throughput),
        "nccl": None if report.nccl is None else part(report.nccl),
        "bandwidth": None if report.bandwidth is None else part(report.bandwidth),
        "hta_compat": None if report.hta_compat is None else [part(f) for f in report.hta_compat],
        "timeline": None if report.timeline is None else part(report.timeline),
        "projection": projection_document(report.projection),
        "pipelines": [part(p) for p in report.pipelines],
        "kernels": None if report.kernels is None else part(report.kernels),
        "step_parts": None if report.step_parts is None else part(report.step_parts),
        "findings": [part(f) for f in report.findings],
        "partial": report.partial,
        "all_to_all": None if report.all_to_all is None else part(report.all_to_all),
        "frameworks": None if report.frameworks is None else part(report.frameworks),
    }


_PROJECTION_FIELDS = (
    "measured_world",
    "rank",
    "step",
    "scaling",
    "fits",
    "sizes",
    "turning_point",
    "assumptions",
    "notes",
)


def projection_document(projection: Projection | str | None) -> dict[str, Any] | None:
    """metrics.md §11; with only ``reason`` set when no projection could be made."""
    if projection is None:
        return None
    if isinstance(projection, str):
        return {"reason": projection} | dict.fromkeys(_PROJECTION_FIELDS)
    return {"reason": None} | part(projection)


def part(value: Any) -> Any:
    """A typed part of the report (a Struct, or a dataclass holding some) as JSON values."""
    return plain(value if isinstance(value, msgspec.Struct) else asdict(value))


def plain(value: Any) -> Any:
    """Tuples as lists, all the way down (JSON arrays for every consumer, schema checks too)."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, msgspec.Struct):
        return plain(msgspec.to_builtins(value, str_keys=True))
    return value


def _stragglers(st: Stragglers | None, top: int | None) -> dict[str, Any] | None:
    if st is None:
        return None
    w = st.what_if
    decided = w is not None and w.reproduces
    return {
        "ranks": [part(r) for r in st.ranks[:top]],
        "flagged": list(st.flagged),
        "flag_basis": st.flag_basis,
        "median_step_ns": st.median_step_ns,
        "threshold_ns": st.threshold_ns,
        "step_if_no_straggler_ns": st.step_if_no_straggler_ns,
        "recoverable_pct": st.recoverable_pct,
        "recoverable_basis": st.recoverable_basis,
        "first_order_step_ns": st.first_order_step_ns,
        "first_order_recoverable_pct": st.first_order_recoverable_pct,
        "step_if_no_straggler_replay_ns": w.step_if_fixed_ns if decided and w else None,
        "recoverable_pct_replay": w.recoverable_pct if decided and w else None,
        "replay": _replay(st),
        "candidates": [part(c) for c in (w.candidates if decided and w else ())][:top],
        "by_group_type": [part(g) for g in st.by_group_type],
        "instances": [part(i) for i in st.instances],
        "delay_by_step": [
            {
                "rank": rank,
                "step": step,
                "delay_caused_ns": st.delay_by_step.get(rank, {}).get(step, 0),
                "root_delay_ns": st.root_delay_by_step.get(rank, {}).get(step, 0),
            }
            for rank in sorted({*st.delay_by_step, *st.root_delay_by_step})
            for step in sorted(
                {*st.delay_by_step.get(rank, {}), *st.root_delay_by_step.get(rank, {})}
            )
        ],
        "slowest_instances": [part(i) for i in st.slowest],  # last, as the typed document
    }


def _replay(st: Stragglers) -> dict[str, Any] | None:
    """The replay's self-check and its all-flagged what-if (metrics.md §6)."""
    w = st.what_if
    if w is None:
        return None
    return {
        "measured_step_ns": w.measured_step_ns,
        "step_ns": w.replayed_step_ns,
        "reproduction_error_pct": w.reproduction_error_pct,
        "tolerance_pct": w.tolerance_pct,
        "reproduces": w.reproduces,
        "shared_waits": w.shared_waits,
        "step_if_no_straggler_ns": w.step_if_fixed_ns,
        "recoverable_pct": w.recoverable_pct,
        "by_peers": list(w.by_peers),
        "by_scaling": list(w.by_scaling),
        "reason": w.reason,
        "mean_step_ns": w.mean_step_ns,
    }


def _cross_rank(cr: CrossRank | None) -> dict[str, Any] | None:
    if cr is None:
        return None
    return {
        "instances": cr.instances,
        "matched": cr.matched,
        "unmatched": cr.unmatched,
        "point_to_point": cr.point_to_point,
        "p2p_paired": cr.p2p_paired,
        "p2p_unpaired": cr.p2p_unpaired,
        "unsynchronized": cr.unsynchronized,
        "keyed_by": cr.keyed_by,
        "mismatches": [
            {
                "group": m.group,
                "members": list(m.members),
                "unmatched": m.unmatched,
                "first_instance": m.first_instance,
                "missing_ranks": list(m.missing_ranks),
                "sizes_disagree": m.sizes_disagree,
                "counts": {str(r): n for r, n in m.counts.items()},
            }
            for m in cr.mismatches
        ],
        "clocks": {
            "aligned": cr.clock_aligned,
            "reference_rank": cr.reference_rank,
            "hosts": [part(c) | {"ranks": list(c.ranks)} for c in cr.clocks],
        },
    }


def kernels_document(stats: KernelStats | None) -> dict[str, Any] | None:
    """A rank's kernel view (metrics.md §15–§16), the short kernels' shares included."""
    return None if stats is None else plain(stats)


def figures_document(figures: Figures | None) -> dict[str, Any] | None:
    return None if figures is None else plain(figures)


def _window(window: WindowFigures | None) -> dict[str, Any] | None:
    if window is None:
        return None
    return {
        "start_ns": window.start_ns,
        "end_ns": window.end_ns,
        "figures": figures_document(window.figures),
        "by_type": [
            {
                "coll_type": t.coll_type,
                "kernels": t.kernels,
                "comm_ns": t.comm_ns,
                "exposed_comm_ns": t.exposed_comm_ns,
            }
            for t in window.by_type
        ],
        "energy": plain(window.energy),
        "idle_by_cause": window.idle_by_cause,
    }


def _step(step: StepFigures) -> dict[str, Any]:
    return {
        "step": step.step,
        "complete": step.complete,
        "included": step.included,
        "incomplete_reason": step.incomplete_reason,
        "cpu_span_ns": step.cpu_span_ns,
        "window": _window(step.window),
    }


def _rank(rank: RankReport) -> dict[str, Any]:
    bd = rank.breakdown
    summary = rank.step_summary
    return {
        "rank": rank.rank,
        "rank_source": rank.rank_source,
        "path": rank.path,
        "host": rank.host,
        "devices": list(rank.devices),
        "timeline": bd.timeline,
        "partial": rank.partial,
        "comm_kernels": bd.comm_kernels,
        "device_events": bd.device_events,
        "unlinked_events": bd.unlinked_events,
        "window": _window(bd.window),
        "steps_included": summary.steps if summary else 0,
        "step_median": plain(summary.median) if summary else None,
        "step_mean": plain(summary.mean) if summary else None,
        "step_worst": (
            {"step": summary.worst_step, "figures": figures_document(summary.worst)}
            if summary
            else None
        ),
        "steps": [_step(s) for s in bd.steps],
        "observed": None if bd.observed is None else plain(bd.observed),
        "power_log": rank.power_source,
        "kernels": kernels_document(bd.kernels),
        "notes": list(bd.notes),
    }
