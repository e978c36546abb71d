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

from tracecomm import __version__
from tracecomm.analysis.model import FileFailure, RankResult
from tracecomm.engine import BreakdownOptions
from tracecomm.engine.model import RankBreakdown
from tracecomm.errors import TraceError
from tracecomm.ingest.model import TraceMeta
from tracecomm.run.discover import SUFFIX

FORMAT = "2"  # 2: collectives carry idle_before_ns
_SAFE = re.compile(r"[^A-Za-z0-9_.\-]+")
_META_DECODER = msgspec.json.Decoder(TraceMeta)
_OPTIONS_DECODER = msgspec.json.Decoder(BreakdownOptions)
_FAILURE_DECODER = msgspec.json.Decoder(FileFailure)


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
        }
        rows = outcome.breakdown.collectives
        table = rows if rows is not None else pl.DataFrame()
    target = folder / summary_name(outcome)
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
        rest = msgspec.json.decode(header["tracecomm.result"])
        breakdown = _BREAKDOWN_DECODER.decode(header["tracecomm.breakdown"])
        if rest.pop("has_collectives"):
            breakdown = replace(breakdown, collectives=pl.read_parquet(path))
        result = RankResult(
            meta=_META_DECODER.decode(header["tracecomm.meta"]),
            breakdown=breakdown,
            **{**rest, "warnings": tuple(rest["warnings"])},
        )
    except (KeyError, TypeError, msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise SummaryError(path, f"damaged summary ({type(exc).__name__}: {exc})") from None
    except (OSError, pl.exceptions.PolarsError) as exc:
        raise SummaryError(path, f"unreadable summary rows ({exc})") from None
    return result, opts
