"""The whole-command memo behind ``--cache``: a repeat ``analyze`` or ``check`` whose command line
and input files are unchanged replays the output it printed before, without importing the
analysis at all.

The per-rank cache (``ingest.cache``) already spares a repeat run the parse; what is left after
it is interpreter and library start-up (polars, numpy: about 0.5 s), which the memo skips. The
key covers everything the output depends on: the tool's version, the working directory, the
arguments, the environment variables that change rendering, and a fingerprint of every argument
that names a file or folder (each file's path, size, mtime and its first and last 64 KiB).
Standard library only: this runs before any heavy import.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tracecomm._version import __version__

FORMAT = 3  # bumped whenever the output of analyze changes for the same inputs
_SAMPLE = 64 << 10
_RENDER_ENV = ("COLUMNS", "LINES", "TERM", "NO_COLOR", "FORCE_COLOR", "TTY_COMPATIBLE")


@dataclass(frozen=True)
class Replay:
    stdout: bytes
    stderr: tuple[str, ...]
    exit_code: int


def memo_key(command: str, params: Mapping[str, Any], cache: Path) -> str | None:
    """The key of one command with its parsed parameters; None when the output cannot be
    keyed (an input addressed by URL)."""
    paths = [str(v) for v in _flat(params.values()) if isinstance(v, str | os.PathLike)]
    if any("://" in p for p in paths):
        return None
    digest = hashlib.blake2b(digest_size=20)
    header = [__version__, str(FORMAT), os.getcwd(), command]
    header += [f"{name}={params[name]!r}" for name in sorted(params)]
    header += [f"{k}={os.environ.get(k)}" for k in _RENDER_ENV]
    digest.update("\0".join(header).encode())
    skip = _resolved(cache)
    for path in paths:
        if _resolved(Path(path)) == skip:  # --cache itself: it changes by being used
            continue
        for line in _fingerprint(Path(path), skip):
            digest.update(line)
    return digest.hexdigest()


def _flat(values: Any) -> Iterator[Any]:
    for value in values:
        if isinstance(value, list | tuple):
            yield from _flat(value)
        else:
            yield value


def _resolved(path: Path) -> Path | None:
    try:
        return path.resolve()
    except OSError:
        return None


def _fingerprint(path: Path, skip: Path | None) -> Iterator[bytes]:
    try:
        if path.is_file():
            yield _file_line(path, path.name)
        elif path.is_dir():
            for root, dirs, files in os.walk(path):
                here = Path(root)
                dirs[:] = sorted(d for d in dirs if _resolved(here / d) != skip)
                for name in sorted(files):
                    yield _file_line(here / name, str((here / name).relative_to(path)))
    except OSError:
        yield f"unreadable:{path}".encode()


def _file_line(path: Path, name: str) -> bytes:
    stat = path.stat()
    digest = hashlib.blake2b(digest_size=16)
    with path.open("rb") as handle:
        digest.update(handle.read(_SAMPLE))
        if stat.st_size > 2 * _SAMPLE:
            handle.seek(-_SAMPLE, os.SEEK_END)
            digest.update(handle.read(_SAMPLE))
    return f"{name}\0{stat.st_size}\0{stat.st_mtime_ns}\0{digest.hexdigest()}\n".encode()


class MemoError(Exception):
    """A memo entry that cannot be replayed (corrupt, crafted, of another format)."""


# What the renderers print to a pipe: text, and SGR colour sequences when colour is forced.
# Anything else (another escape, a control character) did not come from tracecomm.
_REPLAYABLE = re.compile(rb"(?:[^\x00-\x08\x0b-\x1f\x7f]|\x1b\[[0-9;]*m)*")


def load(cache: Path, key: str) -> Replay | None:
    """The output of an identical earlier command; None when there is none. Raises
    ``MemoError`` for an entry that cannot be replayed (it is removed)."""
    entry = cache / "memo" / key
    if not entry.exists():
        return None
    try:
        meta = json.loads((entry / "meta.json").read_text(encoding="utf-8"))
        stdout = (entry / "stdout").read_bytes()
        replay = Replay(stdout, tuple(meta["stderr"]), meta["exit_code"])
        ok = (
            meta.get("format") == FORMAT
            and len(stdout) == meta.get("stdout_bytes")
            and type(replay.exit_code) is int
            and replay.exit_code in (0, 1, 4)
            and all(isinstance(line, str) and line.isprintable() for line in replay.stderr)
            and _REPLAYABLE.fullmatch(stdout) is not None
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        ok = False
    if not ok:
        _remove(entry)
        raise MemoError("a memo entry that is not tracecomm's output")
    return replay


def store(cache: Path, key: str, replay: Replay) -> None:
    """Best effort: a memo that cannot be written only costs the next run its speed-up."""
    entry = cache / "memo" / key
    tmp = cache / "memo" / f".{key}.{os.getpid()}.tmp"
    meta = {
        "format": FORMAT,
        "exit_code": replay.exit_code,
        "stderr": list(replay.stderr),
        "stdout_bytes": len(replay.stdout),
    }
    try:
        tmp.mkdir(parents=True, exist_ok=True)
        (tmp / "stdout").write_bytes(replay.stdout)
        (tmp / "meta.json").write_text(json.dumps(meta), encoding="utf-8")
        if entry.exists():
            return
        tmp.rename(entry)
    except OSError:
        pass
    finally:
        _remove(tmp)


def _remove(folder: Path) -> None:
    with contextlib.suppress(OSError):
        if folder.exists():
            for child in folder.iterdir():
                child.unlink(missing_ok=True)
            folder.rmdir()
