"""What a rank's later views need, taken from the breakdown's frames in the one pass over its
events: the projection's typical step, the HTML timeline's lanes of every included step, the
export's events. The analysis picks from them once it knows which ranks and steps it shows
(the median rank, the slowest, the flagged stragglers); no trace is read twice.

What is taken is bounded: a timeline merges work closer than its resolution (at most a few
thousand segments a lane and step), the replay keeps eight columns of one step, and the
export's events are taken when ``--export-ranks`` and ``--export-steps`` name them. When the
analysis chooses the export's ranks (the fastest, median, slowest and flagged ranks), only
those are read again, once each (``run.worker.exports_of_file``): every rank's events of every
step, kept until the choice, measured a quarter of the trace's size per rank.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import polars as pl

from tracecomm.engine.export import RankExport, export_steps
from tracecomm.engine.model import StepFigures
from tracecomm.engine.options import ViewRequest
from tracecomm.engine.timeline import StepTimeline, replay_work, step_timelines
from tracecomm.ingest.discover import rank_from_filename
from tracecomm.ingest.model import RankEvents


@dataclass(frozen=True)
class RankViews:
    """One rank's part of the later views. ``replay``: its typical step's device work as the
    projection replays it (``timeline.REPLAY_COLUMNS``), the step being ``typical_step``."""

    typical_step: int | None
    replay: pl.DataFrame | None = field(default=None, compare=False, repr=False)
    timelines: tuple[StepTimeline, ...] = ()  # every included step with device work
    export: RankExport | None = None  # its events of the steps --export-steps names


def typical_step(steps: Sequence[StepFigures]) -> int | None:
    """The included step whose window is the (lower) median of the rank's: the step the
    timeline, the export and the projection show."""
    windows = sorted(
        (s.window.figures.window_ns, s.step) for s in steps if s.included and s.window is not None
    )
    return windows[(len(windows) - 1) // 2][1] if windows else None


def rank_views(
    rank: RankEvents,
    linked: pl.DataFrame,
    comm: pl.DataFrame,
    windows: pl.DataFrame,
    steps: Sequence[StepFigures],
    request: ViewRequest,
) -> RankViews:
    """``linked``, ``comm``, ``windows``: the breakdown's device frame, comm rows and step
    windows; ``steps``: its step figures."""
    typical = typical_step(steps)
    included = [s.step for s in steps if s.included and s.window is not None]
    return RankViews(
        typical_step=typical,
        replay=replay_work(linked, comm, typical) if typical is not None else None,
        timelines=step_timelines(linked, windows, included) if request.timelines else (),
        export=_export(rank, linked, comm, windows, request),
    )


def _export(
    rank: RankEvents,
    linked: pl.DataFrame,
    comm: pl.DataFrame,
    windows: pl.DataFrame,
    request: ViewRequest,
) -> RankExport | None:
    """The rank's events of the chosen steps, when the command names its ranks and steps."""
    if not request.export or not request.export_ranks or request.export_steps is None:
        return None
    # the rank the analysis gives it (its assignment keeps each claim that no other file makes)
    claim = rank.meta.rank if rank.meta.rank is not None else rank_from_filename(rank.path)
    if claim is not None and claim not in request.export_ranks:
        return None
    lo, hi = request.export_steps
    # every step in the range it launched work in: the analysis writes those of them that
    # some rank analyzed (``analysis.export``), and reads the rank again when they differ
    ran = windows.filter(pl.col("start_ns").is_not_null())["step"].to_list()
    wanted = [s for s in ran if (lo is None or s >= lo) and (hi is None or s <= hi)]
    return export_steps(rank, linked, comm, windows, claim if claim is not None else -1, wanted)
