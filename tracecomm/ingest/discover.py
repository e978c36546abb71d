"""Which files of a run folder are traces, and which rank each one is."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from tracecomm.errors import UsageError
from tracecomm.text import natural_key

# Nsight Systems exports and reports (ingest.nsys)
NSYS_SUFFIXES = (".sqlite", ".nsys-rep", ".qdrep")
# what a folder is searched for: Kineto traces, and Nsight Systems files
TRACE_SUFFIXES = (".json", ".json.gz", *NSYS_SUFFIXES)
_RANK_IN_NAME = re.compile(r"(?:^|[_\-./])(?:rank|worker)[_\-]?(\d+)(?=[_\-.]|$)", re.IGNORECASE)


def json_size(path: Path | str) -> int:
    """Bytes of JSON to parse: a gzip member's trailer holds its uncompressed size (mod 2**32)."""
    size, trailer = _sizes(path)
    return size if trailer is None else max(size, trailer)


def certain_json_size(path: Path | str, inflate_ratio: float) -> int | None:
    """``json_size`` where it is certain; None for a gzip file that could inflate to 4 GiB
    before the reader refuses it (``inflate_ratio``, ``ingest.limits``), whose trailer's size
    may have wrapped (at the default 200x, a file of 21 MB or more)."""
    size, trailer = _sizes(path)
    if trailer is None:
        return size
    return None if size * inflate_ratio >= 2**32 else max(size, trailer)


def _sizes(path: Path | str) -> tuple[int, int | None]:
    """The file's size, and a gzip file's trailer (its uncompressed size mod 2**32)."""
    size = os.path.getsize(path)
    try:
        with open(path, "rb") as handle:
            if handle.read(2) != b"\x1f\x8b" or size < 18:
                return size, None
            handle.seek(-4, os.SEEK_END)
            return size, int.from_bytes(handle.read(4), "little")
    except OSError:
        return size, None


def find_traces(inputs: Sequence[Path | str]) -> list[Path]:
    """Trace candidates: named files as given, folders searched recursively for *.json[.gz]."""
    found: list[Path] = []
    for item in map(Path, inputs):
        if item.is_dir():
            found.extend(_scan(item))
        elif item.is_file():
            found.append(item)
        else:
            raise UsageError(f"{item}: no such file or folder")
    return _dedupe(sorted(found, key=natural_key))


def _scan(folder: Path) -> Iterable[Path]:
    for path in folder.rglob("*"):
        if any(part.startswith(".") for part in path.relative_to(folder).parts):
            continue
        if path.name.lower().endswith(TRACE_SUFFIXES) and path.is_file():
            yield path


def _dedupe(paths: list[Path]) -> list[Path]:
    seen: set[Path] = set()
    unique = []
    for path in paths:
        key = path.resolve()
        if key not in seen:
            seen.add(key)
            unique.append(path)
    return unique


def rank_from_filename(path: Path | str) -> int | None:
    """``rank3``, ``rank-3``, ``rank_3``, ``worker3`` in the file name, then in parent folders."""
    path = Path(path)
    for part in (path.name, *(p.name for p in path.parents)):
        match = _RANK_IN_NAME.search("/" + part)
        if match:
            return int(match.group(1))
    return None


@dataclass(frozen=True)
class RankClaim:
    """A parsed file and the rank its contents claim (``distributedInfo.rank``), if any."""

    path: str
    declared_rank: int | None


@dataclass(frozen=True)
class RankAssignment:
    ranks: dict[int, str]  # rank -> path
    source: dict[int, str]  # rank -> "distributedInfo" | "file name" | "file order"
    duplicates: dict[int, tuple[str, ...]]  # rank -> every path that claimed it (all excluded)
    warnings: tuple[str, ...]


def assign_ranks(claims: Sequence[RankClaim]) -> RankAssignment:
    """Rank identity: distributedInfo, else the file name, else file order (with a warning)."""
    chosen: list[tuple[int | None, str, str]] = []
    for claim in claims:
        if claim.declared_rank is not None:
            chosen.append((claim.declared_rank, claim.path, "distributedInfo"))
        else:
            chosen.append((rank_from_filename(claim.path), claim.path, "file name"))
    warnings: list[str] = []
    taken = {rank for rank, _, _ in chosen if rank is not None}
    spare = (r for r in range(len(chosen) + len(taken)) if r not in taken)
    resolved: list[tuple[int, str, str]] = []
    for rank, path, source in chosen:
        if rank is None:
            rank = next(spare)
            source = "file order"
            warnings.append(
                f"{path}: no rank in distributedInfo or the file name; assumed rank {rank} "
                "from file order"
            )
        resolved.append((rank, path, source))
    by_rank: dict[int, list[tuple[str, str]]] = {}
    for rank, path, source in resolved:
        by_rank.setdefault(rank, []).append((path, source))
    duplicates = {r: tuple(p for p, _ in v) for r, v in by_rank.items() if len(v) > 1}
    ranks = {r: v[0][0] for r, v in by_rank.items() if len(v) == 1}
    sources = {r: v[0][1] for r, v in by_rank.items() if len(v) == 1}
    return RankAssignment(ranks, sources, duplicates, tuple(warnings))
