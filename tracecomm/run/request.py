"""One request object for every way in: the CLI builds it from its options, ``tracecomm.analyze``
from keywords of the same names (``steps="3:7"``, ``comm_pattern=[...]``,
``model_flops_per_step=3.16e15``, …). Every value is checked here, once, as its declaration in
``run.options`` reads it (the Python form or its text), and a bad one is a ``UsageError`` that
names the option.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from tracecomm.analysis.options import AnalysisOptions
from tracecomm.colltypes import GLOO_OPS
from tracecomm.engine.options import BreakdownOptions
from tracecomm.errors import UsageError
from tracecomm.ingest.options import ReadOptions
from tracecomm.mfu.inputs import ModelInputs
from tracecomm.mfu.opflops import SHAPED_OPS
from tracecomm.run.executors import ExecutorSpec
from tracecomm.run.options import OPTIONS, SPECS
from tracecomm.run.options import AnalyzeOptions as AnalyzeOptions  # where it used to be

KEPT_SHAPES = SHAPED_OPS | GLOO_OPS
MODEL_KEYS = tuple(f.name for f in fields(ModelInputs))  # the MFU options


@dataclass(frozen=True)
class Request:
    """What one analysis of one run is asked to do, each layer's part apart."""

    inputs: tuple[str, ...]
    breakdown: BreakdownOptions = field(default_factory=BreakdownOptions)
    # the readers keep the recorded shapes of the ops the FLOP counter knows (observed TFLOP/s)
    # and of gloo's collectives (their message sizes)
    read: ReadOptions = field(default_factory=lambda: ReadOptions(shaped_ops=KEPT_SHAPES))
    model: ModelInputs = field(default_factory=ModelInputs)
    analysis: AnalysisOptions = field(default_factory=AnalysisOptions)
    jobs: int | None = None  # parse processes; None: one per core when the input pays for it
    executor: ExecutorSpec = field(default_factory=ExecutorSpec)
    cache: Path | None = None  # --cache DIR: parsed columns and results for repeat runs
    rank_from: str | None = None  # merged multi-rank traces: each process's rank by pid / name
    nccl_logs: tuple[Path, ...] = ()  # --nccl-log: logs outside the run folder


def request_of(inputs: str | Path | Sequence[str | Path], **options: Any) -> Request:
    """The request for ``inputs`` (run folders, trace files, URLs) with the CLI's options as
    keywords (``AnalyzeOptions``: each its Python form or its text). Raises ``UsageError`` for
    an unknown option or a bad value."""
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise UsageError(f"unknown option {unknown[0]!r} (one of: {', '.join(OPTIONS)})")
    paths = (inputs,) if isinstance(inputs, str | Path) else tuple(inputs)
    if not paths:
        raise UsageError("no run folder or trace file given")
    o = {name: spec.read(options.get(name)) for name, spec in SPECS.items()}
    first, last = o["steps"] or (None, None)
    detail = o["detail"] or ()
    return Request(
        inputs=tuple(str(p) for p in paths),
        breakdown=BreakdownOptions(
            first, last, bool(o["all_steps"]), o["comm_pattern"] or (), o["compute_pattern"] or ()
        ),
        read=read_options(o),
        model=ModelInputs(**{k: o[k] for k in MODEL_KEYS if o[k] is not None}),
        analysis=AnalysisOptions(
            align_clocks=not o["no_clock_align"],
            detail_instances="instances" in detail,
            link_gbps=o["link_gbps"],
            compat=o["compat"],
            timeline="timeline" in detail,
            timeline_ranks=o["timeline_ranks"] or (),
            project_to=o["to"] if o["to"] is not None else (() if o["project"] else None),
            weak=bool(o["weak"]),
            pp_stages=o["pp_stages"],
            microbatches=o["microbatches"],
            export=o["export_ranks"] is not None or o["export_steps"] is not None,
            export_ranks=o["export_ranks"] or (),
            export_steps=o["export_steps"],
        ),
        jobs=o["jobs"],
        executor=o["executor"] or ExecutorSpec(),
        cache=o["cache"],
        rank_from=o["rank_from"],
        nccl_logs=o["nccl_log"] or (),
    )


def read_options(values: Mapping[str, Any]) -> ReadOptions:
    """What the readers keep (the FLOP counter's ops' shapes and the step ranges) and their
    bounds, from the options as read (``SPECS``)."""
    base = ReadOptions(shaped_ops=KEPT_SHAPES)
    return ReadOptions(
        shaped_ops=base.shaped_ops,
        step_range=values.get("step_range"),
        max_inflate_ratio=values.get("max_inflate_ratio") or base.max_inflate_ratio,
        max_trace_bytes=values.get("max_trace_size") or base.max_trace_bytes,
        max_event_bytes=values.get("max_event_size") or base.max_event_bytes,
    )
