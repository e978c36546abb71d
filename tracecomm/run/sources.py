"""Where trace files live: local paths, ``file://`` URLs, and any fsspec URL (``s3://``,
``gs://``, …) when fsspec and the matching filesystem package are installed.

Discovery and reading both run where the executor's workers are, so a cluster reads traces from
its own storage and the client never copies them. A remote file is streamed to the worker's
local temporary folder, parsed there like any local file, and deleted; paths in the result and
in error messages stay the URL the user gave.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import unquote, urlparse

import msgspec
import msgspec.structs

from tracecomm.errors import TraceError, UsageError
from tracecomm.ingest.discover import TRACE_SUFFIXES, find_traces, natural_key

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*)://")
_COPY_BLOCK = 8 << 20

T = TypeVar("T")


def scheme(source: str) -> str | None:
    """``s3`` for ``s3://bucket/key``; None for a plain path (``C:\\x`` included)."""
    match = _SCHEME.match(source)
    return match.group(1).lower() if match else None


def local_path(source: str) -> Path | None:
    """The file system path of a plain path or a ``file://`` URL; None for other URLs."""
    kind = scheme(source)
    if kind is None:
        return Path(source)
    if kind == "file":
        parsed = urlparse(source)
        if parsed.netloc not in ("", "localhost"):
            raise UsageError(f"{source}: file:// URLs name no host (file:///path or file:/path)")
        return Path(unquote(parsed.path))
    return None


def normalized(source: str) -> str:
    """A ``file://`` URL as the path it names; anything else as given."""
    path = local_path(source)
    return str(path) if path is not None else source


def find_sources(inputs: Sequence[str]) -> list[str]:
    """Trace candidates as the strings workers will open: local ones as paths (``file://``
    turned into a path), remote folders listed through fsspec (``*.json``, ``*.json.gz``)."""
    local: list[str] = []
    remote: list[str] = []
    for item in inputs:
        path = local_path(item)
        if path is not None:
            local.append(str(path))
        else:
            remote.extend(_find_remote(item))
    remote.sort(key=natural_key)
    return [str(p) for p in find_traces(local)] + remote if local else remote


def _filesystem(url: str) -> tuple[Any, str]:
    try:
        import fsspec
    except ImportError:
        raise UsageError(
            f"{url}: reading URLs needs fsspec (pip install 'tracecomm[remote]', plus s3fs or "
            "gcsfs for s3:// and gs://)"
        ) from None
    try:
        fs, root = fsspec.core.url_to_fs(url)
    except (ImportError, ValueError) as exc:  # unknown protocol, or its package is missing
        raise UsageError(f"{url}: {exc}") from None
    # fsspec keeps listings per filesystem instance, and workers live across runs
    fs.invalidate_cache()
    return fs, root


def _find_remote(url: str) -> list[str]:
    fs, root = _filesystem(url)
    try:
        if fs.isfile(root):
            return [url]
        if not fs.isdir(root):
            raise UsageError(f"{url}: no such file or folder")
        names = fs.find(root)
    except OSError as exc:
        raise UsageError(f"{url}: cannot list: {exc}") from None
    base = url.rstrip("/")
    out = []
    for name in names:
        rel = name[len(root.rstrip("/")) :].lstrip("/")
        if rel.lower().endswith(TRACE_SUFFIXES) and not any(
            p.startswith(".") for p in rel.split("/")
        ):
            out.append(f"{base}/{rel}")
    return out


@contextlib.contextmanager
def opened_locally(source: str) -> Iterator[str]:
    """A local path holding the source's bytes for as long as the block runs."""
    path = local_path(source)
    if path is not None:
        yield str(path)
        return
    fs, root = _filesystem(source)
    name = os.path.basename(root.rstrip("/")) or "trace.json"
    with tempfile.TemporaryDirectory(prefix="tracecomm-") as folder:
        target = Path(folder) / name
        try:
            with fs.open(root, "rb") as src, target.open("wb") as dst:
                shutil.copyfileobj(src, dst, _COPY_BLOCK)
        except (OSError, ValueError) as exc:
            raise TraceError(source, f"cannot read ({type(exc).__name__}: {exc})") from None
        yield str(target)


def renamed(value: T, local: str, source: str) -> T:
    """``value`` with the temporary path replaced by the source's URL in every string field
    (paths, warnings, reasons), one level into tuples; frames and numbers are left alone."""
    if local == source:
        return value
    fix: Callable[[Any], Any] = lambda v: _replace(v, local, source)  # noqa: E731
    if isinstance(value, msgspec.Struct):
        return msgspec.structs.replace(
            value,
            **{
                name: fix(getattr(value, name))
                for name in value.__struct_fields__
                if isinstance(getattr(value, name), str | tuple)
            },
        )
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changes = {
            f.name: fix(getattr(value, f.name))
            for f in dataclasses.fields(value)
            if isinstance(getattr(value, f.name), str | tuple)
        }
        return dataclasses.replace(value, **changes)
    return value


def _replace(value: Any, local: str, source: str) -> Any:
    if isinstance(value, str):
        return value.replace(local, source)
    if isinstance(value, tuple):
        return tuple(v.replace(local, source) if isinstance(v, str) else v for v in value)
    return value
