"""The one flow every command shares: options → request → run → renderer → bytes out, with
warnings on stderr, the whole-command memo of ``--cache``, and errors mapped to exit codes.

Heavy modules (polars, the run, the analysis) load inside these functions, after the process
pool has started, so that ``tracecomm --help`` stays fast.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import typer

from tracecomm import collector
from tracecomm.cli.exits import EXIT_IO, EXIT_NO_INPUT, EXIT_USAGE, fail, stderr
from tracecomm.text import visible

if TYPE_CHECKING:
    from tracecomm.analysis.build import Analysis
    from tracecomm.analysis.model import Side
    from tracecomm.analysis.report import Report
    from tracecomm.render import View
    from tracecomm.run.pool import WarmPool
    from tracecomm.run.request import Request
    from tracecomm.run.saved import SavedReport


def request(inputs: Sequence[str | Path], options: Mapping[str, Any], **extra: Any) -> Request:
    """The request of a command's options (``quiet`` is the CLI's own); a bad value is a
    usage error."""
    from tracecomm.errors import UsageError
    from tracecomm.run.request import request_of

    values = {k: v for k, v in {**options, **extra}.items() if k != "quiet"}
    try:
        return request_of(list(inputs), **values)
    except UsageError as exc:
        fail(str(exc), EXIT_USAGE)


def report_for(
    req: Request, show_progress: bool = False, no_input_code: int = EXIT_NO_INPUT
) -> Report:
    """Run the analysis: its Report."""
    return analysis_for(req, show_progress, no_input_code).report


def analysis_for(
    req: Request, show_progress: bool = False, no_input_code: int = EXIT_NO_INPUT
) -> Analysis:
    """Run the analysis: its Report and what the run has besides it (``analysis.model.Side``).
    A local pool starts first, from the one discovery of the inputs, so its workers import
    while this process loads the analysis."""
    from tracecomm.errors import NoUsableInput, UsageError
    from tracecomm.run.discover import discover
    from tracecomm.run.pool import return_freed_pages, start_pool

    return_freed_pages()
    pool, discovery = None, None
    try:
        if not req.executor.remote:
            discovery = discover(req.inputs)
            if req.cache is None and req.rank_from is None:
                pool = start_pool(discovery.traces, req.jobs, req.read)
        with collector.loading("tracecomm.run.session"):  # polars and the analysis
            from tracecomm.run.executors import open_executor
            from tracecomm.run.session import analyze_run

        executor = open_executor(
            req.executor,
            req.jobs,
            None if pool is None else pool.executor,
            client_parses=pool is not None and pool.client_parses,
        )
    except UsageError as exc:
        _close_pool(pool)
        fail(str(exc), EXIT_USAGE)
    except NoUsableInput as exc:
        fail(str(exc), no_input_code)
    try:
        return analyze_run(req, progress() if show_progress else None, executor, discovery)
    except UsageError as exc:
        fail(str(exc), EXIT_USAGE)
    except NoUsableInput as exc:
        fail(str(exc), no_input_code)
    finally:
        executor.close()


def saved_document(run: Sequence[str], options: Mapping[str, Any]) -> SavedReport | None:
    """The saved analyze document given as RUN, read with the one loader into its Report;
    None for a run to analyze. A saved document is drawn alone and as it was saved, projected
    (``--project``, ``--to``, ``--weak``) from its projection basis as its run would be."""
    from tracecomm.run.sniff import looks_saved

    saved = [p for p in map(Path, run) if p.is_file() and looks_saved(p)]
    if not saved:
        return None  # and nothing heavy loaded: the pool, started next, can still fork
    from tracecomm.run.saved import SavedReportError, load_saved_report

    if len(run) > 1:
        fail(
            f"{saved[0]}: a saved analyze document is drawn alone, not with other runs", EXIT_USAGE
        )
    try:
        found = load_saved_report(saved[0])
    except SavedReportError as exc:
        fail(str(exc), EXIT_USAGE)
    return _projected(found, options)


def _projected(saved: SavedReport, options: Mapping[str, Any]) -> SavedReport:
    from msgspec.structs import replace

    from tracecomm.analysis.build import project_report
    from tracecomm.errors import UsageError
    from tracecomm.run.request import request_of

    asked = {k: options[k] for k in ("project", "to", "weak") if options.get(k)}
    if not asked:
        return saved
    try:
        wanted = request_of([str(saved.path)], **asked).analysis
    except UsageError as exc:
        fail(str(exc), EXIT_USAGE)
    if wanted.project_to is None:  # --weak alone: compare's scaling, nothing to project
        return saved
    found = project_report(saved.report, wanted.project_to, wanted.weak)
    return type(saved)(saved.path, replace(saved.report, projection=found))


def _close_pool(pool: WarmPool | None) -> None:
    if pool is not None:
        pool.executor.shutdown(wait=False, cancel_futures=True)


def view(
    top: int | None = None, brief: bool = False, table: str = "ranks", side: Side | None = None
) -> View:
    """What stdout can show: a terminal's width and colours, or none of them."""
    from tracecomm.render import View

    if sys.stdout.isatty():
        columns = shutil.get_terminal_size().columns
        return View(width=columns, color=True, top=top, brief=brief, table=table, side=side)
    # a pipe has no width: COLUMNS, when set, says which one to lay out for
    columns_env = os.environ.get("COLUMNS", "")
    width = int(columns_env) if columns_env.isdigit() and 40 <= int(columns_env) <= 1000 else None
    return View(width=width, top=top, brief=brief, table=table, side=side)


def warning_lines(report: Report) -> list[str]:
    lines = [f"warning: {line}" for line in report.warnings]
    for missing in report.missing_ranks:
        who = f"rank {missing.rank}" if missing.rank is not None else "a rank"
        where = f"{missing.path}: " if missing.path else ""
        lines.append(f"error: {who} missing: {where}{missing.reason}")
    lines += [f"warning: skipped {s.path}: {s.reason}" for s in report.skipped_files]
    return lines


def print_lines(lines: Sequence[str]) -> None:
    for line in lines:
        stderr(line)


def write_stdout(data: bytes) -> None:
    """The output; a full disk or a closed pipe is an I/O error (exit 74), never a bug."""
    try:
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
    except BrokenPipeError:
        _detach_stdout()
        fail("stdout: the reader closed the pipe before the output was written", EXIT_IO)
    except OSError as exc:
        _detach_stdout()
        fail(f"stdout: cannot write the output: {exc.strerror or exc}", EXIT_IO)


def _detach_stdout() -> None:
    """Point stdout at /dev/null: the interpreter's own flush at exit must not fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def write_file(path: Path, data: bytes, what: str) -> None:
    try:
        path.write_bytes(data)
    except OSError as exc:
        fail(f"{path}: cannot write {what}: {exc.strerror or exc}", EXIT_IO)


@dataclass(frozen=True)
class Memo:
    cache: Path
    key: str
    problem: str | None = None  # why the entry there could not be replayed


def memo(cache: Path | None, command: str, params: Mapping[str, Any]) -> Memo | None:
    """With ``--cache`` and output to a pipe or file: replay the output of an identical earlier
    command (``run.memo``) and exit, or return where this command's output is to be kept."""
    if cache is None or sys.stdout.isatty():
        return None
    from tracecomm.run.memo import MemoError, load, memo_key

    key = memo_key(command, params, cache)
    if key is None:
        return None
    try:
        hit = load(cache, key)
    except MemoError as exc:
        return Memo(cache, key, str(exc))
    if hit is not None:
        print_lines(list(hit.stderr))
        write_stdout(hit.stdout)
        raise typer.Exit(hit.exit_code)
    return Memo(cache, key)


def finish(kept: Memo | None, out: bytes, lines: Sequence[str], code: int) -> NoReturn:
    """Print the warnings and the output, keep both for the next identical command, exit."""
    shown = list(lines)
    if kept is not None and kept.problem and not any(f"--cache {kept.cache}:" in x for x in lines):
        shown.append(f"warning: --cache {kept.cache}: {kept.problem} was removed")
    print_lines(shown)
    write_stdout(out)
    # a run that repaired the cache says so once; its replay must not say it again
    if kept is not None and not any(f"--cache {kept.cache}:" in line for line in shown):
        from tracecomm.run.memo import Replay, store

        store(kept.cache, kept.key, Replay(out, tuple(lines), code))
    raise typer.Exit(code)


def progress() -> Callable[[int, int, str], None] | None:
    """A rich progress bar on stderr, only when stderr is a terminal (never in pipes or CI logs)."""
    if not sys.stderr.isatty():
        return None
    from rich.console import Console
    from rich.progress import Progress

    bar = Progress(console=Console(stderr=True), transient=True)
    task = bar.add_task("parsing traces", total=None)

    def report(done: int, total: int, path: str) -> None:
        if done == 0:
            bar.start()
        name = visible(os.path.basename(path)) if path else "parsing traces"
        bar.update(task, completed=done, total=total, description=name)
        if done == total:
            bar.stop()

    return report
