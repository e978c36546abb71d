"""The one-step timeline (HTML report, ``--detail timeline``): which ranks and which step.

The median rank's most typical step, drawn on the fastest, median and slowest ranks (by median
step time) and on the worst flagged straggler, or on the ranks the user chose. Only those
ranks' files are read again (by the run: ``RankFiles``)."""

from __future__ import annotations

from collections.abc import Sequence

from tracecomm.analysis.model import RankFiles, RankReport, RankTimeline, RunTimeline
from tracecomm.analysis.report import Report


def run_timeline(report: Report, chosen: Sequence[int], files: RankFiles) -> RunTimeline:
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
            files.step_timeline(by_rank[rank], role, step)
            if rank in by_rank
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
    steps = sorted(
        (s.window.figures.window_ns, s.step) for s in rank.included_steps if s.window is not None
    )
    return steps[(len(steps) - 1) // 2][1] if steps else None
