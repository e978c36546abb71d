"""The whole run: discover files, map the per-rank unit over them, assemble the Report.

``analyze_file`` (parse + breakdown of one file) is pure and picklable: it runs in worker
processes here and can run on remote workers later. Only its small result travels back.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from tracecomm.analysis.model import (
    FileFailure,
    RankReport,
    RankResult,
    RankTimeline,
    Report,
    RunTimeline,
)
from tracecomm.analysis.projection import Projection
from tracecomm.analysis.report import MfuInputs, build_report
from tracecomm.engine import BreakdownOptions
from tracecomm.engine.classify import check_pattern, split_rule
from tracecomm.engine.timeline import step_timeline, step_work
from tracecomm.errors import NoUsableInput, TraceError, UsageError
from tracecomm.ingest import find_traces, load_rank
from tracecomm.ingest.cache import load as cache_load
from tracecomm.ingest.kineto import load_merged
from tracecomm.ingest.model import RankEvents
from tracecomm.ingest.power import (
    PowerLog,
    PowerLogError,
    find_power_logs,
    load_power_log,
)
from tracecomm.mfu.inputs import (
    InputError,
    ModelInputs,
    model_flops,
    read_rules,
    settings_file,
)
from tracecomm.nccl.discover import analyze_nccl
from tracecomm.nccl.discover import discover as discover_nccl
from tracecomm.pool import jobs_for, new_pool
from tracecomm.worker import analyze_file

Progress = Callable[[int, int, str], None]


@dataclass(frozen=True)
class AnalyzeOptions:
    breakdown: BreakdownOptions = field(default_factory=BreakdownOptions)
    jobs: int | None = None  # None: one per core, when the input is large enough to pay off
    align_clocks: bool = True  # metrics.md §5; --no-clock-align turns it off
    detail_instances: bool = False  # per-instance straggler records (--detail instances)
    model: ModelInputs = field(default_factory=ModelInputs)  # FLOPs and peak inputs for MFU
    nccl_logs: tuple[Path, ...] = ()  # --nccl-log: logs outside the run folder
    link_gbps: float | None = None  # --link-gbps: bandwidth share below this link speed
    compat_hta: bool = False  # --compat hta: HTA 0.5.0's own figures too (metrics.md §9)
    rank_from: str | None = None  # --rank-from pid|process_name: merged multi-rank traces
    cache: Path | None = None  # --cache DIR: parsed columns as Parquet for repeat runs
    timeline: bool = False  # one step of the fastest / median / slowest rank (HTML report)
    timeline_ranks: tuple[int, ...] = ()  # those ranks instead
    project_to: tuple[int, ...] | None = None  # world sizes to project to (metrics.md §11)
    weak: bool = False  # projection under weak scaling (per-rank batch kept)
    pp_stages: int | None = None  # --pp-stages: the pipeline view's p instead of the inferred one
    microbatches: int | None = None  # --microbatches: its m


def analyze(
    inputs: Sequence[str | Path],
    opts: AnalyzeOptions | None = None,
    progress: Progress | None = None,
    pool: ProcessPoolExecutor | None = None,
) -> Report:
    """Analyze a run folder (or trace files). Raises ``NoUsableInput`` when no rank is left."""
    opts = opts or AnalyzeOptions()
    try:
        model = opts.model.over(settings_file([str(i) for i in inputs]))
        flops = model_flops(model)
        comm_rules, compute_rules = read_rules([str(i) for i in inputs])
    except InputError as exc:
        raise UsageError(str(exc)) from exc
    for rule in (*comm_rules, *compute_rules):
        problem = check_pattern(split_rule(rule)[0])
        if problem:
            raise UsageError(f"[rules] {rule!r}: {problem}")
    opts = replace(
        opts,
        breakdown=replace(
            opts.breakdown,
            comm_patterns=opts.breakdown.comm_patterns + comm_rules,
            compute_patterns=opts.breakdown.compute_patterns + compute_rules,
        ),
    )
    paths = find_traces(inputs)
    if not paths:
        raise NoUsableInput(
            f"{', '.join(map(str, inputs))}: no trace files (*.json, *.json.gz) found"
        )
    power, power_warnings = _power_logs(inputs)
    outcomes = _map_files([str(p) for p in paths], opts, progress, power, pool)
    results = [o for o in outcomes if isinstance(o, RankResult)]
    failures = [o for o in outcomes if isinstance(o, FileFailure)]
    if not results:
        reasons = "; ".join(f"{f.path}: {f.reason}" for f in failures[:3])
        more = f" (and {len(failures) - 3} more)" if len(failures) > 3 else ""
        raise NoUsableInput(f"no usable trace: {reasons}{more}")
    options = {
        "breakdown": asdict(opts.breakdown),
        "align_clocks": opts.align_clocks,
        "detail_instances": opts.detail_instances,
        "model": {k: str(v) if isinstance(v, Path) else v for k, v in asdict(model).items()},
    }
    report = build_report(
        results,
        failures,
        [str(i) for i in inputs],
        options,
        opts.align_clocks,
        opts.detail_instances,
        MfuInputs(flops, model.dtype, model.peak_tflops),
        power_warnings,
        opts.link_gbps,
        opts.pp_stages,
        opts.microbatches,
    )
    if opts.compat_hta and opts.rank_from is None:
        from tracecomm.compat.hta import hta_figures, rank_events

        frames = {r.rank: rank_events(Path(r.path)) for r in report.ranks}
        report = replace(report, hta_compat=tuple(hta_figures(frames)))
    nccl, nccl_warnings = analyze_nccl(discover_nccl(inputs, opts.nccl_logs))
    report = replace(report, nccl=nccl, warnings=report.warnings + tuple(nccl_warnings))
    if opts.timeline:
        report = replace(report, timeline=run_timeline(report, opts))
    if opts.project_to is not None:
        report = replace(report, projection=run_projection(report, opts))
    if not report.ranks:
        reasons = "; ".join(m.reason for m in report.missing[:3])
        raise NoUsableInput(f"no usable rank: {reasons}")
    if all(r.breakdown.window is None for r in report.ranks) and not report.missing:
        notes = "; ".join(f"{r.path}: {r.breakdown.notes[-1]}" for r in report.ranks[:3])
        raise NoUsableInput(f"nothing to analyze: {notes}")
    return report


def run_timeline(report: Report, opts: AnalyzeOptions) -> RunTimeline:
    """The median rank's most typical step on the fastest, median and slowest ranks (by median
    step time) and on the worst flagged straggler, or on ``opts.timeline_ranks``: only their
    files are read again (from the cache when there is one)."""
    by_rank = {r.rank: r for r in report.ranks}
    roles = _timeline_roles(report, opts.timeline_ranks)
    if not roles:
        return RunTimeline(None, (), "no rank has a complete step")
    anchor = report.summary.median_rank
    step = _typical_step(by_rank[anchor]) if anchor in by_rank else None
    if step is None:
        return RunTimeline(None, (), "the median rank has no analyzed step")
    return RunTimeline(
        step,
        tuple(
            _rank_timeline(by_rank[rank], role, step, opts)
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


def run_projection(report: Report, opts: AnalyzeOptions) -> Projection | str:
    """metrics.md §11 from the median rank's typical step; a reason when it cannot be done."""
    from tracecomm.analysis.projection import fit_links, project

    world = report.summary.world_size or report.summary.ranks_analyzed
    median = next((r for r in report.ranks if r.rank == report.summary.median_rank), None)
    step = _typical_step(median) if median is not None else None
    if median is None or step is None:
        return "no analyzed step to replay"
    cr = report.cross_rank
    fits = fit_links(cr.aligned) if cr is not None else ()
    if not fits:
        return (
            "no collective to fit: the projection needs matched AllGather, ReduceScatter or "
            "AllReduce instances with message sizes (two or more ranks, PyTorch's collective "
            "metadata)"
        )
    try:
        events = _events_again(median.path, median.rank, opts)
    except (TraceError, OSError) as exc:
        return f"could not read rank {median.rank} again: {exc}"
    targets = opts.project_to or tuple(
        size for size in (world // 2, 2 * world, 4 * world, 8 * world, 16 * world) if size >= 1
    )
    mfu = report.throughput.mfu if report.throughput is not None else None
    work = step_work(events, step, opts.breakdown)
    return project(work, fits, world, targets, opts.weak, median.rank, step, mfu)


def _typical_step(rank: RankReport) -> int | None:
    """The included step whose window is the (lower) median of the rank's."""
    steps = sorted(
        (s.window.figures.window_ns, s.step)
        for s in rank.breakdown.included_steps
        if s.window is not None
    )
    return steps[(len(steps) - 1) // 2][1] if steps else None


def _rank_timeline(rank: RankReport, role: str, step: int, opts: AnalyzeOptions) -> RankTimeline:
    try:
        events = _events_again(rank.path, rank.rank, opts)
    except (TraceError, OSError) as exc:
        return RankTimeline(rank.rank, role, None, f"could not read the file again: {exc}")
    timeline = step_timeline(events, step, opts.breakdown)
    reason = None if timeline is not None else f"no device work in step {step}"
    return RankTimeline(rank.rank, role, timeline, reason)


def _events_again(path: str, rank: int, opts: AnalyzeOptions) -> RankEvents:
    if opts.rank_from is not None:
        file = path.rsplit("#rank", 1)[0]
        return next(e for e in load_merged(file, opts.rank_from) if e.meta.rank == rank)
    cached = cache_load(opts.cache, Path(path)) if opts.cache is not None else None
    return cached if cached is not None else load_rank(path)


def _power_logs(inputs: Sequence[str | Path]) -> tuple[tuple[PowerLog, ...], list[str]]:
    """Power logs in the run folders; one that cannot be read is a warning, not an error."""
    logs, warnings = [], []
    for path in find_power_logs(inputs):
        try:
            logs.append(load_power_log(path))
        except PowerLogError as exc:
            warnings.append(f"power log skipped: {exc}")
    return tuple(logs), warnings


def _map_files(
    paths: list[str],
    opts: AnalyzeOptions,
    progress: Progress | None,
    power: tuple[PowerLog, ...] = (),
    pool: ProcessPoolExecutor | None = None,
) -> list[RankResult | FileFailure]:
    jobs = (
        1
        if opts.cache is not None and _all_cached(paths, opts.cache)
        else jobs_for(paths, opts.jobs)
    )
    out: list[RankResult | FileFailure] = []
    if progress:
        progress(0, len(paths), "")
    if jobs <= 1:
        if pool is not None:
            pool.shutdown(cancel_futures=True)
        for i, path in enumerate(paths):
            out.extend(analyze_file(path, opts.breakdown, power, opts.rank_from, opts.cache))
            if progress:
                progress(i + 1, len(paths), path)
        return out
    with pool or new_pool(jobs) as pool:
        n = len(paths)
        results = pool.map(
            analyze_file,
            paths,
            [opts.breakdown] * n,
            [power] * n,
            [opts.rank_from] * n,
            [opts.cache] * n,
        )
        for i, (path, outcome) in enumerate(zip(paths, results, strict=True)):
            out.extend(outcome)
            if progress:
                progress(i + 1, len(paths), path)
    return out


def _all_cached(paths: Sequence[str], cache: Path) -> bool:
    """Every file has an entry: reading Parquet / results costs less than starting a pool."""
    from tracecomm.ingest.cache import cache_key

    try:
        return all((cache / cache_key(Path(p))).is_dir() for p in paths)
    except OSError:
        return False
