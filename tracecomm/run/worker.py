"""The per-rank unit: parse one trace file and compute its breakdown, with what the command's
later views need of the rank (``engine.views``), so that no trace is read twice; and HTA's own
figures of the files (``--compat hta``: HTA reads them itself).

Every function here is pure and picklable; worker processes import only this module (ingest and
engine, on first use or ``preload``), so a pool starts fast. Only the small results travel back.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tracecomm.analysis.model import FileFailure, RankOrigin, RankResult
from tracecomm.engine.options import BreakdownOptions, ViewRequest
from tracecomm.errors import NotATrace, TraceError
from tracecomm.ingest.discover import NSYS_SUFFIXES
from tracecomm.ingest.options import ReadOptions
from tracecomm.run.sources import opened_locally, renamed, scheme

if TYPE_CHECKING:
    from tracecomm.engine.export import RankExport
    from tracecomm.ingest.model import RankEvents
    from tracecomm.ingest.power import PowerLog


def preload() -> None:
    """The parse and the breakdown's modules (polars among them). Importing this module loads
    none of them, so that the client can hand work to a pool before it has them itself."""
    import tracecomm.engine.partition
    import tracecomm.ingest.load
    import tracecomm.ingest.power
    import tracecomm.run.cache  # noqa: F401


@dataclass(frozen=True)
class RankWork:
    """What the per-rank unit needs besides the file (small and picklable: it travels to every
    worker)."""

    breakdown: BreakdownOptions
    read: ReadOptions
    power: tuple[PowerLog, ...] = ()
    rank_from: str | None = None  # the files are merged traces: ranks by pid or process_name
    cache: Path | None = None
    views: ViewRequest = field(default_factory=ViewRequest)  # what the views take of a rank


def analyze_file(path: str, work: RankWork) -> list[RankResult | FileFailure]:
    """Parse one trace (several ranks when ``rank_from`` splits a merged trace) and compute the
    breakdowns; failures come back as values, not raises. ``path`` may be a URL
    (``sources``): the results name it, not the local copy that was parsed."""
    try:
        with opened_locally(path) as local:
            outcomes = _analyze_local(local, work, remote=scheme(path) not in (None, "file"))
        named = [renamed(o, local, path) for o in outcomes]
    except TraceError as exc:  # the source itself could not be fetched
        return [FileFailure(exc.path, exc.reason)]
    ranks = iter(range(len(named)))
    return [
        replace(o, origin=RankOrigin(path, next(ranks))) if isinstance(o, RankResult) else o
        for o in named
    ]


def exports_of_file(
    file: str,
    by_file: Mapping[str, Mapping[int, int]],
    steps: tuple[int, ...],
    work: RankWork,
) -> list[tuple[int, RankExport | str]]:
    """The export's second read (``engine.views``): the file's ranks at the indexes
    ``by_file[file]`` maps to rank ids, each one's events of ``steps``; a reason where it
    cannot be read."""
    from tracecomm.engine.export import rank_export

    wanted = by_file[file]
    try:
        with opened_locally(file) as local:
            ranks = _file_ranks(local, work)
            return [
                (rank, rank_export(ranks[index], rank, steps, work.breakdown))
                if index < len(ranks)
                else (rank, f"{file} holds no rank {index + 1} now")
                for index, rank in wanted.items()
            ]
    except (TraceError, OSError) as exc:
        return [(rank, f"could not read it again: {exc}") for rank in wanted.values()]


def _file_ranks(path: str, work: RankWork) -> list[RankEvents]:
    """The ranks a local file holds, in the order the first read took them."""
    from tracecomm.ingest.load import load_merged, load_rank
    from tracecomm.run.cache import EntryError
    from tracecomm.run.cache import load as cache_load

    if is_nsys(path):
        return nsys_ranks(path, work.read)
    if work.rank_from is not None:
        return load_merged(path, work.rank_from, work.read)
    cached = None
    if work.cache is not None:
        with contextlib.suppress(EntryError):  # the parse below reads the file itself
            cached = cache_load(work.cache, Path(path), work.read)
    return [cached if cached is not None else load_rank(path, work.read)]


def ingest_file(path: str, out: str, work: RankWork) -> list[tuple[str, FileFailure | None]]:
    """``analyze_file``, then each outcome written as a summary into ``out`` (on the worker:
    only the names, and the failures, travel back). A summary that cannot be written raises."""
    from tracecomm.run.summaries import write_summary

    outcomes = analyze_file(path, work)
    return [
        (
            write_summary(Path(out), o, work.breakdown).name,
            o if isinstance(o, FileFailure) else None,
        )
        for o in outcomes
    ]


def hta_figures(paths: Mapping[int, str], compat: str) -> tuple[Any, ...]:
    """HTA's own figures of each rank's file by the rules of one release (``--compat``,
    metrics.md §9)."""
    from tracecomm.compat.hta import figures_of_files

    return figures_of_files(paths, compat)


def _analyze_local(path: str, work: RankWork, remote: bool) -> list[RankResult | FileFailure]:
    from tracecomm.ingest.load import load_merged, load_rank

    try:
        if is_nsys(path):
            return [_one_rank(events, work) for events in nsys_ranks(path, work.read)]
        # a fetched copy is new each time: keying a cache on it would only fill the disk
        if work.cache is not None and work.rank_from is None and not remote:
            return [_cached_result(path, work, work.cache)]
        ranks = (
            [load_rank(path, work.read)]
            if work.rank_from is None
            else load_merged(path, work.rank_from, work.read)
        )
        return [_one_rank(events, work) for events in ranks]
    except NotATrace as exc:
        return [FileFailure(exc.path, exc.reason, not_a_trace=True)]
    except TraceError as exc:
        return [FileFailure(exc.path, exc.reason)]
    except MemoryError:
        return [FileFailure(path, "out of memory while parsing")]
    except Exception as exc:  # one odd file must never take the other ranks down with it
        return [FileFailure(path, f"could not be analyzed ({type(exc).__name__}: {exc})")]


def is_nsys(path: str) -> bool:
    """An Nsight Systems export or report, by its name (ingest.nsys)."""
    return path.lower().endswith(NSYS_SUFFIXES)


def nsys_ranks(path: str, read: ReadOptions) -> list[RankEvents]:
    """The ranks of an Nsight Systems export; a report (``.nsys-rep`` / ``.qdrep``) is exported
    to SQLite first, in a temporary folder, when ``nsys`` is on PATH."""
    from tracecomm.ingest.nsys import load_nsys, nsys_command

    if path.lower().endswith(".sqlite"):
        return load_nsys(path, read)
    nsys = shutil.which("nsys")
    if nsys is None:
        raise TraceError(
            path,
            "an Nsight Systems report: export it first (nsys is not on PATH here): "
            + nsys_command(Path(path)),
        )
    with tempfile.TemporaryDirectory(prefix="tracecomm-nsys-") as tmp:
        out = Path(tmp) / "export.sqlite"
        done = subprocess.run(
            [nsys, "export", "--type", "sqlite", "--include-json", "true", "-o", str(out), path],
            capture_output=True,
            timeout=3600,
            check=False,
        )
        if done.returncode != 0 or not out.exists():
            tail = done.stderr.decode(errors="replace").strip().splitlines()[-1:]
            raise TraceError(path, f"nsys export failed: {' '.join(tail)[:200]}")
        ranks = load_nsys(out, read)
    return [replace(r, path=r.path.replace(str(out), path)) for r in ranks]


def _cached_result(path: str, work: RankWork, cache: Path) -> RankResult:
    """The finished result when these options ran before, else the parsed columns when the
    file did, else a parse; what was missing is stored (a cache that cannot be written only
    costs the next run its speed-up). An entry that cannot be used is replaced, and said."""
    from tracecomm.ingest.load import load_rank
    from tracecomm.run.cache import (
        EntryError,
        cache_key,
        discard,
        load_result,
        options_key,
        store_result,
    )
    from tracecomm.run.cache import load as cache_load
    from tracecomm.run.cache import store as cache_store

    logs = [(log.path, Path(log.path).stat().st_mtime_ns) for log in work.power]
    key = options_key(work.breakdown, logs)
    problem = None
    # a stored result keeps the projection's step, not the timelines or the export's events
    reusable = not (work.views.timelines or work.views.export)
    try:
        done = load_result(cache, Path(path), work.read, key) if reusable else None
        if done is not None:
            return done
        events = cache_load(cache, Path(path), work.read)
    except EntryError as exc:
        problem, events = str(exc), None
        with contextlib.suppress(OSError):
            discard(cache / cache_key(Path(path), work.read))
    if events is None:
        events = load_rank(path, work.read)
        with contextlib.suppress(OSError):
            cache_store(cache, Path(path), work.read, events)
    result = replace(_one_rank(events, work), cache_problem=problem)
    with contextlib.suppress(OSError):
        store_result(cache, Path(path), work.read, key, result, work.breakdown)
    return result


def _one_rank(events: RankEvents, work: RankWork) -> RankResult:
    from tracecomm.engine.partition import breakdown_and_views
    from tracecomm.ingest.power import series_for_host

    series, power_source = series_for_host(work.power, events.meta.host_name)
    result, views = breakdown_and_views(events, work.breakdown, series, work.views)
    return RankResult(
        path=events.path,
        meta=events.meta,
        breakdown=result,
        warnings=events.warnings,
        truncated=events.truncated,
        repaired_events=events.repaired_events,
        first_event_abs_ns=events.first_event_ns if events.epoch_clock else None,
        power_source=power_source if series else None,
        views=views,
    )
