"""``--cache DIR``: a rank file's parsed columns as Parquet, so a second ``analyze`` or
``check`` of the same run skips the JSON parse (the engine still runs: options may differ).

An entry is keyed by the file's size, mtime and a hash of its first and last MiB plus its path
(hashing whole 2 GB files would cost a tenth of the parse the cache saves); a file rewritten in
place with the same size and mtime and identical ends would be served stale, which editors and
profilers do not produce. Entries from another tracecomm version are ignored.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
from dataclasses import asdict, fields
from pathlib import Path

import polars as pl

from tracecomm._version import __version__
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
CACHE_FORMAT = 2


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


def load(cache: Path, path: Path, read: ReadOptions) -> RankEvents | None:
    entry = cache / cache_key(path, read)
    try:
        info = json.loads((entry / "rank.json").read_text())
        frames = {name: pl.read_parquet(entry / f"{name}.parquet") for name in _FRAMES}
    except (OSError, ValueError, pl.exceptions.PolarsError):
        return None
    meta = info["meta"]
    meta["device_names"] = {int(k): v for k, v in meta["device_names"].items()}
    meta["device_props"] = {int(k): v for k, v in meta["device_props"].items()}
    meta["pg_config"] = tuple(meta["pg_config"])
    return RankEvents(
        path=str(path),
        meta=TraceMeta(**meta),
        warnings=tuple(info["warnings"]),
        truncated=info["truncated"],
        repaired_events=info["repaired_events"],
        **frames,
    )


def store(cache: Path, path: Path, read: ReadOptions, events: RankEvents) -> None:
    """Written to a temporary folder first, then renamed: a half-written entry is never read."""
    entry = cache / cache_key(path, read)
    if entry.exists():
        return
    tmp = cache / f".{entry.name}.{os.getpid()}"
    tmp.mkdir(parents=True, exist_ok=True)
    for name in _FRAMES:
        getattr(events, name).write_parquet(tmp / f"{name}.parquet")
    info = {
        "meta": {f.name: getattr(events.meta, f.name) for f in fields(TraceMeta)},
        "warnings": list(events.warnings),
        "truncated": events.truncated,
        "repaired_events": events.repaired_events,
    }
    (tmp / "rank.json").write_text(json.dumps(info, default=_plain))
    try:
        tmp.rename(entry)
    except OSError:  # another process stored it first
        for f in tmp.iterdir():
            f.unlink()
        tmp.rmdir()


def _plain(value: object) -> object:
    if hasattr(value, "__dataclass_fields__"):
        return asdict(value)  # type: ignore[call-overload]
    return str(value)


def load_result(cache: Path, path: Path, read: ReadOptions, options_key: str) -> object | None:
    """A rank's finished result for these options (pickled by this tool into its own cache:
    only ever point --cache at a folder you trust, as with any cache)."""
    entry = cache / cache_key(path, read) / f"result-{options_key}.pickle"
    try:
        with entry.open("rb") as handle:
            return pickle.load(handle)
    except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ImportError):
        return None


def store_result(
    cache: Path, path: Path, read: ReadOptions, options_key: str, result: object
) -> None:
    entry = cache / cache_key(path, read)
    if not entry.is_dir():
        return
    tmp = entry / f".result-{options_key}.{os.getpid()}"
    with tmp.open("wb") as handle:
        pickle.dump(result, handle, protocol=pickle.HIGHEST_PROTOCOL)
    tmp.replace(entry / f"result-{options_key}.pickle")


def options_key(*parts: object) -> str:
    return hashlib.blake2b(repr(parts).encode(), digest_size=12).hexdigest()
