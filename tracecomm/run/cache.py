"""``--cache DIR``: a rank file's parsed columns as Parquet, and its finished result per set of
options in the summary format (``run.summaries``), so a second ``analyze`` or ``check`` of the
same run skips the parse, and the breakdown when the options are the same.

Data only: Parquet frames whose schema is checked, JSON decoded into typed structures, never
pickle. A cache folder is restored from CI caches and shared between people, so its content is
untrusted: an entry that is corrupt, of another format or version, or crafted is a miss
(``EntryError``), the caller parses the file again and replaces the entry. Every stored file's
checksum is kept beside it: a damaged byte that would still decode is a miss too.

An entry is keyed by the file's size, mtime, a hash of its first and last MiB, its path, and
what the readers were asked to keep (hashing whole 2 GB files would cost a tenth of the parse
the cache saves); a file rewritten in place with the same size, mtime and ends would be served
stale, which editors and profilers do not produce.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import shutil
import tempfile
from functools import cache as once
from pathlib import Path

import msgspec
import polars as pl

from tracecomm._version import __version__
from tracecomm.analysis.model import RankResult
from tracecomm.engine import BreakdownOptions
from tracecomm.ingest.model import RankEvents, ReadOptions, TraceMeta

_FRAMES = (
    "device",
    "device_meta",
    "launches",
    "steps",
    "comm_annotations",
    "comm_ops",
    "cpu",
    "shaped_ops",
    "gpu_ranges",
)
_SAMPLE = 1 << 20
# Bumped whenever the stored frames or results change shape (releases share __version__
# during development): an entry of another format is a miss, never a wrong result.
CACHE_FORMAT = 10


class EntryError(Exception):
    """A cache entry that cannot be used: the file is parsed again and the entry replaced."""


class _EntryInfo(msgspec.Struct):
    format: int
    version: str
    meta: TraceMeta
    warnings: tuple[str, ...]
    truncated: bool
    repaired_events: int
    digests: dict[str, str] = {}  # frame name -> checksum of its Parquet file


_INFO = msgspec.json.Decoder(_EntryInfo)
_ENCODER = msgspec.json.Encoder()


def cache_key(path: Path, read: ReadOptions) -> str:
    """The file's identity and what the readers were asked to keep (``ReadOptions``)."""
    stat = path.stat()
    digest = hashlib.blake2b(digest_size=16)
    kept = ",".join(sorted(read.shaped_ops))
    identity = (
        f"{__version__}/{CACHE_FORMAT}\0{path.resolve()}\0{stat.st_size}\0{stat.st_mtime_ns}"
        f"\0{kept}"
    )
    digest.update(identity.encode())
    with path.open("rb") as handle:
        digest.update(handle.read(_SAMPLE))
        if stat.st_size > 2 * _SAMPLE:
            handle.seek(-_SAMPLE, os.SEEK_END)
            digest.update(handle.read(_SAMPLE))
    return digest.hexdigest()


@once
def _schemas() -> dict[str, pl.Schema]:
    """The schema each stored frame must have: the frames the readers build from no events."""
    from tracecomm.ingest.frames import columns, split_frames

    empty, _, _ = columns([], Path("schema"), frozenset())
    return {name: frame.schema for name, frame in split_frames(empty).items()}


def load(cache: Path, path: Path, read: ReadOptions) -> RankEvents | None:
    """The stored columns; None when there is no entry. Raises ``EntryError`` for one that
    cannot be used."""
    entry = cache / cache_key(path, read)
    if not entry.exists():
        return None
    try:
        info = _INFO.decode((entry / "rank.json").read_bytes())
        if info.format != CACHE_FORMAT or info.version != __version__:
            raise EntryError("written by another tracecomm")
        frames = {name: _checked_parquet(entry / f"{name}.parquet", info) for name in _FRAMES}
    except (OSError, msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise EntryError(f"unreadable ({type(exc).__name__})") from None
    except pl.exceptions.PolarsError:
        raise EntryError("unreadable Parquet") from None
    wrong = [name for name in _FRAMES if frames[name].schema != _schemas()[name]]
    if wrong:
        raise EntryError(f"its {wrong[0]} columns are not the ones this tracecomm writes")
    return RankEvents(
        path=str(path),
        meta=info.meta,
        warnings=info.warnings,
        truncated=info.truncated,
        repaired_events=info.repaired_events,
        **frames,
    )


def _checksum(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def _checked_parquet(file: Path, info: _EntryInfo) -> pl.DataFrame:
    raw = file.read_bytes()
    if _checksum(raw) != info.digests.get(file.stem):
        raise EntryError(f"damaged ({file.name} does not match its checksum)")
    return pl.read_parquet(io.BytesIO(raw))


def store(cache: Path, path: Path, read: ReadOptions, events: RankEvents) -> None:
    """Written to a fresh temporary folder first, then renamed: a half-written entry is never
    read. An entry that is there already (another process, or a damaged one) is replaced."""
    entry = cache / cache_key(path, read)
    cache.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{entry.name}.", dir=cache))
    try:
        digests = {}
        for name in _FRAMES:
            buffer = io.BytesIO()
            getattr(events, name).write_parquet(buffer)
            (tmp / f"{name}.parquet").write_bytes(buffer.getvalue())
            digests[name] = _checksum(buffer.getvalue())
        info = _EntryInfo(
            CACHE_FORMAT,
            __version__,
            events.meta,
            events.warnings,
            events.truncated,
            events.repaired_events,
            digests,
        )
        (tmp / "rank.json").write_bytes(_ENCODER.encode(info))
        discard(entry)
        tmp.rename(entry)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def discard(entry: Path) -> None:
    """Remove an entry (moved aside first, so nothing reads it half removed); a link is
    unlinked, never followed."""
    if entry.is_symlink():
        entry.unlink()
        return
    if not entry.exists():
        return
    aside = entry.with_name(f".stale-{entry.name}-{os.getpid()}")
    with contextlib.suppress(OSError):
        entry.rename(aside)
        shutil.rmtree(aside, ignore_errors=True)


def load_result(cache: Path, path: Path, read: ReadOptions, options_key: str) -> RankResult | None:
    """A rank's finished result for these options, in the summary format; None when there is
    none. Raises ``EntryError`` for one that cannot be used."""
    from tracecomm.run.summaries import SummaryError, read_summary

    file = cache / cache_key(path, read) / f"result-{options_key}.tcsum.parquet"
    if not file.exists():
        return None
    try:
        if _checksum(file.read_bytes()) != _sidecar(file).read_text(errors="replace").strip():
            raise EntryError(f"damaged ({file.name} does not match its checksum)")
    except OSError as exc:
        raise EntryError(f"unreadable ({type(exc).__name__})") from None
    try:
        result, _ = read_summary(str(file))
    except SummaryError as exc:
        raise EntryError(exc.reason) from None
    if not isinstance(result, RankResult) or result.path != str(path):
        raise EntryError("a result of another file")
    return result


def store_result(
    cache: Path,
    path: Path,
    read: ReadOptions,
    options_key: str,
    result: RankResult,
    opts: BreakdownOptions,
) -> None:
    from tracecomm.run.summaries import write_summary_file

    entry = cache / cache_key(path, read)
    if entry.is_dir() and not entry.is_symlink():
        file = entry / f"result-{options_key}.tcsum.parquet"
        write_summary_file(file, result, opts)
        _sidecar(file).write_text(_checksum(file.read_bytes()))


def _sidecar(file: Path) -> Path:
    """Where a result file's checksum is kept (its entry's rank.json is written before it)."""
    return file.with_name(file.name + ".b2")


def options_key(*parts: object) -> str:
    return hashlib.blake2b(repr(parts).encode(), digest_size=12).hexdigest()


def unusable_warning(cache: Path, problems: list[str]) -> str:
    """One line for every entry of one run that could not be used."""
    many = f"{len(problems)} entries" if len(problems) > 1 else "an entry"
    return (
        f"--cache {cache}: {many} could not be used ({problems[0]}) and the traces were parsed "
        "again; the entries are replaced"
    )
