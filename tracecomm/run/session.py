"""The run: discover the inputs once, map the per-rank unit over them on an executor, and hand
the results to the analysis, which builds the Report. Whatever reads an input file runs on the
executor (this machine by default), so a cluster reads its own storage.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from tracecomm.analysis.model import (
    FileFailure,
    RankOrigin,
    RankResult,
    RunData,
)
from tracecomm.engine import BreakdownOptions
from tracecomm.engine.options import ViewRequest
from tracecomm.errors import NoUsableInput, OutputError, UsageError
from tracecomm.ingest.power import PowerLog, PowerLogError, find_power_logs, load_power_log
from tracecomm.mfu.inputs import InputError, ModelFlops, ModelInputs, model_flops
from tracecomm.run.discover import Discovery, discover
from tracecomm.run.executors import Executor, LocalExecutor, WorkerDied
from tracecomm.run.pool import jobs_for, threads_for
from tracecomm.run.request import Request
from tracecomm.run.settings import key_name, read_settings, settings_path
from tracecomm.run.sources import local_path
from tracecomm.run.worker import (
    RankWork,
    analyze_file,
    exports_of_file,
    hta_figures,
    ingest_file,
)

if TYPE_CHECKING:
    from tracecomm.analysis.build import Analysis
    from tracecomm.analysis.report import Report
    from tracecomm.nccl.diagnose import NcclSummary

Progress = Callable[[int, int, str], None]


@dataclass(frozen=True)
class RunInputs:
    """What the run folders hold besides the traces, read where the files are."""

    model: ModelInputs  # the flags over the settings file's [model] / [device]
    flops: ModelFlops | None
    comm_rules: tuple[str, ...]
    compute_rules: tuple[str, ...]
    power: tuple[PowerLog, ...]
    power_warnings: tuple[str, ...]
    framework: str | None = None  # the settings' [run] framework, for when no trace names one
    steps: tuple[int, int] | None = None  # the settings' [run] steps: the default --steps
    settings_path: Path | None = None


def read_run(discovery: Discovery, model: ModelInputs) -> RunInputs:
    """Settings, rules and power logs. Raises ``UsageError`` (bad settings)."""
    from tracecomm.engine.classify import check_pattern, rule_problem

    inputs = list(discovery.inputs)
    settings = read_settings(inputs)
    try:
        flags = model
        model = model.over(settings.model)
        flops = model_flops(model, _given_in(settings.path, flags))
    except InputError as exc:
        raise UsageError(str(exc)) from exc
    rules = [(r, rule_problem(r)) for r in settings.comm_rules]
    rules += [(r, check_pattern(r)) for r in settings.compute_rules]
    for rule, problem in rules:
        if problem:
            raise UsageError(f"{settings.path}: [rules] {rule!r}: {problem}")
    power, power_warnings = _power_logs(inputs)
    return RunInputs(
        model,
        flops,
        settings.comm_rules,
        settings.compute_rules,
        tuple(power),
        tuple(power_warnings),
        settings.run.framework,
        settings.run.steps,
        settings.path,
    )


def _given_in(path: Path | None, flags: ModelInputs) -> Callable[[str], str | None]:
    """Where the settings file gave a value that no flag did: the FLOPs' source names the file
    and its key then (a source reading "--model-flops-per-step" when no flag was passed sends
    the user hunting)."""
    default = ModelInputs()

    def given_in(field: str) -> str | None:
        if path is None or getattr(flags, field) != getattr(default, field):
            return None
        return key_name(path, field)

    return given_in


def run_analysis(
    request: Request,
    progress: Progress | None = None,
    executor: Executor | None = None,
    discovery: Discovery | None = None,
) -> Report:
    """Analyze a run folder (or trace files, or the summaries ``ingest`` wrote). Raises
    ``UsageError`` and ``NoUsableInput``. ``discovery``: the inputs already discovered (the
    CLI does it before its heavy imports, to size its pool)."""
    return analyze_run(request, progress, executor, discovery).report


def analyze_run(
    request: Request,
    progress: Progress | None = None,
    executor: Executor | None = None,
    discovery: Discovery | None = None,
) -> Analysis:
    """``run_analysis``, with what only a run analyzed now has besides its Report (the matched
    instances, the exported events: ``analysis.model.Side``)."""
    executor = executor or LocalExecutor()
    discovery = discovery or executor.call(discover, list(request.inputs))
    run = executor.call(read_run, discovery, request.model)
    work = _work(request, run)
    if discovery.summaries:
        outcomes, stored = _load_summaries(list(discovery.summaries), progress, executor)
        work = replace(work, breakdown=_reconcile(work.breakdown, stored, run))
    else:
        outcomes = _map_files(
            list(discovery.traces), request, work, progress, executor, _load_analysis
        )
    results = tuple(o for o in outcomes if isinstance(o, RankResult))
    failures = tuple(o for o in outcomes if isinstance(o, FileFailure))
    run_warnings = run.power_warnings + _cache_warnings(request.cache, results)
    if not results:
        reasons = "; ".join(f"{f.path}: {f.reason}" for f in failures[:3])
        more = f" (and {len(failures) - 3} more)" if len(failures) > 3 else ""
        raise NoUsableInput(f"no usable trace: {reasons}{more}")
    nccl, nccl_warnings = executor.call(_nccl, list(request.inputs), request.nccl_logs)
    data = RunData(
        results=results,
        failures=failures,
        inputs=request.inputs,
        options=_recorded_options(request, work.breakdown, run.model),
        model=run.model,
        flops=run.flops,
        run_warnings=run_warnings,
        nccl=nccl,
        nccl_warnings=tuple(nccl_warnings),
        hta=_HtaReader(executor),
        export_reader=_ExportReader(executor, work, request.jobs),
        read_from="summaries" if discovery.summaries else "traces",
    )
    # merged traces hold no file per rank for HTA to read
    options = replace(request.analysis, declared_framework=run.framework)
    if request.rank_from is not None:
        options = replace(options, compat=None)
    from tracecomm.analysis.build import build

    analysis = build(data, options)
    report = analysis.report
    _check_chosen_ranks(report, options.timeline_ranks)
    _check_chosen_ranks(report, options.export_ranks, "--export-ranks")
    if not report.ranks:
        reasons = "; ".join(m.reason for m in report.missing_ranks[:3])
        raise NoUsableInput(f"no usable rank: {reasons}")
    _check_step_range(report, work.breakdown, _steps_source(request, run))
    if all(r.window is None for r in report.ranks) and not report.missing_ranks:
        notes = "; ".join(f"{r.path}: {r.notes[-1]}" for r in report.ranks[:3])
        raise NoUsableInput(f"nothing to analyze: {notes}")
    return analysis


def _cache_warnings(cache: Path | None, results: Sequence[RankResult]) -> tuple[str, ...]:
    from tracecomm.run.cache import unusable_warning

    problems = [r.cache_problem for r in results if r.cache_problem]
    return (unusable_warning(cache, problems),) if cache is not None and problems else ()


def _steps_source(request: Request, run: RunInputs) -> str:
    """Who chose the steps: the flag, else the settings file (``_work``)."""
    flags = request.breakdown
    if flags.first_step is None and flags.last_step is None and run.steps is not None:
        return f"{run.settings_path}: [run] steps"
    return "--steps"


def _check_step_range(report: Report, opts: BreakdownOptions, source: str = "--steps") -> None:
    """``--steps`` (or the settings' [run] steps) naming no step that any rank has: one line
    naming the steps there are (each rank's own note would say "no complete step", once per
    rank, which misleads)."""
    if opts.first_step is None and opts.last_step is None:
        return
    lo = opts.first_step if opts.first_step is not None else -(2**62)
    hi = opts.last_step if opts.last_step is not None else 2**62
    present = {s.step for r in report.ranks for s in r.steps}
    if not present or any(lo <= step <= hi for step in present):
        return
    asked = f"{'' if opts.first_step is None else opts.first_step}:" + (
        "" if opts.last_step is None else str(opts.last_step)
    )
    if opts.first_step == opts.last_step:
        asked = str(opts.first_step)
    raise NoUsableInput(
        f"{source} {asked}: no step of the trace is in that range; the traces have steps "
        f"{min(present)}\u2013{max(present)} ({len(present)} steps)"
    )


def _check_chosen_ranks(
    report: Report, chosen: Sequence[int], flag: str = "--timeline-ranks"
) -> None:
    from tracecomm.text import compact_ranges

    analyzed = {r.rank for r in report.ranks}
    unknown = [r for r in chosen if r not in analyzed]
    if unknown and analyzed:
        raise UsageError(
            f"{flag}: rank {unknown[0]} is not among the analyzed ranks "
            f"({compact_ranges(analyzed)})"
        )


def _work(request: Request, run: RunInputs) -> RankWork:
    """The per-rank unit's options: the request's, with the settings file's rules added, and
    its recorded steps when no --steps asks for others (a loop that ended inside the window
    leaves one more ProfilerStep begun, which never ran)."""
    opts = request.breakdown
    if run.steps is not None and opts.first_step is None and opts.last_step is None:
        opts = replace(opts, first_step=run.steps[0], last_step=run.steps[1])
    return RankWork(
        breakdown=replace(
            opts,
            comm_patterns=opts.comm_patterns + run.comm_rules,
            compute_patterns=opts.compute_patterns + run.compute_rules,
        ),
        read=request.read,
        power=run.power,
        rank_from=request.rank_from,
        cache=request.cache,
        views=ViewRequest(
            timelines=request.analysis.timeline,
            export=request.analysis.export,
            export_ranks=request.analysis.export_ranks,
            export_steps=request.analysis.export_steps,
        ),
    )


def _recorded_options(
    request: Request, breakdown: BreakdownOptions, model: ModelInputs
) -> dict[str, Any]:
    """The options as the report records them, as JSON has them (paths as text, lists): what
    a saved document reads back is the same."""
    options = {
        "breakdown": asdict(breakdown),
        "align_clocks": request.analysis.align_clocks,
        "detail_instances": request.analysis.detail_instances,
        "model": {k: str(v) if isinstance(v, Path) else v for k, v in asdict(model).items()},
    }
    plain: dict[str, Any] = msgspec.json.decode(msgspec.json.encode(options, enc_hook=str))
    return plain


class _ExportReader:
    """``ExportReader``: the chosen ranks' files read again where they are, side by side, each
    file once (a merged trace holding several of them too)."""

    def __init__(self, executor: Executor, work: RankWork, jobs: int | None) -> None:
        self._executor, self._work, self._jobs = executor, work, jobs

    def __call__(self, origins: Mapping[int, RankOrigin], steps: tuple[int, ...]) -> dict[int, Any]:
        by_file: dict[str, dict[int, int]] = {}
        for rank, origin in origins.items():
            by_file.setdefault(origin.file, {})[origin.index] = rank
        files = list(by_file)
        # threads of this process: a pool started now would spawn fresh interpreters (polars
        # is loaded: no fork), which costs more than the few files it would read
        threads = 1 if self._jobs == 1 else max(1, min(os.cpu_count() or 1, len(files)))
        per_file = self._executor.map(
            exports_of_file,
            files,
            (by_file, steps, self._work),
            None,
            lambda f, e: [(rank, f"lost by the executor ({e})") for rank in by_file[f].values()],
            1,
            threads=threads,
        )
        return {rank: found for pairs in per_file for rank, found in pairs}


class _HtaReader:
    """``--compat hta``: HTA's own figures of the rank files, read by HTA where they are."""

    def __init__(self, executor: Executor) -> None:
        self._executor = executor

    def __call__(self, paths: Mapping[int, str], version: str) -> tuple[Any, ...]:
        return self._executor.call(hta_figures, dict(paths), version)


def _nccl(inputs: Sequence[str], logs: tuple[Path, ...]) -> tuple[NcclSummary | None, list[str]]:
    from tracecomm.nccl.discover import analyze_nccl
    from tracecomm.nccl.discover import discover as discover_nccl

    local = [str(p) for p in map(local_path, inputs) if p is not None]
    return analyze_nccl(discover_nccl(local, logs))


def _power_logs(inputs: Sequence[str | Path]) -> tuple[tuple[PowerLog, ...], list[str]]:
    """Power logs in the run folders; one that cannot be read is a warning, not an error."""
    logs, warnings = [], []
    for path in find_power_logs(inputs):
        try:
            logs.append(load_power_log(path))
        except PowerLogError as exc:
            warnings.append(f"power log skipped: {exc}")
    return tuple(logs), warnings


def _load_analysis() -> None:
    """The cross-rank analysis's modules (a third of the client's imports), loaded while the
    workers parse; and the GPU peak table, whose 175 patterns the first lookup read and
    compiled after the last rank, where nothing else runs (3.6 ms of CPU)."""
    import tracecomm.analysis.build  # noqa: F401
    from tracecomm.mfu.peaks import peak_table

    peak_table()


def _map_files(
    paths: list[str],
    request: Request,
    work: RankWork,
    progress: Progress | None,
    executor: Executor,
    meanwhile: Callable[[], None] | None = None,
) -> list[RankResult | FileFailure]:
    cached = request.cache is not None and _all_cached(paths, request.cache, work)
    least = executor.pool_min_bytes if isinstance(executor, LocalExecutor) else None
    jobs = 1 if cached else jobs_for(paths, request.jobs, least)
    threads = 1 if cached else threads_for(paths, request.jobs, jobs)
    per_file = executor.map(
        analyze_file,
        paths,
        (work,),
        progress,
        lambda p, e: [_lost(p, e)],
        jobs,
        meanwhile,
        threads=threads,
    )
    return [outcome for outcomes in per_file for outcome in outcomes]


def _all_cached(paths: Sequence[str], cache: Path, work: RankWork) -> bool:
    """Every file has an entry: reading Parquet / results costs less than starting a pool."""
    from tracecomm.run.cache import cache_key
    from tracecomm.run.sources import scheme

    try:
        return all(
            scheme(p) is None and (cache / cache_key(Path(p), work.read)).is_dir() for p in paths
        )
    except OSError:
        return False


def _lost(path: str, exc: BaseException) -> FileFailure:
    """A task the executor could not complete (its worker kept dying, or its result did not
    come back): the rank is missing, with the reason."""
    name = type(exc).__name__
    if name == "KilledWorker":
        reason = f"the worker parsing it died too often (Dask KilledWorker: {exc})"
    elif isinstance(exc, WorkerDied):
        reason = f"the process parsing it {exc.how}; other ranks kept"
    else:
        reason = f"lost by the executor ({name}: {exc})"
    return FileFailure(path, reason)


# --- summaries: ``tracecomm ingest`` writes them, ``analyze`` reads them -----------------------


@dataclass(frozen=True)
class IngestResult:
    out: Path
    summaries: int  # files written, failures included
    ranks: int
    failures: tuple[FileFailure, ...]


def ingest(
    request: Request,
    out: Path,
    progress: Progress | None = None,
    executor: Executor | None = None,
) -> IngestResult:
    """Each rank's result as a summary in ``out`` (written by the worker that parsed it), plus
    the run's settings, model config and NCCL logs, so that ``analyze out`` gives the figures
    ``analyze inputs`` gives."""
    executor = executor or LocalExecutor()
    sources = list(request.inputs)
    _refuse_inside(out, sources)
    discovery = executor.call(discover, sources)
    if discovery.summaries:
        raise UsageError("the inputs are summaries already: analyze them, or ingest the traces")
    run = executor.call(read_run, discovery, request.model)
    work = _work(request, run)
    executor.call(_prepare_out, str(out), sources, request.nccl_logs)
    traces = list(discovery.traces)
    jobs = jobs_for(traces, request.jobs)
    written = executor.map(
        ingest_file,
        traces,
        (str(out), work),
        progress,
        _lost_ingest,
        jobs,
        threads=threads_for(traces, request.jobs, jobs),
    )
    lost = [w for w in written if isinstance(w, FileFailure)]
    if lost:
        executor.call(_write_failures, str(out), lost, work.breakdown)
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
            raise UsageError(
                f"--output {out}: inside the input folder {item}; choose another folder"
            )


def _prepare_out(out: str, inputs: Sequence[str], nccl_logs: tuple[Path, ...]) -> None:
    """The folder, with what ``analyze`` reads from a run folder besides traces: the settings
    file (and a model config it names beside it), NCCL logs and Flight Recorder dumps."""
    from tracecomm.nccl.discover import discover as discover_nccl

    folder = Path(out)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        local = [str(p) for p in map(local_path, inputs) if p is not None]
        settings = settings_path(local)
        if settings is not None:
            shutil.copy2(settings, folder / settings.name)
            config = read_settings(local).model.model_config
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
        raise OutputError(f"--output {out}: cannot write: {exc.strerror or exc}") from None


def _lost_ingest(path: str, exc: BaseException) -> FileFailure:
    if isinstance(exc, OSError):
        return FileFailure(path, f"its summary could not be written: {exc.strerror or exc}")
    return _lost(path, exc)


def _write_failures(out: str, failures: list[FileFailure], opts: BreakdownOptions) -> None:
    from tracecomm.run.summaries import write_summary

    for failure in failures:
        write_summary(Path(out), failure, opts)


def _summary_outcome(path: str) -> tuple[RankResult | FileFailure, BreakdownOptions | None]:
    from tracecomm.run.summaries import SummaryError, read_summary

    try:
        return read_summary(path)
    except SummaryError as exc:
        return FileFailure(exc.path, exc.reason), None


def _load_summaries(
    paths: list[str], progress: Progress | None, executor: Executor
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
