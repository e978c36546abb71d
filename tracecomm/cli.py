"""Command line: parse options, run the pipeline, pick a renderer, map errors to exit codes.

Heavy modules (polars, numpy, the pipeline) are imported inside commands so that
``tracecomm --help`` stays fast.
"""

from __future__ import annotations

import dataclasses
import decimal
import os
import re
import sys
from collections.abc import Callable
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from tracecomm import __version__

if TYPE_CHECKING:
    from tracecomm.analysis.model import Report
    from tracecomm.executors import ExecutorSpec
    from tracecomm.gate.compare import CheckResult
    from tracecomm.gate.figures import RunFigures
    from tracecomm.mfu.inputs import ModelInputs
    from tracecomm.pipeline import AnalyzeOptions

EXIT_OK = 0
EXIT_USAGE = 2  # bad option or path (also click's own usage errors)
EXIT_NO_INPUT = 3  # nothing usable: no traces found, or every file failed
EXIT_PARTIAL = 4  # a report was produced, but some rank is missing or was only partly readable
EXIT_HTA_FAILED = 5  # tracecomm crosscheck: HTA itself raised on the run (its exception, one line)
EXIT_INTERNAL = 70  # a bug in tracecomm (EX_SOFTWARE)

_MFU: dict[str, Any] = {"rich_help_panel": "MFU (model FLOPs and device peak)"}
_GATE: dict[str, Any] = {"rich_help_panel": "Budgets (relative: 5% or 0.05; times: 12ms, 100us)"}

app = typer.Typer(
    name="tracecomm",
    help="Why is a distributed training run slower than its GPUs? Reads PyTorch profiler "
    "(Kineto) traces and reports compute / communication overlap, exposed collectives and idle "
    "time per rank.",
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)


class Detail(str, Enum):
    instances = "instances"
    timeline = "timeline"


class Compat(str, Enum):
    hta = "hta"  # HTA's current release (0.6.1); tracecomm/compat/hta.py MODES
    hta_06 = "hta-0.6"
    hta_05 = "hta-0.5"


class RankFrom(str, Enum):
    pid = "pid"
    process_name = "process_name"


class TableFormat(str, Enum):
    terminal = "terminal"
    json = "json"


class OutputFormat(str, Enum):
    terminal = "terminal"
    json = "json"
    csv = "csv"


def _version(value: bool) -> None:
    if value:
        typer.echo(f"tracecomm {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version."),
    ] = False,
) -> None:
    """tracecomm: compute / communication analysis of distributed training traces."""


_STEPS = re.compile(r"^\s*(-?\d+)?\s*(:)?\s*(-?\d+)?\s*$")


def parse_steps(text: str | None) -> tuple[int | None, int | None]:
    """``3:7`` (inclusive), ``3:``, ``:7`` or ``5`` to (first, last) step numbers."""
    if text is None:
        return None, None
    match = _STEPS.match(text)
    if not match or (match.group(1) is None and match.group(3) is None):
        raise typer.BadParameter(f"{text!r}: expected A:B, A:, :B or A (ProfilerStep numbers)")
    first, colon, last = match.groups()
    lo = int(first) if first is not None else None
    hi = int(last) if last is not None else (None if colon else lo)
    if lo is not None and hi is not None and lo > hi:
        raise typer.BadParameter(f"{text!r}: first step is after the last one")
    return lo, hi


RunArg = Annotated[
    list[str],
    typer.Argument(
        metavar="RUN",
        help="Run folder(s), searched recursively for *.json[.gz], trace files, URLs (file://, "
        "s3://, gs:// with fsspec), or folders `tracecomm ingest` wrote.",
    ),
]
StepsOpt = Annotated[
    str | None,
    typer.Option(help="ProfilerStep numbers to analyze, inclusive: 3:7, 3:, :7 or 5."),
]
AllStepsOpt = Annotated[
    bool, typer.Option("--all-steps", help="Also analyze incomplete (cut-short) steps.")
]
CommPatternOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--comm-pattern",
        help="REGEX[=TYPE] (case-sensitive, Rust syntax): kernels and GPU ranges (NVTX) whose "
        "name matches count as communication, of collective TYPE (e.g. AllReduce). Repeatable.",
    ),
]
ComputePatternOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--compute-pattern",
        help="REGEX: kernels and GPU ranges whose name matches count as compute, even when "
        "they look like a collective. Repeatable.",
    ),
]
CacheOpt = Annotated[
    Path | None,
    typer.Option(
        "--cache",
        help="Keep each rank's parsed columns in this folder (Parquet) so the next analyze / "
        "check of the same files skips the parse. Off by default.",
    ),
]
JobsOpt = Annotated[
    int | None,
    typer.Option("--jobs", "-j", min=1, help="Parallel parse processes (default: per core)."),
]
ExecutorOpt = Annotated[
    str | None,
    typer.Option(
        "--executor",
        help="Where the per-rank parse runs: local (default, a process pool), dask (a local "
        "Dask cluster of --jobs workers) or dask://HOST:PORT (a running scheduler; its workers "
        "read the inputs, only per-rank summaries come back). Needs tracecomm[dask].",
    ),
]
NoClockAlignOpt = Annotated[
    bool, typer.Option("--no-clock-align", help="Do not estimate per-host clock offsets.")
]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="No warnings on stderr.")]
FlopsPerStepOpt = Annotated[
    str | None,
    typer.Option(help="Model FLOPs of one training step (fwd + bwd), e.g. 3.16e15.", **_MFU),
]
FlopsPerTokenOpt = Annotated[
    str | None, typer.Option(help="Training FLOPs per token; needs --tokens-per-step.", **_MFU)
]
TokensPerStepOpt = Annotated[
    int | None, typer.Option(min=1, help="Global tokens per step (each counted once).", **_MFU)
]
ModelConfigOpt = Annotated[
    Path | None,
    typer.Option(
        help="Hugging Face config.json (Llama-style, MoE, MLA); needs --seq-len and "
        "--global-batch.",
        **_MFU,
    ),
]
SeqLenOpt = Annotated[int | None, typer.Option(min=1, help="Training sequence length T.", **_MFU)]
GlobalBatchOpt = Annotated[
    int | None, typer.Option(min=1, help="Sequences per step, all ranks.", **_MFU)
]
FormulaOpt = Annotated[
    str,
    typer.Option(
        help="With --model-config: exact (default), 6n, 6n-hf, palm, torchtitan, megatron.",
        **_MFU,
    ),
]
AttentionOpt = Annotated[
    str,
    typer.Option(
        help="Causal attention in the exact count: halved (default) or full (the square).",
        **_MFU,
    ),
]
DtypeOpt = Annotated[
    str, typer.Option(help="Peak to compare with: bf16 (default), fp16, fp8, tf32, fp32.", **_MFU)
]
PeakOpt = Annotated[
    float | None,
    typer.Option(help="Dense peak TFLOP/s per device, overriding the peak table.", **_MFU),
]

NcclLogOpt = Annotated[
    list[Path] | None,
    typer.Option(
        "--nccl-log",
        help="An NCCL debug log outside the run folder (those inside are found). Repeatable.",
    ),
]
RankFromOpt = Annotated[
    RankFrom | None,
    typer.Option(
        help="The trace files are merged traces holding several ranks: take each "
        "process's rank from its pid or its process_name metadata ('rank 3')."
    ),
]
LinkGbpsOpt = Annotated[
    float | None,
    typer.Option(
        min=0.001,
        help="Link bandwidth in Gbit/s: the bandwidth table adds the share of collectives "
        "whose bus bandwidth stays below it.",
    ),
]
TimelineRanksOpt = Annotated[
    str | None,
    typer.Option(
        help="Ranks for the one-step timeline, e.g. 0,7,12 (default: the fastest, median and "
        "slowest by median step time, and the worst straggler)."
    ),
]
ProjectOpt = Annotated[
    bool,
    typer.Option(
        "--project",
        help="Add the scaling projection (metrics.md §11) to N/2, 2N, 4N, 8N and 16N GPUs.",
        rich_help_panel="Scaling projection",
    ),
]
WeakOpt = Annotated[
    bool,
    typer.Option(
        "--weak",
        help="Project under weak scaling (per-rank batch kept) instead of strong (global batch "
        "kept).",
        rich_help_panel="Scaling projection",
    ),
]
PpStagesOpt = Annotated[
    int | None,
    typer.Option(
        "--pp-stages",
        min=1,
        help="Pipeline stages p for the textbook bubble (default: from the send/recv pattern).",
    ),
]
MicrobatchesOpt = Annotated[
    int | None,
    typer.Option(
        "--microbatches",
        min=1,
        help="Micro-batches per step m for the textbook bubble (default: stage 0's sends).",
    ),
]


@dataclasses.dataclass(frozen=True)
class _Analysis:
    """The options every command that analyzes a run shares."""

    steps: str | None = None
    all_steps: bool = False
    comm_pattern: list[str] | None = None
    jobs: int | None = None
    no_clock_align: bool = False
    model_flops_per_step: str | None = None
    flops_per_token: str | None = None
    tokens_per_step: int | None = None
    model_config: Path | None = None
    seq_len: int | None = None
    global_batch: int | None = None
    flops_formula: str = "exact"
    attention: str = "halved"
    dtype: str = "bf16"
    peak_tflops: float | None = None
    nccl_logs: tuple[Path, ...] = ()
    link_gbps: float | None = None
    compat_hta: str | None = None  # a --compat value

    @classmethod
    def of(cls, params: dict[str, Any], **extra: Any) -> _Analysis:
        """From a command's parameters (``locals()``): the ones this class has, plus ``extra``."""
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**({k: v for k, v in params.items() if k in names} | extra))

    def model(self) -> ModelInputs:
        from tracecomm.mfu.inputs import ModelInputs

        shared = {f.name for f in dataclasses.fields(ModelInputs)} & set(self.__dict__)
        values = {name: getattr(self, name) for name in shared}
        # FLOP counts are read as decimals here: 3.16e15 is a whole number
        values["model_flops_per_step"] = _flops(self.model_flops_per_step, "--model-flops-per-step")
        values["flops_per_token"] = _flops(self.flops_per_token, "--flops-per-token")
        return ModelInputs(**values)

    compute_pattern: list[str] | None = None
    executor: str | None = None
    rank_from: str | None = None
    cache: Path | None = None
    timeline_ranks: str | None = None
    weak: bool = False
    pp_stages: int | None = None
    microbatches: int | None = None

    def run(
        self,
        inputs: list[str],
        detail_instances: bool = False,
        show_progress: bool = False,
        no_input_code: int = EXIT_NO_INPUT,
        timeline: bool = False,
        project_to: tuple[int, ...] | None = None,
    ) -> Report:
        spec = self.executor_spec()
        from tracecomm.pool import start_pool

        # the workers start importing while this process loads the pipeline below
        local = not spec.remote and self.cache is None and self.rank_from is None
        pool = start_pool(inputs, self.jobs) if local else None
        from tracecomm.errors import NoUsableInput, UsageError
        from tracecomm.executors import open_executor
        from tracecomm.pipeline import analyze as run_pipeline

        opts = self.options(detail_instances, timeline, project_to)
        executor = None
        try:
            executor = open_executor(spec, self.jobs, pool)
            return run_pipeline(
                inputs, opts, _progress() if show_progress else None, executor=executor
            )
        except UsageError as exc:
            _fail(str(exc), EXIT_USAGE)
        except NoUsableInput as exc:
            _fail(str(exc), no_input_code)
        finally:
            if executor is not None:
                executor.close()
            elif pool is not None:
                pool.shutdown(wait=False, cancel_futures=True)

    def executor_spec(self) -> ExecutorSpec:
        from tracecomm.errors import UsageError
        from tracecomm.executors import parse_executor

        try:
            return parse_executor(self.executor)
        except UsageError as exc:
            _fail(str(exc), EXIT_USAGE)

    def options(
        self,
        detail_instances: bool = False,
        timeline: bool = False,
        project_to: tuple[int, ...] | None = None,
    ) -> AnalyzeOptions:
        first, last = parse_steps(self.steps)
        patterns = tuple(self.comm_pattern or ())
        computes = tuple(self.compute_pattern or ())
        if patterns or computes:
            from tracecomm.engine.classify import check_pattern, split_rule

            for flag, rules in (("--comm-pattern", patterns), ("--compute-pattern", computes)):
                for rule in rules:
                    problem = check_pattern(split_rule(rule)[0])
                    if problem:
                        raise typer.BadParameter(f"{rule!r}: {problem}", param_hint=flag)
        from tracecomm.engine import BreakdownOptions
        from tracecomm.pipeline import AnalyzeOptions

        return AnalyzeOptions(
            breakdown=BreakdownOptions(first, last, self.all_steps, patterns, computes),
            jobs=self.jobs,
            align_clocks=not self.no_clock_align,
            detail_instances=detail_instances,
            model=self.model(),
            nccl_logs=self.nccl_logs,
            link_gbps=self.link_gbps,
            compat_hta=self.compat_hta,
            rank_from=self.rank_from,
            cache=self.cache,
            timeline=timeline,
            timeline_ranks=_rank_list(self.timeline_ranks),
            project_to=project_to,
            weak=self.weak,
            pp_stages=self.pp_stages,
            microbatches=self.microbatches,
        )


@app.command()
def analyze(
    ctx: typer.Context,
    run: RunArg,
    output_format: Annotated[
        OutputFormat,
        typer.Option("--format", "-f", help="terminal report, one JSON document, or per-rank CSV."),
    ] = OutputFormat.terminal,
    steps: StepsOpt = None,
    all_steps: AllStepsOpt = False,
    comm_pattern: CommPatternOpt = None,
    compute_pattern: ComputePatternOpt = None,
    jobs: JobsOpt = None,
    executor: ExecutorOpt = None,
    cache: CacheOpt = None,
    no_clock_align: NoClockAlignOpt = False,
    detail: Annotated[
        list[Detail] | None,
        typer.Option(
            help="Add bulky records to the JSON: 'instances' (every matched collective), "
            "'timeline' (one step of the fastest, median and slowest rank, as the HTML report "
            "draws it). Repeatable."
        ),
    ] = None,
    top: Annotated[
        int | None,
        typer.Option(
            "--top",
            min=1,
            help="Straggler ranks to list by root delay (default: 8 in the terminal, all in JSON).",
        ),
    ] = None,
    model_flops_per_step: FlopsPerStepOpt = None,
    flops_per_token: FlopsPerTokenOpt = None,
    tokens_per_step: TokensPerStepOpt = None,
    model_config: ModelConfigOpt = None,
    seq_len: SeqLenOpt = None,
    global_batch: GlobalBatchOpt = None,
    flops_formula: FormulaOpt = "exact",
    attention: AttentionOpt = "halved",
    dtype: DtypeOpt = "bf16",
    peak_tflops: PeakOpt = None,
    nccl_log: NcclLogOpt = None,
    rank_from: RankFromOpt = None,
    compat: Annotated[
        Compat | None,
        typer.Option(
            help="Also print another tool's figures, reproduced exactly: 'hta' (HTA's current "
            "release, 0.6.1; 'hta-0.6' the same), 'hta-0.5' (HTA 0.5.0)."
        ),
    ] = None,
    link_gbps: LinkGbpsOpt = None,
    timeline_ranks: TimelineRanksOpt = None,
    project: ProjectOpt = False,
    weak: WeakOpt = False,
    pp_stages: PpStagesOpt = None,
    microbatches: MicrobatchesOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Per-rank compute / communication breakdown of a run's profiler traces.

    Exit codes: 0 success; 2 usage error; 3 no usable input; 4 partial result (a rank is
    missing or was only partly readable; the report covers the others); 70 internal error.
    """
    memo = _memo(cache, "analyze", ctx.params)
    analysis = _Analysis.of(
        locals(),
        nccl_logs=tuple(nccl_log or ()),
        compat_hta=compat.value if compat else None,
        rank_from=rank_from.value if rank_from else None,
    )
    report = analysis.run(
        run,
        Detail.instances in (detail or ()),
        show_progress=output_format is OutputFormat.terminal,
        timeline=Detail.timeline in (detail or ()),
        project_to=() if project else None,
    )
    lines = [] if quiet else _warning_lines(report)
    if top is not None and report.stragglers is not None:
        ranks = report.stragglers.ranks[:top]
        report = dataclasses.replace(
            report, stragglers=dataclasses.replace(report.stragglers, ranks=ranks)
        )
    code = EXIT_PARTIAL if report.partial else EXIT_OK
    if memo is None:
        _print_lines(lines)
        _render(report, output_format, top)
        raise typer.Exit(code)
    _finish(memo, _render_bytes(report, output_format, top), lines, code)


@app.command()
def ingest(
    run: RunArg,
    out: Annotated[
        Path,
        typer.Option(
            "--out",
            "-o",
            help="Folder for the per-rank summaries (*.tcsum.parquet); never inside the run.",
        ),
    ],
    steps: StepsOpt = None,
    all_steps: AllStepsOpt = False,
    comm_pattern: CommPatternOpt = None,
    compute_pattern: ComputePatternOpt = None,
    jobs: JobsOpt = None,
    executor: ExecutorOpt = None,
    cache: CacheOpt = None,
    nccl_log: NcclLogOpt = None,
    rank_from: RankFromOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Parse each rank and write its summary (a few KB of Parquet), for `analyze OUT` later.

    Run it where the traces are (a job's epilogue, on each node, into one shared folder):
    `tracecomm analyze OUT` then reads only the summaries and gives the figures `analyze RUN`
    gives. Steps and rules are fixed here. Exit codes: 0 written; 2 usage error; 3 no usable
    input; 4 some file produced no rank (its failure is stored and reported by analyze).
    """
    analysis = _Analysis.of(
        locals(),
        nccl_logs=tuple(nccl_log or ()),
        rank_from=rank_from.value if rank_from else None,
    )
    spec = analysis.executor_spec()
    from tracecomm.errors import NoUsableInput, UsageError
    from tracecomm.executors import open_executor
    from tracecomm.pipeline import ingest as run_ingest

    opts = analysis.options()
    pool = None
    try:
        pool = open_executor(spec, jobs)
        done = run_ingest(run, out, opts, _progress(), pool)
    except UsageError as exc:
        _fail(str(exc), EXIT_USAGE)
    except NoUsableInput as exc:
        _fail(str(exc), EXIT_NO_INPUT)
    finally:
        if pool is not None:
            pool.close()
    if not quiet:
        for failure in done.failures:
            _stderr(f"warning: {failure.path}: {failure.reason}")
        _stderr(f"{done.ranks} rank summaries written to {done.out}")
    if not done.ranks:
        raise typer.Exit(EXIT_NO_INPUT)
    real = [f for f in done.failures if not f.not_a_trace]
    raise typer.Exit(EXIT_PARTIAL if real else EXIT_OK)


@app.command()
def report(
    run: RunArg,
    output: Annotated[
        Path,
        typer.Option(
            "--output",
            "-o",
            dir_okay=False,
            help="The HTML file to write: one self-contained page that opens offline.",
        ),
    ],
    steps: StepsOpt = None,
    all_steps: AllStepsOpt = False,
    comm_pattern: CommPatternOpt = None,
    compute_pattern: ComputePatternOpt = None,
    jobs: JobsOpt = None,
    executor: ExecutorOpt = None,
    cache: CacheOpt = None,
    no_clock_align: NoClockAlignOpt = False,
    model_flops_per_step: FlopsPerStepOpt = None,
    flops_per_token: FlopsPerTokenOpt = None,
    tokens_per_step: TokensPerStepOpt = None,
    model_config: ModelConfigOpt = None,
    seq_len: SeqLenOpt = None,
    global_batch: GlobalBatchOpt = None,
    flops_formula: FormulaOpt = "exact",
    attention: AttentionOpt = "halved",
    dtype: DtypeOpt = "bf16",
    peak_tflops: PeakOpt = None,
    nccl_log: NcclLogOpt = None,
    rank_from: RankFromOpt = None,
    link_gbps: LinkGbpsOpt = None,
    timeline_ranks: TimelineRanksOpt = None,
    project: ProjectOpt = False,
    weak: WeakOpt = False,
    pp_stages: PpStagesOpt = None,
    microbatches: MicrobatchesOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """A self-contained HTML report of the run: headline, per-rank bars, straggler heat map,
    one-step timeline, collective bandwidth and the scaling view.

    The page embeds the same JSON document as `analyze --format json --detail timeline`.
    Exit codes as for analyze: 0, 2, 3, 4 (written, but a rank is missing), 70.
    """
    analysis = _Analysis.of(
        locals(),
        nccl_logs=tuple(nccl_log or ()),
        rank_from=rank_from.value if rank_from else None,
    )
    result = analysis.run(
        run, show_progress=True, timeline=True, project_to=() if project else None
    )
    if not quiet:
        _warn(result)
    from tracecomm.render.document import report_document
    from tracecomm.render.html import render_html

    page = render_html(report_document(result)).encode()
    try:
        output.write_bytes(page)
    except OSError as exc:
        _fail(f"{output}: cannot write the report: {exc.strerror or exc}", EXIT_USAGE)
    if not quiet:
        _stderr(f"wrote {output} ({len(page) / 1e6:.2f} MB)")
    raise typer.Exit(EXIT_PARTIAL if result.partial else EXIT_OK)


@app.command()
def project(
    run: RunArg,
    to: Annotated[
        str | None,
        typer.Option(
            "--to",
            help="World sizes to project to, e.g. 256,512,1024 (default: N/2, 2N, 4N, 8N, 16N).",
        ),
    ] = None,
    weak: WeakOpt = False,
    output_format: Annotated[
        TableFormat, typer.Option("--format", "-f", help="terminal table or one JSON document.")
    ] = TableFormat.terminal,
    steps: StepsOpt = None,
    all_steps: AllStepsOpt = False,
    comm_pattern: CommPatternOpt = None,
    compute_pattern: ComputePatternOpt = None,
    jobs: JobsOpt = None,
    executor: ExecutorOpt = None,
    cache: CacheOpt = None,
    no_clock_align: NoClockAlignOpt = False,
    model_flops_per_step: FlopsPerStepOpt = None,
    flops_per_token: FlopsPerTokenOpt = None,
    tokens_per_step: TokensPerStepOpt = None,
    model_config: ModelConfigOpt = None,
    seq_len: SeqLenOpt = None,
    global_batch: GlobalBatchOpt = None,
    flops_formula: FormulaOpt = "exact",
    attention: AttentionOpt = "halved",
    dtype: DtypeOpt = "bf16",
    peak_tflops: PeakOpt = None,
    rank_from: RankFromOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """What this job would do at other world sizes (metrics.md §11): fitted per-collective
    latency and bandwidth, and the median rank's step replayed at each size. An estimate.

    Exit codes: 0; 2 usage error; 3 no usable input or nothing to project from; 4 partial.
    """
    targets = _rank_list(to) if to is not None else ()
    if to is not None and (not targets or min(targets) < 1):
        raise typer.BadParameter(f"{to!r}: world sizes must be positive", param_hint="--to")
    analysis = _Analysis.of(locals(), rank_from=rank_from.value if rank_from else None)
    result = analysis.run(
        run, show_progress=output_format is TableFormat.terminal, project_to=targets
    )
    if not quiet:
        _warn(result)
    if output_format is TableFormat.json:
        from tracecomm.render.formats import render_json

        sys.stdout.buffer.write(render_json(result))
    else:
        from rich.console import Console

        from tracecomm.render.projection_section import projection_section

        assert result.projection is not None
        Console(width=None if sys.stdout.isatty() else 160).print(
            projection_section(result.projection)
        )
    if isinstance(result.projection, str):
        raise typer.Exit(EXIT_NO_INPUT)
    raise typer.Exit(EXIT_PARTIAL if result.partial else EXIT_OK)


class CheckFormat(str, Enum):
    terminal = "terminal"
    json = "json"
    github = "github"
    junit = "junit"
    markdown = "markdown"


EXIT_REGRESSION = 1  # tracecomm check: a figure passed its budget


@app.command()
def check(
    ctx: typer.Context,
    run: Annotated[
        Path,
        typer.Argument(help="The current run: a folder of traces, or its analyze JSON."),
    ],
    baseline: Annotated[
        Path,
        typer.Option(
            "--baseline",
            "-b",
            help="A baseline from `tracecomm baseline`, an analyze JSON, or a run folder.",
        ),
    ],
    output_format: Annotated[
        CheckFormat,
        typer.Option(
            "--format", "-f", help="terminal, json, github (annotations), junit, markdown."
        ),
    ] = CheckFormat.terminal,
    max_step_time_increase: Annotated[
        str | None, typer.Option(help="Relative budget, e.g. 3% (default 3%).", **_GATE)
    ] = None,
    max_exposed_comm_increase: Annotated[
        str | None,
        typer.Option(help="Relative, total and per collective type (default 5%).", **_GATE),
    ] = None,
    max_idle_increase: Annotated[
        str | None, typer.Option(help="Relative (default 10%).", **_GATE)
    ] = None,
    max_overlap_decrease: Annotated[
        str | None, typer.Option(help="Relative (default 5%).", **_GATE)
    ] = None,
    max_mfu_decrease: Annotated[
        str | None, typer.Option(help="Relative (default 3%).", **_GATE)
    ] = None,
    max_straggler_delay_increase: Annotated[
        str | None, typer.Option(help="Relative (default 50%).", **_GATE)
    ] = None,
    max_step_time: Annotated[
        str | None, typer.Option(help="Absolute cap, e.g. 120ms.", **_GATE)
    ] = None,
    max_exposed_comm: Annotated[
        str | None, typer.Option(help="Absolute cap, e.g. 12ms.", **_GATE)
    ] = None,
    max_idle: Annotated[str | None, typer.Option(help="Absolute cap.", **_GATE)] = None,
    min_overlap: Annotated[
        str | None, typer.Option(help="Absolute floor in %, e.g. 70.", **_GATE)
    ] = None,
    min_mfu: Annotated[
        str | None, typer.Option(help="Absolute floor, e.g. 0.35 or 35%.", **_GATE)
    ] = None,
    max_straggler_delay: Annotated[
        str | None, typer.Option(help="Absolute cap on the worst rank's root delay.", **_GATE)
    ] = None,
    noise_floor: Annotated[
        list[str] | None,
        typer.Option(
            help="FIGURE=VALUE: a change below it never regresses (e.g. exposed_comm=50us). "
            "Repeatable.",
            **_GATE,
        ),
    ] = None,
    steps: StepsOpt = None,
    all_steps: AllStepsOpt = False,
    comm_pattern: CommPatternOpt = None,
    jobs: JobsOpt = None,
    executor: ExecutorOpt = None,
    cache: CacheOpt = None,
    model_flops_per_step: FlopsPerStepOpt = None,
    flops_per_token: FlopsPerTokenOpt = None,
    tokens_per_step: TokensPerStepOpt = None,
    model_config: ModelConfigOpt = None,
    seq_len: SeqLenOpt = None,
    global_batch: GlobalBatchOpt = None,
    flops_formula: FormulaOpt = "exact",
    attention: AttentionOpt = "halved",
    dtype: DtypeOpt = "bf16",
    peak_tflops: PeakOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Gate a run against a baseline: exit 1 when a figure got worse than its budget allows.

    Compares medians over steps and ranks (step time, exposed comm in total and per collective
    type, overlap, idle, MFU, straggler delay). A figure regresses when it is worse by more
    than its relative budget AND by more than its noise floor, or beyond an absolute cap.
    Budgets also come from a [check] table in tracecomm.toml (flags win).

    Exit codes: 0 pass; 1 regression; 2 usage or input error.
    """
    from tracecomm.gate.budgets import DEFAULT_BUDGETS, BudgetError, apply
    from tracecomm.gate.compare import NothingShared, compare

    analysis = _Analysis.of(locals())
    flags = {
        "max_step_time_increase": max_step_time_increase,
        "max_exposed_comm_increase": max_exposed_comm_increase,
        "max_idle_increase": max_idle_increase,
        "max_overlap_decrease": max_overlap_decrease,
        "max_mfu_decrease": max_mfu_decrease,
        "max_straggler_delay_increase": max_straggler_delay_increase,
        "max_step_time": max_step_time,
        "max_exposed_comm": max_exposed_comm,
        "max_idle": max_idle,
        "min_overlap": min_overlap,
        "min_mfu": min_mfu,
        "max_straggler_delay": max_straggler_delay,
        "noise_floor": _pairs(noise_floor, "--noise-floor"),
    }
    try:
        budgets = apply(flags, apply(_check_settings(run), DEFAULT_BUDGETS))
    except BudgetError as exc:
        _fail(str(exc), EXIT_USAGE)
    # the github format also appends to $GITHUB_STEP_SUMMARY: a replay would skip that
    memo = _memo(cache, "check", ctx.params) if output_format is not CheckFormat.github else None
    lines: list[str] = []
    current = _figures(run, analysis, quiet, lines)
    base = _figures(baseline, analysis, quiet, lines)
    try:
        result = compare(base, current, budgets)
    except NothingShared as exc:
        _print_lines(lines)
        _fail(str(exc), EXIT_USAGE)
    code = EXIT_OK if result.passed else EXIT_REGRESSION
    if memo is None:
        _print_lines(lines)
        _render_check(result, output_format)
        raise typer.Exit(code)
    _finish(memo, _check_bytes(result, output_format), lines, code)


@app.command()
def baseline(
    run: Annotated[
        Path, typer.Argument(help="The run to take as the baseline: a folder, or its analyze JSON.")
    ],
    output: Annotated[
        Path, typer.Option("--output", "-o", help="Where to write the baseline JSON.")
    ],
    steps: StepsOpt = None,
    all_steps: AllStepsOpt = False,
    comm_pattern: CommPatternOpt = None,
    jobs: JobsOpt = None,
    executor: ExecutorOpt = None,
    cache: CacheOpt = None,
    model_flops_per_step: FlopsPerStepOpt = None,
    flops_per_token: FlopsPerTokenOpt = None,
    tokens_per_step: TokensPerStepOpt = None,
    model_config: ModelConfigOpt = None,
    seq_len: SeqLenOpt = None,
    global_batch: GlobalBatchOpt = None,
    flops_formula: FormulaOpt = "exact",
    attention: AttentionOpt = "halved",
    dtype: DtypeOpt = "bf16",
    peak_tflops: PeakOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Write the compact baseline `tracecomm check --baseline` reads (figures only, versioned).

    Exit codes: 0 written; 2 usage or input error.
    """
    import orjson

    from tracecomm.gate.figures import baseline_document

    analysis = _Analysis.of(locals())
    figures = _figures(run, analysis, quiet)
    try:
        output.write_bytes(
            orjson.dumps(baseline_document(figures), option=orjson.OPT_INDENT_2) + b"\n"
        )
    except OSError as exc:
        _fail(f"{output}: {exc.strerror or exc}", EXIT_USAGE)
    if not quiet:
        _stderr(f"baseline of {len(figures.ranks)} ranks written to {output}")


def _figures(
    path: Path, analysis: _Analysis, quiet: bool, warnings: list[str] | None = None
) -> RunFigures:
    """Gate figures of a run folder (analyzed now), an analyze JSON or a baseline file."""
    from tracecomm.gate.figures import BaselineError, from_document, read_baseline_file
    from tracecomm.render.document import report_document

    if path.is_file() and path.suffix == ".json":
        try:
            return read_baseline_file(path)
        except BaselineError as exc:
            _fail(str(exc), EXIT_USAGE)
    if not path.exists():
        _fail(f"{path}: no such file or folder", EXIT_USAGE)
    report = analysis.run([str(path)], no_input_code=EXIT_USAGE)
    if quiet:
        pass
    elif warnings is None:
        _warn(report)
    else:
        warnings.extend(_warning_lines(report))
    return from_document(report_document(report), str(path))


def _check_settings(run: Path) -> dict[str, Any]:
    """The [check] table of tracecomm.toml in the run folder."""
    from tracecomm.mfu.inputs import InputError, read_settings

    try:
        return dict(read_settings([str(run)]).get("check", {}))
    except InputError as exc:
        _fail(str(exc), EXIT_USAGE)


def _pairs(items: list[str] | None, flag: str) -> dict[str, str] | None:
    if not items:
        return None
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep:
            raise typer.BadParameter(f"{item!r}: expected FIGURE=VALUE", param_hint=flag)
        out[name.strip()] = value.strip()
    return out


def _check_bytes(result: CheckResult, output_format: CheckFormat) -> bytes:
    """What ``_render_check`` prints to a pipe (the github format aside), as bytes."""
    from tracecomm.render import check as out

    if output_format is CheckFormat.json:
        return out.render_json(result)
    if output_format is CheckFormat.junit:
        return out.render_junit(result).encode()
    if output_format is CheckFormat.markdown:
        return out.render_markdown(result).encode()
    import io

    text = io.StringIO()
    out.render_terminal(result, text)
    return text.getvalue().encode()


def _render_check(result: CheckResult, output_format: CheckFormat) -> None:
    from tracecomm.render import check as out

    if output_format is CheckFormat.json:
        sys.stdout.buffer.write(out.render_json(result))
    elif output_format is CheckFormat.junit:
        sys.stdout.write(out.render_junit(result))
    elif output_format is CheckFormat.markdown:
        sys.stdout.write(out.render_markdown(result))
    elif output_format is CheckFormat.github:
        sys.stdout.write(out.render_github(result))
        summary = os.environ.get("GITHUB_STEP_SUMMARY")
        if summary:
            with open(summary, "a", encoding="utf-8") as handle:
                handle.write(out.render_markdown(result))
    else:
        out.render_terminal(result, sys.stdout)
    sys.stdout.flush()


class NcclFormat(str, Enum):
    terminal = "terminal"
    json = "json"


@app.command()
def nccl(
    logs: Annotated[
        list[Path],
        typer.Argument(
            help="NCCL debug logs, Flight Recorder dumps (nccl_trace_rank_N), or folders of them."
        ),
    ],
    output_format: Annotated[
        NcclFormat, typer.Option("--format", "-f", help="terminal report or one JSON document.")
    ] = NcclFormat.terminal,
    quiet: QuietOpt = False,
) -> None:
    """The NCCL side alone: versions, networks, transports, WARNs, watchdog timeouts and hangs
    from NCCL_DEBUG logs and Flight Recorder dumps, for users who have no traces.

    Exit codes: 0 success (findings do not change it); 2 usage error; 3 no NCCL log or dump.
    """
    from tracecomm.nccl.discover import analyze_nccl, discover

    missing = [p for p in logs if not p.exists()]
    if missing:
        _fail(f"{missing[0]}: no such file or folder", EXIT_USAGE)
    # a file named on the command line is read as a log even without a log suffix
    found = discover(logs, [p for p in logs if p.is_file()])
    summary, warnings = analyze_nccl(found)
    if not quiet:
        for line in warnings:
            _stderr(f"warning: {line}")
    if summary is None:
        _fail(f"{', '.join(map(str, logs))}: no NCCL log or Flight Recorder dump", EXIT_NO_INPUT)
    if output_format is NcclFormat.json:
        from tracecomm.render.formats import render_nccl_json

        sys.stdout.buffer.write(render_nccl_json(summary, warnings))
    else:
        from rich.console import Console

        from tracecomm.render.nccl_section import nccl_section

        out = Console(file=sys.stdout, width=None if sys.stdout.isatty() else 120)
        out.print(nccl_section(summary))
    sys.stdout.flush()


@app.command()
def crosscheck(
    run: Annotated[Path, typer.Argument(help="A run folder of traces.")],
    quiet: QuietOpt = False,
) -> None:
    """Run the installed HolisticTraceAnalysis itself on the run and print its overlap and
    temporal breakdown next to tracecomm's figures for that HTA release (--compat hta for 0.6,
    hta-0.5 for 0.5), per rank, with the difference.

    Needs the optional extra: pip install 'tracecomm[hta]' (HTA 0.6.1, PyPI traceinsight).
    Exit codes: 0 every figure agrees to the printed precision; 1 some figure differs;
    2 usage error (HTA not installed, no such folder); 3 no usable input; 5 HTA itself failed
    on the run (its exception is printed in one line).
    """
    from tracecomm.compat.crosscheck import (
        HtaFailed,
        HtaMissing,
        compare,
        discovery_notes,
        installed,
        run_hta,
    )

    if not run.is_dir():
        _fail(f"{run}: not a folder of traces", EXIT_USAGE)
    try:
        hta = installed()
    except HtaMissing as exc:
        _fail(str(exc), EXIT_USAGE)
    report = _Analysis(compat_hta=hta.mode).run([str(run)])
    files = {r.rank: r.path for r in report.ranks}  # HTA reads the files tracecomm read
    if not quiet:
        _warn(report)
        notes = [*hta.notes, *discovery_notes(run, files)]
        _print_lines([f"warning: {note}" for note in notes])
    try:
        theirs = run_hta(run, hta.version, files)
    except HtaFailed as exc:
        _fail(str(exc), EXIT_HTA_FAILED)
    rows = compare(list(report.hta_compat or ()), theirs)
    from rich.console import Console
    from rich.table import Table

    table = Table(
        title=f"tracecomm --compat {hta.mode} against HTA {hta.version} run live on {run}",
        caption="µs; overlap in %; agreement to the printed precision",
        title_justify="left",
    )
    for name in ("Rank", "Figure", "tracecomm", "HTA", "Difference", ""):
        table.add_column(name, justify="left" if name in ("Figure", "") else "right")
    for r in rows:
        diff = (
            "–"
            if r.tracecomm is None or r.hta is None
            else f"{r.tracecomm - r.hta:+.2f}"
            if r.figure == "comm_comp_overlap_pct"
            else f"{r.tracecomm - r.hta:+,.0f}"
        )
        table.add_row(
            str(r.rank),
            r.figure,
            _num(r.tracecomm, r.figure),
            _num(r.hta, r.figure),
            diff,
            "✓" if r.agrees else "✗",
            style=None if r.agrees else "bold red",
        )
    Console(file=sys.stdout, width=None if sys.stdout.isatty() else 120).print(table)
    raise typer.Exit(EXIT_OK if all(r.agrees for r in rows) else 1)


def _num(value: float | None, figure: str) -> str:
    if value is None:
        return "–"
    return f"{value:.2f}" if figure == "comm_comp_overlap_pct" else f"{value:,.0f}"


def _warn(report: Report) -> None:
    _print_lines(_warning_lines(report))


def _warning_lines(report: Report) -> list[str]:
    lines = [f"warning: {line}" for line in report.warnings]
    for missing in report.missing:
        who = f"rank {missing.rank}" if missing.rank is not None else "a rank"
        where = f"{missing.path}: " if missing.path else ""
        lines.append(f"error: {who} missing: {where}{missing.reason}")
    lines += [f"warning: skipped {s.path}: {s.reason}" for s in report.skipped]
    return lines


def _print_lines(lines: list[str]) -> None:
    for line in lines:
        _stderr(line)


@dataclasses.dataclass(frozen=True)
class _Memo:
    cache: Path
    key: str


def _memo(cache: Path | None, command: str, params: dict[str, Any]) -> _Memo | None:
    """With ``--cache`` and output to a pipe or file: replay the output of an identical earlier
    command (``memo.py``) and exit, or return where this command's output is to be kept."""
    if cache is None or sys.stdout.isatty():
        return None
    from tracecomm.memo import load, memo_key

    key = memo_key(command, params, cache)
    if key is None:
        return None
    hit = load(cache, key)
    if hit is not None:
        _print_lines(list(hit.stderr))
        sys.stdout.buffer.write(hit.stdout)
        sys.stdout.flush()
        raise typer.Exit(hit.exit_code)
    return _Memo(cache, key)


def _finish(memo: _Memo, out: bytes, lines: list[str], code: int) -> NoReturn:
    """Print, keep for the next identical command, exit."""
    from tracecomm.memo import Replay, store

    _print_lines(lines)
    sys.stdout.buffer.write(out)
    sys.stdout.flush()
    store(memo.cache, memo.key, Replay(out, tuple(lines), code))
    raise typer.Exit(code)


def _progress() -> Callable[[int, int, str], None] | None:
    """A rich progress bar on stderr, only when stderr is a terminal (never in pipes or CI logs)."""
    if not sys.stderr.isatty():
        return None
    from rich.console import Console
    from rich.progress import Progress

    progress = Progress(console=Console(stderr=True), transient=True)
    task = progress.add_task("parsing traces", total=None)

    def report(done: int, total: int, path: str) -> None:
        if done == 0:
            progress.start()
        name = os.path.basename(path) if path else "parsing traces"
        progress.update(task, completed=done, total=total, description=name)
        if done == total:
            progress.stop()

    return report


def _render_bytes(report: Report, output_format: OutputFormat, top: int | None) -> bytes:
    """What ``_render`` prints to a pipe, as bytes."""
    if output_format is OutputFormat.json:
        from tracecomm.render.formats import render_json

        return render_json(report)
    if output_format is OutputFormat.csv:
        from tracecomm.render.formats import render_csv

        return render_csv(report).encode()
    import io

    from tracecomm.render.terminal import render_terminal

    text = io.StringIO()
    render_terminal(report, text, straggler_rows=top)
    return text.getvalue().encode()


def _render(report: Report, output_format: OutputFormat, top: int | None) -> None:
    if output_format is OutputFormat.json:
        from tracecomm.render.formats import render_json

        sys.stdout.buffer.write(render_json(report))
    elif output_format is OutputFormat.csv:
        from tracecomm.render.formats import render_csv

        sys.stdout.write(render_csv(report))
    else:
        from tracecomm.render.terminal import render_terminal

        render_terminal(report, sys.stdout, straggler_rows=top)
    sys.stdout.flush()


def _rank_list(text: str | None) -> tuple[int, ...]:
    if not text:
        return ()
    try:
        return tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise typer.BadParameter(
            f"{text!r}: expected rank numbers separated by commas", param_hint="--timeline-ranks"
        ) from None


def _flops(text: str | None, flag: str) -> int | None:
    """A FLOP count as an integer: 3162058002530304, 3.162e15 or 3_162e12."""
    if text is None:
        return None
    try:
        value = decimal.Decimal(text.replace("_", ""))
    except decimal.InvalidOperation:
        raise typer.BadParameter(f"{text!r} is not a number", param_hint=flag) from None
    if not value.is_finite() or value <= 0:
        raise typer.BadParameter(f"{text!r} must be a positive number", param_hint=flag)
    return int(value.to_integral_value(decimal.ROUND_HALF_UP))


def _stderr(message: str) -> None:
    sys.stderr.write(f"tracecomm: {message}\n")


def _fail(message: str, code: int) -> NoReturn:
    _stderr(f"error: {message}")
    raise typer.Exit(code)


def main() -> None:
    """Console entry point: no traceback reaches the user unless TRACECOMM_DEBUG is set."""
    try:
        app()
    except (KeyboardInterrupt, BrokenPipeError):
        sys.exit(130)
    except SystemExit:
        raise
    except Exception as exc:
        if os.environ.get("TRACECOMM_DEBUG"):
            raise
        _stderr(
            f"internal error: {type(exc).__name__}: {exc} "
            "(a bug; rerun with TRACECOMM_DEBUG=1 for the traceback and please report it)"
        )
        sys.exit(EXIT_INTERNAL)


if __name__ == "__main__":
    main()
