"""The whole run: discover files, map the per-rank unit over them, assemble the Report.

``analyze_file`` (parse + breakdown of one file) is pure and picklable: it runs in worker
processes here and can run on remote workers later. Only its small result travels back.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import polars as pl

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
from tracecomm.executors import Executor, LocalExecutor
from tracecomm.ingest import load_rank
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
    ModelFlops,
    ModelInputs,
    model_flops,
    read_rules,
    settings_file,
    settings_path,
)
from tracecomm.nccl.diagnose import NcclSummary
from tracecomm.nccl.discover import analyze_nccl
from tracecomm.nccl.discover import discover as discover_nccl
from tracecomm.pool import jobs_for
from tracecomm.sources import (
    find_sources,
    local_path,
    normalized,
    opened_locally,
    renamed,
    scheme,
)
from tracecomm.worker import analyze_file, ingest_file

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
    # --compat: HTA's own figures too, by the rules of "hta" (0.6.1), "hta-0.6" or "hta-0.5"
    compat_hta: str | None = None
    rank_from: str | None = None  # --rank-from pid|process_name: merged multi-rank traces
    cache: Path | None = None  # --cache DIR: parsed columns as Parquet for repeat runs
    timeline: bool = False  # one step of the fastest / median / slowest rank (HTML report)
    timeline_ranks: tuple[int, ...] = ()  # those ranks instead
    project_to: tuple[int, ...] | None = None  # world sizes to project to (metrics.md §11)
    weak: bool = False  # projection under weak scaling (per-rank batch kept)
    pp_stages: int | None = None  # --pp-stages: the pipeline view's p instead of the inferred one
    microbatches: int | None = None  # --microbatches: its m


@dataclass(frozen=True)
class RunInputs:
    """What the run folders hold, read where the files are (``Executor.call``)."""

    traces: tuple[str, ...]
    summaries: tuple[str, ...]  # ``tracecomm ingest`` output instead of traces
    model: ModelInputs
    flops: ModelFlops | None
    comm_rules: tuple[str, ...]
    compute_rules: tuple[str, ...]
    power: tuple[PowerLog, ...]
    power_warnings: tuple[str, ...]


def read_run(inputs: Sequence[str], model: ModelInputs) -> RunInputs:
    """Settings, rules, power logs and the files to analyze. Raises ``UsageError`` (bad
    settings, missing path) or ``NoUsableInput`` (nothing to analyze)."""
    from tracecomm.summaries import find_summaries

    inputs = [normalized(i) for i in inputs]  # file:// folders hold settings and logs too
    try:
        model = model.over(settings_file(list(inputs)))
        flops = model_flops(model)
        comm_rules, compute_rules = read_rules(list(inputs))
    except InputError as exc:
        raise UsageError(str(exc)) from exc
    for rule in (*comm_rules, *compute_rules):
        problem = check_pattern(split_rule(rule)[0])
        if problem:
            raise UsageError(f"[rules] {rule!r}: {problem}")
    summaries = tuple(find_summaries([i for i in inputs if local_path(i) is not None]))
    traces = () if summaries else tuple(find_sources(inputs))
    if summaries and any(not _holds_summaries(i) for i in inputs):
        raise UsageError(
            "mixing ingested summaries (*.tcsum.parquet) and traces in one analysis: pass "
            "either the folders `tracecomm ingest` wrote, or trace folders"
        )
    if not summaries and not traces:
        raise NoUsableInput(f"{', '.join(inputs)}: no trace files (*.json, *.json.gz) found")
    power, power_warnings = _power_logs(inputs)
    return RunInputs(
        traces,
        summaries,
        model,
        flops,
        comm_rules,
        compute_rules,
        tuple(power),
        tuple(power_warnings),
    )


def _holds_summaries(item: str) -> bool:
    from tracecomm.summaries import find_summaries

    return local_path(item) is not None and bool(find_summaries([item]))


def _with_rules(opts: AnalyzeOptions, run: RunInputs) -> AnalyzeOptions:
    return replace(
        opts,
        breakdown=replace(
            opts.breakdown,
            comm_patterns=opts.breakdown.comm_patterns + run.comm_rules,
            compute_patterns=opts.breakdown.compute_patterns + run.compute_rules,
        ),
    )


def analyze(
    inputs: Sequence[str | Path],
    opts: AnalyzeOptions | None = None,
    progress: Progress | None = None,
    pool: ProcessPoolExecutor | None = None,
    executor: Executor | None = None,
) -> Report:
    """Analyze a run folder (or trace files, or the summaries ``ingest`` wrote). Raises
    ``NoUsableInput`` when no rank is left. Whatever reads the input files runs on
    ``executor`` (default: this machine)."""
    opts = opts or AnalyzeOptions()
    executor = executor or LocalExecutor(pool)
    sources = [str(i) for i in inputs]
    run = executor.call(read_run, sources, opts.model)
    opts = _with_rules(opts, run)
    if run.summaries:
        outcomes, stored = _load_summaries(list(run.summaries), opts, progress, executor)
        opts = replace(opts, breakdown=_reconcile(opts.breakdown, stored, run))
    else:
        outcomes = _map_files(list(run.traces), opts, progress, run.power, executor)
    results = [o for o in outcomes if isinstance(o, RankResult)]
    failures = [o for o in outcomes if isinstance(o, FileFailure)]
    if not results:
        reasons = "; ".join(f"{f.path}: {f.reason}" for f in failures[:3])
        more = f" (and {len(failures) - 3} more)" if len(failures) > 3 else ""
        raise NoUsableInput(f"no usable trace: {reasons}{more}")
    model = run.model
    options = {
        "breakdown": asdict(opts.breakdown),
        "align_clocks": opts.align_clocks,
        "detail_instances": opts.detail_instances,
        "model": {k: str(v) if isinstance(v, Path) else v for k, v in asdict(model).items()},
    }
    report = build_report(
        results,
        failures,
        sources,
        options,
        opts.align_clocks,
        opts.detail_instances,
        MfuInputs(run.flops, model.dtype, model.peak_tflops),
        run.power_warnings,
        opts.link_gbps,
        opts.pp_stages,
        opts.microbatches,
    )
    if opts.compat_hta and opts.rank_from is None:
        paths = {r.rank: r.path for r in report.ranks}
        report = replace(report, hta_compat=executor.call(_hta_figures, paths, opts.compat_hta))
    nccl, nccl_warnings = executor.call(_nccl, sources, opts.nccl_logs)
    report = replace(report, nccl=nccl, warnings=report.warnings + tuple(nccl_warnings))
    if opts.timeline:
        report = replace(report, timeline=run_timeline(report, opts, executor))
    if opts.project_to is not None:
        report = replace(report, projection=run_projection(report, opts, executor))
    if not report.ranks:
        reasons = "; ".join(m.reason for m in report.missing[:3])
        raise NoUsableInput(f"no usable rank: {reasons}")
    if all(r.breakdown.window is None for r in report.ranks) and not report.missing:
        notes = "; ".join(f"{r.path}: {r.breakdown.notes[-1]}" for r in report.ranks[:3])
        raise NoUsableInput(f"nothing to analyze: {notes}")
    return report


def _hta_figures(paths: dict[int, str], mode: str) -> tuple[Any, ...]:
    from tracecomm.compat.hta import figures_of_files

    return figures_of_files(paths, mode)


def _nccl(inputs: Sequence[str], logs: tuple[Path, ...]) -> tuple[NcclSummary | None, list[str]]:
    local = [str(p) for p in map(local_path, inputs) if p is not None]
    return analyze_nccl(discover_nccl(local, logs))


@dataclass(frozen=True)
class IngestResult:
    out: Path
    summaries: int  # files written, failures included
    ranks: int
    failures: tuple[FileFailure, ...]


def ingest(
    inputs: Sequence[str | Path],
    out: Path,
    opts: AnalyzeOptions | None = None,
    progress: Progress | None = None,
    executor: Executor | None = None,
) -> IngestResult:
    """Each rank's result as a summary in ``out`` (written by the worker that parsed it), plus
    the run's settings, model config and NCCL logs, so that ``analyze out`` gives the figures
    ``analyze inputs`` gives."""
    opts = opts or AnalyzeOptions()
    executor = executor or LocalExecutor()
    sources = [str(i) for i in inputs]
    _refuse_inside(out, sources)
    run = executor.call(read_run, sources, opts.model)
    if run.summaries:
        raise UsageError("the inputs are summaries already: analyze them, or ingest the traces")
    opts = _with_rules(opts, run)
    executor.call(_prepare_out, str(out), sources, opts.nccl_logs)
    args = (str(out), opts.breakdown, run.power, opts.rank_from, opts.cache)
    traces = list(run.traces)
    written = executor.map(
        ingest_file, traces, args, progress, _lost_ingest, jobs_for(traces, opts.jobs)
    )
    lost = [w for w in written if isinstance(w, FileFailure)]
    if lost:
        executor.call(_write_failures, str(out), lost, opts.breakdown)
    done = [pair for w in written if not isinstance(w, FileFailure) for pair in w]
    failures = tuple(lost) + tuple(f for _, f in done if f is not None)
    total = len(done) + len(lost)
    return IngestResult(out, total, total - len(failures), failures)


def _refuse_inside(out: Path, inputs: Sequence[str]) -> None:
    """The tool never writes into the input folder."""
    target = out.resolve()
    for item in inputs:
        path = local_path(item)
        if path is None or not path.is_dir():
            continue
        root = path.resolve()
        if target == root or root in target.parents:
            raise UsageError(f"--out {out}: inside the input folder {item}; choose another folder")


def _prepare_out(out: str, inputs: Sequence[str], nccl_logs: tuple[Path, ...]) -> None:
    """The folder, with what ``analyze`` reads from a run folder besides traces: the settings
    file (and a model config it names beside it), NCCL logs and Flight Recorder dumps."""
    folder = Path(out)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        local = [str(p) for p in map(local_path, inputs) if p is not None]
        settings = settings_path(local)
        if settings is not None:
            shutil.copy2(settings, folder / settings.name)
            config = settings_file(local).model_config
            if config is not None and config.is_file() and settings.parent in config.parents:
                target = folder / config.relative_to(settings.parent)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(config, target)
        found = discover_nccl(local, nccl_logs)
        for i, path in enumerate((*found.logs, *found.dumps)):
            target = folder / "nccl" / f"{i:04d}-{path.name}"
            target.parent.mkdir(exist_ok=True)
            shutil.copy2(path, target)
    except OSError as exc:
        raise UsageError(f"--out {out}: cannot write: {exc.strerror or exc}") from None
    except InputError as exc:
        raise UsageError(str(exc)) from exc


def _lost_ingest(path: str, exc: BaseException) -> FileFailure:
    if isinstance(exc, OSError):
        return FileFailure(path, f"its summary could not be written: {exc.strerror or exc}")
    return _lost(path, exc)


def _write_failures(out: str, failures: list[FileFailure], opts: BreakdownOptions) -> None:
    from tracecomm.summaries import write_summary

    for failure in failures:
        write_summary(Path(out), failure, opts)


def _summary_outcome(path: str) -> tuple[RankResult | FileFailure, BreakdownOptions | None]:
    from tracecomm.summaries import SummaryError, read_summary

    try:
        return read_summary(path)
    except SummaryError as exc:
        return FileFailure(exc.path, exc.reason), None


def _load_summaries(
    paths: list[str], opts: AnalyzeOptions, progress: Progress | None, executor: Executor
) -> tuple[list[RankResult | FileFailure], BreakdownOptions | None]:
    """The outcomes in the order ``analyze`` of the traces would have (their paths'), and the
    breakdown options they were computed with (all must agree)."""
    from tracecomm.ingest.discover import natural_key

    loaded = executor.map(
        _summary_outcome, paths, (), progress, lambda p, e: (_lost(p, e), None), 1
    )
    stored = {o for _, o in loaded if o is not None}
    if len(stored) > 1:
        raise UsageError(
            "the summaries were computed with different options (steps, rules): ingest them "
            "again with the same ones"
        )
    outcomes = sorted((o for o, _ in loaded), key=lambda o: natural_key(o.path))
    return outcomes, next(iter(stored), None)


def _reconcile(
    requested: BreakdownOptions, stored: BreakdownOptions | None, run: RunInputs
) -> BreakdownOptions:
    """The summaries' own options; asking for others is an error (they cannot be recomputed
    without the traces)."""
    if stored is None:
        return requested
    untouched = BreakdownOptions(comm_patterns=run.comm_rules, compute_patterns=run.compute_rules)
    if requested not in (untouched, stored):
        raise UsageError(
            f"the summaries were computed with {_describe(stored)}, not {_describe(requested)}; "
            "steps and rules are fixed at ingest: run `tracecomm ingest` again to change them"
        )
    return stored


def _describe(opts: BreakdownOptions) -> str:
    changed = {k: v for k, v in asdict(opts).items() if v != getattr(BreakdownOptions(), k)}
    return ", ".join(f"{k}={v}" for k, v in changed.items()) or "the default options"


def _lost(path: str, exc: BaseException) -> FileFailure:
    """A task the executor could not complete (its worker kept dying, or its result did not
    come back): the rank is missing, with the reason."""
    name = type(exc).__name__
    if name == "KilledWorker":
        reason = f"the worker parsing it died too often (Dask KilledWorker: {exc})"
    elif name == "BrokenProcessPool":
        reason = "the process parsing it died (killed for memory, or a crash); other ranks kept"
    else:
        reason = f"lost by the executor ({name}: {exc})"
    return FileFailure(path, reason)


def run_timeline(
    report: Report, opts: AnalyzeOptions, executor: Executor | None = None
) -> RunTimeline:
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
    executor = executor or LocalExecutor()
    return RunTimeline(
        step,
        tuple(
            executor.call(_rank_timeline, by_rank[rank].path, rank, role, step, opts)
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


def run_projection(
    report: Report, opts: AnalyzeOptions, executor: Executor | None = None
) -> Projection | str:
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
    work = (executor or LocalExecutor()).call(_step_work, median.path, median.rank, step, opts)
    if isinstance(work, str):
        return work
    targets = opts.project_to or tuple(
        size for size in (world // 2, 2 * world, 4 * world, 8 * world, 16 * world) if size >= 1
    )
    mfu = report.throughput.mfu if report.throughput is not None else None
    return project(work, fits, world, targets, opts.weak, median.rank, step, mfu)


def _step_work(path: str, rank: int, step: int, opts: AnalyzeOptions) -> pl.DataFrame | str:
    try:
        events = _events_again(path, rank, opts)
    except (TraceError, OSError) as exc:
        return f"could not read rank {rank} again: {exc}"
    return step_work(events, step, opts.breakdown)


def _typical_step(rank: RankReport) -> int | None:
    """The included step whose window is the (lower) median of the rank's."""
    steps = sorted(
        (s.window.figures.window_ns, s.step)
        for s in rank.breakdown.included_steps
        if s.window is not None
    )
    return steps[(len(steps) - 1) // 2][1] if steps else None


def _rank_timeline(
    path: str, rank: int, role: str, step: int, opts: AnalyzeOptions
) -> RankTimeline:
    try:
        events = _events_again(path, rank, opts)
    except (TraceError, OSError) as exc:
        return RankTimeline(rank, role, None, f"could not read the file again: {exc}")
    timeline = step_timeline(events, step, opts.breakdown)
    reason = None if timeline is not None else f"no device work in step {step}"
    return RankTimeline(rank, role, timeline, reason)


def _events_again(path: str, rank: int, opts: AnalyzeOptions) -> RankEvents:
    if opts.rank_from is not None:
        file = path.rsplit("#rank", 1)[0]
        return next(e for e in load_merged(file, opts.rank_from) if e.meta.rank == rank)
    if scheme(path) not in (None, "file"):
        with opened_locally(path) as local:
            return renamed(load_rank(local), local, path)
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
    power: tuple[PowerLog, ...],
    executor: Executor,
) -> list[RankResult | FileFailure]:
    jobs = (
        1
        if opts.cache is not None and _all_cached(paths, opts.cache)
        else jobs_for(paths, opts.jobs)
    )
    args = (opts.breakdown, power, opts.rank_from, opts.cache)
    per_file = executor.map(analyze_file, paths, args, progress, lambda p, e: [_lost(p, e)], jobs)
    return [outcome for outcomes in per_file for outcome in outcomes]


def _all_cached(paths: Sequence[str], cache: Path) -> bool:
    """Every file has an entry: reading Parquet / results costs less than starting a pool."""
    from tracecomm.ingest.cache import cache_key

    try:
        return all(scheme(p) is None and (cache / cache_key(Path(p))).is_dir() for p in paths)
    except OSError:
        return False
