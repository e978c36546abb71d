"""PyTorch Flight Recorder dumps (nccl-logs.md §12): pickle (restricted) or JSON, and the
collective where the ranks diverged.

A dump is a pickle that any process could have written: it is read with an unpickler that
resolves no global at all, so only plain containers and scalars load; anything else (a
malicious ``__reduce__``, a class instance) is refused before it can run.
"""

from __future__ import annotations

import io
import json
import pickle
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_RANK = re.compile(r"(\d+)$")
SUPPORTED_MAJOR = 2  # schema major versions read: 2.x (1.x dumps had a single seq_id)


class FlightRecorderError(ValueError):
    """A dump that cannot be used (the message names the file and the problem)."""


class _Refused(pickle.UnpicklingError):
    pass


class _PlainUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        raise _Refused(
            f"refused to load {module}.{name}: a Flight Recorder dump holds only plain data"
        )


@dataclass(frozen=True)
class FrEntry:
    pg: str  # process group name (the cross-rank key with the seq)
    seq: int  # collective_seq_id, or p2p_seq_id for point-to-point
    p2p: bool
    op: str  # profiling_name, e.g. nccl:all_reduce
    state: str  # scheduled, started, completed
    input_sizes: str
    output_sizes: str
    record_id: int


@dataclass(frozen=True)
class FrDump:
    path: str
    rank: int
    version: tuple[int, int]
    nccl_version: str | None
    pg_ranks: dict[str, tuple[int, ...]]  # pg name -> global ranks (from pg_config)
    entries: tuple[FrEntry, ...]


@dataclass(frozen=True)
class Divergence:
    """The first (group, seq) not every member rank completed: the hang point (§12)."""

    pg: str
    seq: int
    op: str
    sizes: str
    missing_ranks: tuple[int, ...]  # members with no entry for it: never joined
    stuck_ranks: tuple[int, ...]  # entered but did not complete
    sizes_disagree: bool


def load_dump(path: Path) -> FrDump:
    raw = _read(path)
    try:
        doc = (
            json.loads(raw) if raw[:1] in (b"{", b"[") else _PlainUnpickler(io.BytesIO(raw)).load()
        )
    except _Refused as exc:
        raise FlightRecorderError(f"{path}: {exc}") from None
    except Exception as exc:  # a broken pickle can raise almost anything
        raise FlightRecorderError(f"{path}: not a Flight Recorder dump ({exc})") from None
    if not isinstance(doc, dict) or "entries" not in doc:
        raise FlightRecorderError(f"{path}: not a Flight Recorder dump (no entries)")
    return _dump(path, doc)


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise FlightRecorderError(f"{path}: {exc.strerror or exc}") from exc


def _dump(path: Path, doc: Mapping[str, Any]) -> FrDump:
    version = _version(doc.get("version"), path)
    match = _RANK.search(path.stem if path.suffix == ".json" else path.name)
    if match is None:
        raise FlightRecorderError(f"{path}: no rank at the end of the file name")
    pg_ranks = {}
    for key, cfg in (doc.get("pg_config") or {}).items():
        if isinstance(cfg, Mapping):
            ranks = cfg.get("ranks")
            text = ranks if isinstance(ranks, str) else json.dumps(ranks)
            pg_ranks[str(cfg.get("name", key))] = tuple(int(r) for r in re.findall(r"\d+", text))
    entries = []
    for e in doc["entries"]:
        if not isinstance(e, Mapping):
            continue
        group = e.get("process_group") or ("", "")
        p2p = bool(e.get("is_p2p"))
        seq = e.get("p2p_seq_id") if p2p else e.get("collective_seq_id", e.get("seq_id"))
        entries.append(
            FrEntry(
                pg=str(group[0] if isinstance(group, (list, tuple)) and group else group),
                seq=int(seq or 0),
                p2p=p2p,
                op=str(e.get("profiling_name", "")),
                state=str(e.get("state", "")),
                input_sizes=json.dumps(e.get("input_sizes")),
                output_sizes=json.dumps(e.get("output_sizes")),
                record_id=int(e.get("record_id", 0)),
            )
        )
    return FrDump(
        path=str(path),
        rank=int(match.group(1)),
        version=version,
        nccl_version=str(doc["comm_lib_version"]) if doc.get("comm_lib_version") else None,
        pg_ranks=pg_ranks,
        entries=tuple(entries),
    )


def _version(value: object, path: Path) -> tuple[int, int]:
    """ "2.10" is (2, 10): compared as integers, never as a float (2.10 > 2.9)."""
    match = re.fullmatch(r"(\d+)\.(\d+)", str(value or "").strip())
    if match is None:
        raise FlightRecorderError(f"{path}: no readable schema version ({value!r})")
    major, minor = int(match.group(1)), int(match.group(2))
    if major != SUPPORTED_MAJOR:
        raise FlightRecorderError(
            f"{path}: Flight Recorder schema {major}.{minor} is not read (only {SUPPORTED_MAJOR}.x)"
        )
    return major, minor


def divergences(dumps: Sequence[FrDump]) -> list[Divergence]:
    """Per process group, the first collective (by seq) that some member did not complete:
    members with no entry for it never joined; members whose entry is not completed are stuck.
    Each rank's ring buffer is trimmed to its complete history (the largest first seq among
    the members), because buffers wrap at different points."""
    out = []
    by_pg: dict[str, dict[int, dict[int, FrEntry]]] = {}
    for dump in dumps:
        for e in dump.entries:
            if not e.p2p:
                by_pg.setdefault(e.pg, {}).setdefault(dump.rank, {})[e.seq] = e
    for pg, ranks in sorted(by_pg.items()):
        members = _members(pg, dumps, ranks)
        start = max(min(seqs) for seqs in ranks.values())
        seqs = sorted({s for entries in ranks.values() for s in entries if s >= start})
        for seq in seqs:
            present = {r: ranks[r][seq] for r in members if seq in ranks.get(r, {})}
            missing = tuple(r for r in members if r not in present)
            stuck = tuple(r for r, e in present.items() if e.state != "completed")
            if missing or stuck:
                first = next(iter(present.values()))
                sizes = {(e.input_sizes, e.output_sizes) for e in present.values()}
                out.append(
                    Divergence(
                        pg=pg,
                        seq=seq,
                        op=first.op,
                        sizes=f"in {first.input_sizes} out {first.output_sizes}",
                        missing_ranks=missing,
                        stuck_ranks=tuple(sorted(stuck)),
                        sizes_disagree=len(sizes) > 1,
                    )
                )
                break
    return out


def _members(pg: str, dumps: Sequence[FrDump], ranks: Mapping[int, object]) -> list[int]:
    listed = next((d.pg_ranks[pg] for d in dumps if pg in d.pg_ranks), ())
    dumped = {d.rank for d in dumps}
    # members whose dump exists; a member without any dump cannot be judged
    return sorted(r for r in (listed or ranks) if r in dumped)


def find_dumps(paths: Iterable[Path]) -> list[Path]:
    """``nccl_trace_rank_<N>`` files (no extension, or .json) among ``paths``."""
    return sorted(
        p
        for p in paths
        if p.is_file()
        and re.search(r"(trace_rank_|fr_trace_|flight_recorder)\d+(\.json)?$", p.name)
    )
