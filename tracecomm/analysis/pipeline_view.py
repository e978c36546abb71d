"""Pipeline view (metrics.md §10): stages and micro-batches from the send/recv pattern, the
measured bubble per stage next to the textbook 1F1B bubble (p − 1) / (m + p − 1).

A pipeline is the chain of send/recv peers (chains.py), first stage first, however its
send/recv groups are named (one per pipeline, or one per adjacent stage pair and direction).
Per step, on the clock-aligned timelines: the pipeline's span runs from the first compute
kernel any stage launched in the step to the last one's end, and a stage's bubble is the share
of that span in which it ran no compute. (On GPU traces the waiting of a pipeline sits inside
NCCL receive kernels, which start early and spin, so the idle causes alone would miss most of
it.) Micro-batches are the sends from stage 0 to stage 1 per step.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Annotated

import polars as pl
from msgspec import Meta, structs

from tracecomm.analysis.crossrank import Matching
from tracecomm.analysis.rank import RankReport
from tracecomm.doc import Doc, NonNegative
from tracecomm.engine.model import RankBreakdown

_IMBALANCE = 0.05  # stage compute this far above the others' median: the balance is the problem


class StageBubble(Doc, frozen=True):
    stage: int
    rank: int
    bubble_pct: float  # median over steps
    compute_ns: int  # median over steps


class PipelineView(Doc, frozen=True):
    group: str
    stages: int
    stages_source: str  # "send/recv pattern" or "--pp-stages"
    microbatches: int | None
    microbatches_source: str  # "sends from stage 0 per step", "--microbatches" or "unknown"
    textbook_bubble_pct: float | None  # (p − 1) / (m + p − 1)
    span_ns: int  # median pipeline span per step
    steps: int
    per_stage: tuple[StageBubble, ...]
    # the stage computing the most, when it computes over 5 % more than the others' median:
    # what the verdict and the stage finding name (None: the stages are balanced)
    overloaded_stage: Annotated[
        NonNegative | None,
        Meta(
            description=(
                "the stage computing the most, when over 5 % more than the other stages' "
                "median (metrics.md §10): the stage the verdict and the finding name"
            ),
        ),
    ]
    overloaded_excess_pct: Annotated[
        float | None, Meta(description="its compute over the others' median, % more")
    ]
    slow_rank: Annotated[
        NonNegative | None, Meta(description="a rank slower than its stage in the other pipelines")
    ]
    balanced: Annotated[bool, Meta(description="no overloaded stage and no slow rank of its own")]
    verdict: str
    # the slow ranks of other pipelines it waits for at the data-parallel collectives, when
    # its own stages are balanced: its bubble is that wait, not its schedule
    waits_for: Annotated[
        tuple[int, ...],
        Meta(
            description=(
                "a balanced pipeline: the slow ranks of other pipelines it waits for at the "
                "data-parallel collectives"
            )
        ),
    ] = ()
    # the pipeline whose view stands for this one (the same verdict; None: it stands for
    # itself): the views show one table per distinct verdict
    shown_as: Annotated[
        str | None,
        Meta(
            description=(
                "the pipeline whose view stands for this one (the same verdict, the longest "
                "span): views show one pipeline per distinct verdict; null: it stands for itself"
            )
        ),
    ] = None


def pipeline_views(
    ranks: Sequence[RankReport],
    breakdowns: Mapping[int, RankBreakdown],
    cr: Matching | None,
    stages: int | None = None,
    microbatches: int | None = None,
) -> tuple[PipelineView, ...]:
    if cr is None or not cr.pipelines:
        return ()
    offset = {r: c.offset_ns or 0 for c in cr.clocks for r in c.ranks}
    spans = {rank: b.compute_spans for rank, b in breakdowns.items()}
    by_rank = {r.rank: r for r in ranks}
    views = []
    for group, members in sorted(cr.pipelines.items(), key=lambda kv: kv[1]):
        present = [by_rank[r] for r in members if r in by_rank]
        if len(present) >= 2:
            view = _view(group, present, offset, spans, stages, microbatches, cr.p2p_pairs)
            if view is not None:
                views.append(view)
    judged = tuple(_slow_rank_verdict(v, views) for v in views)
    return _folded(tuple(_waiting_verdict(v, judged) for v in judged))


def _folded(views: tuple[PipelineView, ...]) -> tuple[PipelineView, ...]:
    """Each pipeline names the one that stands for it in the views (``shown_as``): of the
    pipelines whose verdicts say the same (the same stages, overloaded stage, a slow rank of
    their own or not, balance, and whom they wait for), the one with the longest span. 32
    data-parallel replicas of one pipeline are one table and a line, not 32 tables."""
    groups: dict[tuple[object, ...], list[PipelineView]] = {}
    for v in views:
        key = (v.stages, v.overloaded_stage, v.slow_rank is not None, v.balanced, v.waits_for)
        groups.setdefault(key, []).append(v)
    shown = {
        v.group: max(group, key=lambda g: g.span_ns).group
        for group in groups.values()
        for v in group
    }
    return tuple(
        v if shown[v.group] == v.group else structs.replace(v, shown_as=shown[v.group])
        for v in views
    )


def _waiting_verdict(view: PipelineView, views: Sequence[PipelineView]) -> PipelineView:
    """A balanced pipeline of a job where another pipeline has a slow rank: the replicas
    meet at every step's data-parallel collectives, so this one waits there for the slow one,
    and its bubble, however large, is not its schedule's."""
    slow = sorted({v.slow_rank for v in views if v.slow_rank is not None})
    if not view.balanced or not slow:
        return view
    where = ", ".join(f"rank {r}" for r in slow[:3]) + (" …" if len(slow) > 3 else "")
    worst = max(s.bubble_pct for s in view.per_stage)
    schedule = (
        f", the schedule's own {view.textbook_bubble_pct:.1f} % for 1F1B"
        if view.textbook_bubble_pct is not None
        else ""
    )
    verdict = (
        f"stages are balanced; it waits for {where} (a slow rank of another pipeline) at the "
        f"data-parallel collectives: that wait, not its schedule, is most of its bubble (up to "
        f"{worst:.1f} %{schedule})"
    )
    return structs.replace(view, verdict=verdict, waits_for=tuple(slow))


def _slow_rank_verdict(view: PipelineView, views: Sequence[PipelineView]) -> PipelineView:
    """A stage that computes more than the same stage of the other pipelines is one slow rank
    (a straggler): when that stage is balanced in the other pipelines, the slow rank, not the
    stage balance, sets this pipeline's pace; otherwise the verdict adds it."""
    computes = [s.compute_ns for s in view.per_stage]
    for s in view.per_stage:
        same = [
            o.per_stage[s.stage].compute_ns
            for o in views
            if o is not view and len(o.per_stage) == len(view.per_stage)
        ]
        typical = statistics.median(same) if same else None
        if not typical or s.compute_ns <= (1 + _IMBALANCE) * typical:
            continue
        excess = 100 * (s.compute_ns / typical - 1)
        slow = (
            f"rank {s.rank} (stage {s.stage}) computes {excess:.0f} % more than stage "
            f"{s.stage} of the other pipelines"
        )
        others = statistics.median(c for i, c in enumerate(computes) if i != s.stage)
        if typical <= (1 + _IMBALANCE) * others:
            verdict = f"{slow}: a slow rank, not the stage balance, sets this pipeline's pace"
            return structs.replace(
                view,
                verdict=verdict,
                slow_rank=s.rank,
                overloaded_stage=None,
                overloaded_excess_pct=None,
                balanced=False,
            )
        verdict = f"{view.verdict}; {slow}"
        return structs.replace(view, verdict=verdict, slow_rank=s.rank, balanced=False)
    return view


def _view(
    group: str,
    members: Sequence[RankReport],
    offset: Mapping[int, int],
    compute_spans: Mapping[int, Mapping[int, tuple[int, int]]],
    stages: int | None,
    microbatches: int | None,
    pairs: pl.DataFrame,
) -> PipelineView | None:
    spans = {
        r.rank: _aligned_spans(r, compute_spans[r.rank], offset.get(r.rank, 0)) for r in members
    }
    steps = sorted(set.intersection(*(set(s) for s in spans.values())))
    if not steps:
        return None
    order = [r.rank for r in members]  # the chain's order: first stage first
    compute = {
        r.rank: {s.step: s.window.figures.compute_ns for s in r.included_steps if s.window}
        for r in members
    }
    per_step_span = {
        s: max(spans[r][s][1] for r in order) - min(spans[r][s][0] for r in order) for s in steps
    }
    per_stage = tuple(
        StageBubble(
            stage=i,
            rank=rank,
            bubble_pct=statistics.median(
                100 * (1 - compute[rank][s] / per_step_span[s]) for s in steps
            ),
            compute_ns=round(statistics.median(compute[rank][s] for s in steps)),
        )
        for i, rank in enumerate(order)
    )
    heaviest = overloaded(per_stage)
    p = stages or len(order)
    m, m_source = (
        (microbatches, "--microbatches") if microbatches else _microbatches(pairs, order, steps)
    )
    textbook = 100 * (p - 1) / (m + p - 1) if m else None
    return PipelineView(
        group=group,
        stages=p,
        stages_source="--pp-stages" if stages else "send/recv pattern",
        microbatches=m,
        microbatches_source=m_source,
        textbook_bubble_pct=textbook,
        span_ns=round(statistics.median(per_step_span.values())),
        steps=len(steps),
        per_stage=per_stage,
        overloaded_stage=heaviest[0].stage if heaviest else None,
        overloaded_excess_pct=heaviest[1] if heaviest else None,
        slow_rank=None,
        balanced=heaviest is None,
        verdict=_verdict(per_stage, heaviest, textbook),
    )


def _aligned_spans(
    rank: RankReport, spans: Mapping[int, tuple[int, int]], offset: int
) -> dict[int, tuple[int, int]]:
    return {
        s.step: (spans[s.step][0] - offset, spans[s.step][1] - offset)
        for s in rank.included_steps
        if s.step in spans
    }


def _microbatches(
    pairs: pl.DataFrame, order: Sequence[int], steps: Sequence[int]
) -> tuple[int | None, str]:
    """The median over steps of the sends from stage 0 to stage 1 (paired send/recv)."""
    if pairs.height == 0 or "sender" not in pairs.columns:
        return None, "unknown"
    counts = (
        pairs.filter(
            (pl.col("rank") == order[0])
            & (pl.col("sender") == order[0])
            & (pl.col("receiver") == order[1])
            & pl.col("step").is_in(list(steps))
        )
        .group_by("step")
        .len()
        .sort("step")["len"]
        .to_list()
    )
    if not counts:
        return None, "unknown"
    return round(statistics.median(counts)), "sends from stage 0 per step"


def heaviest_stage(per_stage: Sequence[StageBubble]) -> tuple[StageBubble, float] | None:
    """The stage computing the most (the first of equals) and the others' median compute;
    None with fewer than two stages or no compute beside it."""
    if len(per_stage) < 2:
        return None
    heaviest = max(per_stage, key=lambda s: (s.compute_ns, -s.stage))
    others = statistics.median(s.compute_ns for s in per_stage if s is not heaviest)
    return (heaviest, others) if others > 0 else None


def overloaded(per_stage: Sequence[StageBubble]) -> tuple[StageBubble, float] | None:
    """The heaviest stage and its excess in % when it computes over 5 % more than the other
    stages' median (metrics.md §10): the one stage a verdict or a finding names."""
    found = heaviest_stage(per_stage)
    if found is None:
        return None
    stage, others = found
    if stage.compute_ns <= (1 + _IMBALANCE) * others:
        return None
    return stage, 100 * (stage.compute_ns / others - 1)


def _verdict(
    per_stage: Sequence[StageBubble],
    heaviest: tuple[StageBubble, float] | None,
    textbook: float | None,
) -> str:
    if heaviest is not None:
        stage, excess = heaviest
        return (
            f"stage {stage.stage} (rank {stage.rank}) computes {excess:.0f} % more than the "
            "other stages: the stage balance, not the schedule, sets the bubble"
        )
    if textbook is None:
        return "stages are balanced; the micro-batch count is unknown (--microbatches)"
    worst = max(s.bubble_pct for s in per_stage)
    return (
        f"stages are balanced: the bubble (up to {worst:.1f} %) is the schedule's own "
        f"({textbook:.1f} % for 1F1B); more micro-batches per step shrink it"
    )
