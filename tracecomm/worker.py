"""The per-rank unit: parse one trace file and compute its breakdown.

``analyze_file`` is pure and picklable; worker processes import only this module (ingest and
engine), so a pool starts fast. Only its small result travels back.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from pathlib import Path

from tracecomm.analysis.model import FileFailure, RankResult
from tracecomm.engine import BreakdownOptions, breakdown
from tracecomm.errors import NotATrace, TraceError
from tracecomm.ingest import load_rank
from tracecomm.ingest.cache import load as cache_load
from tracecomm.ingest.cache import load_result, options_key, store_result
from tracecomm.ingest.cache import store as cache_store
from tracecomm.ingest.kineto import load_merged
from tracecomm.ingest.model import RankEvents
from tracecomm.ingest.power import PowerLog, series_for_host
from tracecomm.sources import opened_locally, renamed, scheme


def analyze_file(
    path: str,
    opts: BreakdownOptions,
    power: Sequence[PowerLog] = (),
    rank_from: str | None = None,
    cache: Path | None = None,
) -> list[RankResult | FileFailure]:
    """Parse one trace (several ranks when ``rank_from`` splits a merged trace) and compute the
    breakdowns; failures come back as values, not raises. ``path`` may be a URL
    (``sources``): the results name it, not the local copy that was parsed."""
    try:
        # a fetched copy is new each time: keying a cache on it would only fill the disk
        cache = cache if scheme(path) in (None, "file") else None
        with opened_locally(path) as local:
            outcomes = _analyze_local(local, opts, power, rank_from, cache)
        return [renamed(o, local, path) for o in outcomes]
    except TraceError as exc:  # the source itself could not be fetched
        return [FileFailure(exc.path, exc.reason)]


def ingest_file(
    path: str,
    out: str,
    opts: BreakdownOptions,
    power: Sequence[PowerLog] = (),
    rank_from: str | None = None,
    cache: Path | None = None,
) -> list[tuple[str, FileFailure | None]]:
    """``analyze_file``, then each outcome written as a summary into ``out`` (on the worker:
    only the names, and the failures, travel back). A summary that cannot be written raises."""
    from tracecomm.summaries import write_summary

    outcomes = analyze_file(path, opts, power, rank_from, cache)
    return [
        (write_summary(Path(out), o, opts).name, o if isinstance(o, FileFailure) else None)
        for o in outcomes
    ]


def _analyze_local(
    path: str,
    opts: BreakdownOptions,
    power: Sequence[PowerLog],
    rank_from: str | None,
    cache: Path | None,
) -> list[RankResult | FileFailure]:
    try:
        if cache is not None and rank_from is None:
            return [_cached_result(path, opts, power, cache)]
        ranks = [load_rank(path)] if rank_from is None else load_merged(path, rank_from)
        return [_one_rank(events, opts, power) for events in ranks]
    except NotATrace as exc:
        return [FileFailure(exc.path, exc.reason, not_a_trace=True)]
    except TraceError as exc:
        return [FileFailure(exc.path, exc.reason)]
    except MemoryError:
        return [FileFailure(path, "out of memory while parsing")]
    except Exception as exc:  # one odd file must never take the other ranks down with it
        return [FileFailure(path, f"could not be analyzed ({type(exc).__name__}: {exc})")]


def _cached_result(
    path: str, opts: BreakdownOptions, power: Sequence[PowerLog], cache: Path
) -> RankResult:
    """The finished result when these options ran before, else the parsed columns when the
    file did, else a parse; what was missing is stored (a cache that cannot be written only
    costs the next run its speed-up)."""
    key = options_key(opts, [(log.path, Path(log.path).stat().st_mtime_ns) for log in power])
    done = load_result(cache, Path(path), key)
    if isinstance(done, RankResult):
        return done
    events = cache_load(cache, Path(path))
    if events is None:
        events = load_rank(path)
        with contextlib.suppress(OSError):
            cache_store(cache, Path(path), events)
    result = _one_rank(events, opts, power)
    with contextlib.suppress(OSError):
        store_result(cache, Path(path), key, result)
    return result


def _one_rank(events: RankEvents, opts: BreakdownOptions, power: Sequence[PowerLog]) -> RankResult:
    series, power_source = series_for_host(power, events.meta.host_name)
    result = breakdown(events, opts, series)
    return RankResult(
        path=events.path,
        meta=events.meta,
        breakdown=result,
        warnings=events.warnings,
        truncated=events.truncated,
        repaired_events=events.repaired_events,
        first_event_abs_ns=events.first_event_ns if events.epoch_clock else None,
        power_source=power_source if series else None,
    )
