"""What an analysis is asked to do beyond the per-rank figures: the analysis layer's part of the
run's request (``run.request.Request``)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class AnalysisOptions:
    align_clocks: bool = True  # metrics.md §5; --no-clock-align turns it off
    detail_instances: bool = False  # per-instance straggler records (--detail instances)
    link_gbps: float | None = None  # --link-gbps: bandwidth share below this link speed
    compat: str | None = None  # --compat hta: another tool's figures, reproduced (§9)
    timeline: bool = False  # one step of the fastest / median / slowest rank (HTML report)
    timeline_ranks: tuple[int, ...] = ()  # those ranks instead
    project_to: tuple[int, ...] | None = None  # world sizes to project to (§11); () = default
    weak: bool = False  # projection under weak scaling (per-rank batch kept)
    pp_stages: int | None = None  # --pp-stages: the pipeline view's p instead of the inferred one
    microbatches: int | None = None  # --microbatches: its m
    export: bool = False  # metrics.md §17: read the chosen ranks' steps again (tracecomm export)
    export_ranks: tuple[int, ...] = ()  # --export-ranks; () = fastest, median, slowest, flagged
    # --export-steps: (first, last) ProfilerStep numbers, either open; None = the typical step
    export_steps: tuple[int | None, int | None] | None = None
    # tracecomm.toml's [run] framework: named when the traces name no framework (§14a)
    declared_framework: str | None = None
