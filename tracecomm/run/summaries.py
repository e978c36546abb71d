"""Per-rank summaries on disk (``tracecomm ingest RUN --out DIR``): what the per-rank unit
returns, so that ``analyze DIR`` reads a few KB per rank instead of the traces.

One Parquet file per rank (``*.tcsum.parquet``): the rows are the rank's communication kernels
keyed for cross-rank matching (``engine.collectives.INSTANCE_SCHEMA``); the file's key-value
metadata holds the rest of the result (meta, per-step figures, notes) as JSON, with the
breakdown options it was computed with and the format version. A file that produced no rank
is stored too (no rows, its failure in the metadata), so ``analyze DIR`` reports it the way
``analyze RUN`` would.
"""

from __future__ import annotations

import hashlib
import os
import re
import socket
from dataclasses import replace
from pathlib import Path
from typing import Any

import msgspec
import polars as pl

from tracecomm._version import __version__
from tracecomm.analysis.model import FileFailure, RankResult
from tracecomm.analysis.projection import ReplayEvents
from tracecomm.engine import BreakdownOptions
from tracecomm.engine.collectives import INSTANCE_SCHEMA
from tracecomm.engine.model import KernelStats, RankBreakdown
from tracecomm.engine.views import RankViews
from tracecomm.errors import TraceError
from tracecomm.ingest.model import TraceMeta
from tracecomm.run.discover import SUFFIX

FORMAT = "8"  # 2: collectives carry idle_before_ns; 3: the kernel and launch view;
# 4: collectives carry ready_ns and stream (the replay's queues, metrics.md §6);
# 5: all-to-all volumes on the collectives, the rank's comm libraries (metrics.md §7a);
# 6: the rank's typical step as the projection replays it (metrics.md §11)
# 7: every kernel name per included step (the diff by kernel, metrics.md §18)
# 8: each kernel name's exposed time per step (metrics.md §15)
_SAFE = re.compile(r"[^A-Za-z0-9_.\-]+")
_META_DECODER = msgspec.json.Decoder(TraceMeta)
_OPTIONS_DECODER = msgspec.json.Decoder(BreakdownOptions)
_FAILURE_DECODER = msgspec.json.Decoder(FileFailure)
_INSTANCE_SCHEMA = pl.Schema(INSTANCE_SCHEMA)


class _ResultFields(msgspec.Struct):
    """The rest of a RankResult, typed: a damaged or crafted field is refused, not passed on."""

    path: str
    warnings: tuple[str, ...]
    truncated: bool
    repaired_events: int
    first_event_abs_ns: int | None
    power_source: str | None
    has_collectives: bool


_RESULT_DECODER = msgspec.json.Decoder(_ResultFields)


class _Replay(msgspec.Struct):
    """The rank's part of the projection (``engine.views``): the timelines and the export's
    events are taken anew by the commands that show them."""

    typical_step: int | None
    events: ReplayEvents | None


_REPLAY_DECODER = msgspec.json.Decoder(_Replay)


def _enc(value: object) -> Any:
    if isinstance(value, pl.DataFrame):
        return None  # the collectives travel as the file's rows
    raise NotImplementedError(type(value))


def _dec(kind: type, value: object) -> Any:
    if kind is pl.DataFrame:
        return value
    raise NotImplementedError(kind)


_BREAKDOWN_DECODER = msgspec.json.Decoder(RankBreakdown, dec_hook=_dec)
_ENCODER = msgspec.json.Encoder(enc_hook=_enc)


class SummaryError(TraceError):
    """A summary file that cannot be used (other ranks' summaries still are)."""


def summary_name(outcome: RankResult | FileFailure, host: str | None = None) -> str:
    """Readable and unique across the nodes that ingest into one folder: the trace's name, its
    rank when known, and a digest of the host and full path (many nodes write trace.json)."""
    path = outcome.path
    rank = outcome.meta.rank if isinstance(outcome, RankResult) else None
    digest = hashlib.blake2b(
        f"{host or socket.gethostname()}\0{path}".encode(), digest_size=6
    ).hexdigest()
    stem = _SAFE.sub("_", os.path.basename(path.replace("#", "_")))[:80]
    tag = f"rank{rank}-" if rank is not None else ""
    return f"{tag}{stem}-{digest}{SUFFIX}"


def write_summary(folder: Path, outcome: RankResult | FileFailure, opts: BreakdownOptions) -> Path:
    """Write atomically (a temporary name, then rename): a reader never sees half a file."""
    return write_summary_file(folder / summary_name(outcome), outcome, opts)


def write_summary_file(
    target: Path, outcome: RankResult | FileFailure, opts: BreakdownOptions
) -> Path:
    """One outcome as a summary file at ``target`` (also the result cache's entry format)."""
    header = {
        "tracecomm.summary.format": FORMAT,
        "tracecomm.version": __version__,
        "tracecomm.breakdown_options": _ENCODER.encode(opts).decode(),
    }
    if isinstance(outcome, FileFailure):
        header["tracecomm.failure"] = _ENCODER.encode(outcome).decode()
        table = pl.DataFrame()
    else:
        header |= {
            "tracecomm.meta": _ENCODER.encode(outcome.meta).decode(),
            "tracecomm.breakdown": _ENCODER.encode(outcome.breakdown).decode(),
            "tracecomm.result": _ENCODER.encode(
                {
                    "path": outcome.path,
                    "warnings": outcome.warnings,
                    "truncated": outcome.truncated,
                    "repaired_events": outcome.repaired_events,
                    "first_event_abs_ns": outcome.first_event_abs_ns,
                    "power_source": outcome.power_source,
                    "has_collectives": outcome.breakdown.collectives is not None,
                }
            ).decode(),
            "tracecomm.replay": _ENCODER.encode(_replay_of(outcome.views)).decode(),
        }
        rows = outcome.breakdown.collectives
        table = rows if rows is not None else pl.DataFrame()
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    table.write_parquet(tmp, metadata=header, statistics=False)
    tmp.replace(target)
    return target


def read_summary(path: str) -> tuple[RankResult | FileFailure, BreakdownOptions]:
    """Raises ``SummaryError`` for a file that is not a summary this version can read."""
    try:
        header = pl.read_parquet_metadata(path)
    except (OSError, pl.exceptions.PolarsError) as exc:
        raise SummaryError(path, f"not a readable Parquet summary ({exc})") from None
    version = header.get("tracecomm.summary.format")
    if version != FORMAT:
        found = f"format {version}" if version else "no tracecomm summary format"
        raise SummaryError(
            path, f"{found}; this tracecomm ({__version__}) reads format {FORMAT}: ingest again"
        )
    try:
        opts = _OPTIONS_DECODER.decode(header["tracecomm.breakdown_options"])
        if "tracecomm.failure" in header:
            return _FAILURE_DECODER.decode(header["tracecomm.failure"]), opts
        rest = _RESULT_DECODER.decode(header["tracecomm.result"])
        breakdown = _BREAKDOWN_DECODER.decode(header["tracecomm.breakdown"])
        if rest.has_collectives:
            rows = pl.read_parquet(path)
            if rows.schema != _INSTANCE_SCHEMA:
                raise SummaryError(path, "damaged summary: its rows are not collective instances")
            breakdown = replace(breakdown, collectives=rows)
        problem = breakdown_problem(breakdown)
        if problem:
            raise SummaryError(path, f"damaged summary: {problem}")
        result = RankResult(
            path=rest.path,
            meta=_META_DECODER.decode(header["tracecomm.meta"]),
            breakdown=breakdown,
            warnings=rest.warnings,
            truncated=rest.truncated,
            repaired_events=rest.repaired_events,
            first_event_abs_ns=rest.first_event_abs_ns,
            power_source=rest.power_source,
            views=_views_of(_REPLAY_DECODER.decode(header["tracecomm.replay"])),
        )
    except (KeyError, TypeError, ValueError, msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise SummaryError(path, f"damaged summary ({type(exc).__name__}: {exc})") from None
    except (OSError, pl.exceptions.PolarsError) as exc:
        raise SummaryError(path, f"unreadable summary rows ({exc})") from None
    return result, opts


def _replay_of(views: RankViews | None) -> _Replay:
    if views is None:
        return _Replay(None, None)
    events = ReplayEvents.of(views.replay) if views.replay is not None else None
    return _Replay(views.typical_step, events)


def _views_of(replay: _Replay) -> RankViews | None:
    if replay.typical_step is None and replay.events is None:
        return None
    frame = replay.events.frame() if replay.events is not None else None
    return RankViews(replay.typical_step, frame)


def breakdown_problem(bd: RankBreakdown) -> str | None:
    """What makes a stored breakdown impossible (a damaged or crafted file), or None: every
    window's parts are whole, not negative, and add up to it (metrics.md §3)."""
    windows = [bd.window, *(s.window for s in bd.steps)]
    for window in (w for w in windows if w is not None):
        f = window.figures
        parts = (f.compute_ns, f.exposed_comm_ns, f.exposed_memory_ns, f.idle_ns)
        values = (f.window_ns, f.comm_ns, f.overlapped_comm_ns, *parts)
        if min(values) < 0 or sum(parts) != f.window_ns or f.overlapped_comm_ns > f.comm_ns:
            return f"window {window.start_ns}–{window.end_ns}: its figures do not add up"
        if any(t.comm_ns < 0 or t.exposed_comm_ns < 0 or t.kernels < 0 for t in window.by_type):
            return f"window {window.start_ns}–{window.end_ns}: a negative figure by type"
    if min(bd.comm_kernels, bd.device_events, bd.unlinked_events) < 0:
        return "a negative count"
    return kernels_problem(bd.kernels) if bd.kernels is not None else None


def kernels_problem(k: KernelStats) -> str | None:
    """What makes stored kernel figures impossible (metrics.md §15), or None: counts and times
    not negative, median ≤ p95 ≤ max ≤ total, a part never above its whole."""
    if k.steps < 1 or k.events < 0:
        return "kernel view: no step, or a negative count"
    for g in k.groups:
        if min(g.events, g.names, g.total_ns) < 0 or len(g.top) > g.names:
            return f"kernel view, {g.cls}: a negative figure"
        for r in g.top:
            ordered = 0 <= r.median_ns <= r.p95_ns <= r.max_ns <= r.total_ns <= g.total_ns
            if not ordered or not 0 < r.count <= g.events:
                return f"kernel view, {g.cls}: {r.name[:60]}: figures out of order"
            if r.share_pct is not None and not 0 <= r.share_pct <= 100:
                return f"kernel view, {g.cls}: a share above 100 %"
    sh = k.short
    if not (0 <= sh.kernels <= sh.all_kernels and 0 <= sh.total_ns <= sh.all_ns):
        return "kernel view: more short kernels than kernels"
    if sum(b.kernels for b in sh.buckets) != sh.all_kernels:
        return "kernel view: the duration buckets do not add up"
    la = k.launches
    delays = [la.delay_median_ns, la.delay_p95_ns, la.delay_max_ns]
    known = [d for d in delays if d is not None]
    if known != sorted(known) or any(d < 0 for d in known) or min(la.launches, la.delayed) < 0:
        return "kernel view: launch delays out of order"
    if any(s.gaps < 1 or s.starved_ns < 0 for s in la.starving):
        return "kernel view: a negative starved time"
    if any(o.count < 1 or min(o.flops, o.bytes, o.kernel_ns) < 0 for o in k.ops):
        return "kernel view: a negative op figure"
    return None
