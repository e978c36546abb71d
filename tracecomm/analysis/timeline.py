"""The one-step timeline (HTML report, ``--detail timeline``): which ranks and which step.

The median rank's most typical step, drawn on the fastest, median and slowest ranks (by median
step time) and on the worst flagged straggler, or on the ranks the user chose. Each rank's
lanes of every included step were taken in the first pass (``engine.views``): this picks."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from tracecomm.analysis.model import RankReport, RankResult, RankTimeline, RunTimeline
from tracecomm.analysis.report import Report
from tracecomm.engine.views import typical_step as typical_of


def run_timeline(
    report: Report, chosen: Sequence[int], results: Mapping[int, RankResult]
) -> RunTimeline:
    by_rank = {r.rank: r for r in report.ranks}
    roles = _timeline_roles(report, chosen)
    if not roles:
        return RunTimeline(None, (), "no rank has a complete step")
    anchor = report.summary.median_rank
    step = typical_step(by_rank[anchor]) if anchor in by_rank else None
    if step is None:
        return RunTimeline(None, (), "the median rank has no analyzed step")
    return RunTimeline(
        step,
        tuple(
            _rank_timeline(rank, role, step, results[rank])
            if rank in by_rank and rank in results
            else RankTimeline(rank, role, None, f"rank {rank} is not among the analyzed ranks")
            for rank, role in roles.items()
        ),
    )


def _timeline_roles(report: Report, chosen: Sequence[int]) -> dict[int, str]:
    if chosen:
        return dict.fromkeys(chosen, "chosen")
    order = report.summary.slowest_first
    if not order:
        return {}
    roles = {order[-1]: "fastest"}
    if report.summary.median_rank is not None:
        roles.setdefault(report.summary.median_rank, "median")
    roles.setdefault(order[0], "slowest")
    worst = [r.rank for r in (report.stragglers.ranks if report.stragglers else ()) if r.flagged]
    if worst:  # ranks are in order of root delay
        roles.setdefault(worst[0], "straggler")
    return roles


def typical_step(rank: RankReport) -> int | None:
    """The included step whose window is the (lower) median of the rank's."""
    return typical_of(rank.steps)


def _rank_timeline(rank: int, role: str, step: int, result: RankResult) -> RankTimeline:
    if result.views is None or not result.views.timelines:
        none = "no lanes of it: a rank read from a summary holds none"
        return RankTimeline(rank, role, None, none)
    found = next((t for t in result.views.timelines if t.step == step), None)
    reason = None if found is not None else f"no device work in step {step}"
    return RankTimeline(rank, role, found, reason)
