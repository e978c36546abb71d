"""PyTorch Flight Recorder dumps (nccl-logs.md §12): pickle (restricted) or JSON, and the
collective where the ranks diverged.

A dump is a file any process could have written, so reading one is bounded work that either
gives plain data or raises :class:`FlightRecorderError` (one line naming the file and the
problem), never anything else:

- the pickle is scanned opcode by opcode before it is loaded: more than
  ``TRACECOMM_MAX_FR_OBJECTS`` objects, or a memo index past ``TRACECOMM_MAX_FR_MEMO`` (a
  6-byte pickle can ask for a memo of billions of slots), is refused unloaded; files over
  ``TRACECOMM_MAX_FR_BYTES`` are not read at all;
- it is loaded with an unpickler that resolves no global at all, so only plain containers and
  scalars load; anything else (a malicious ``__reduce__``, a class instance) is refused before
  it can run;
- the loaded value is walked once into plain JSON-like data, counting every visit (shared
  sub-lists count each time they are reached: nested shared lists cannot blow up later work),
  no deeper than ``TRACECOMM_MAX_FR_DEPTH``, refusing cycles; bytes become text, sets lists,
  non-finite floats ``None``;
- every field is checked where it is used: a seq that is not an integer of at most 18 digits,
  an entry list that is not a list, … each is an error naming the entry and the field.

Each limit names the environment variable that raises it.
"""

from __future__ import annotations

import io
import json
import math
import os
import pickle
import pickletools
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tracecomm.doc import Doc
from tracecomm.nccl.quote import quote

_RANK = re.compile(r"(\d{1,9})$")
SUPPORTED_MAJOR = 2  # schema major versions read: 2.x (1.x dumps had a single seq_id)

LIMITS = {  # environment variable -> default
    "TRACECOMM_MAX_FR_BYTES": 1 << 30,
    "TRACECOMM_MAX_FR_OBJECTS": 20_000_000,
    "TRACECOMM_MAX_FR_MEMO": 10_000_000,
    "TRACECOMM_MAX_FR_DEPTH": 100,
}
_SEQ_MAX = 10**18  # seqs and ids: integers of at most 18 digits
_TEXT_MAX = 4096  # characters of one text field kept
_EXPANSION = 4  # objects the walk may visit per object of the pickle (shared references)


class FlightRecorderError(ValueError):
    """A dump that cannot be used (the message names the file and the problem)."""


def limit(name: str) -> int:
    """A bound from its environment variable (a positive integer), else its default."""
    raw = os.environ.get(name, "")
    if raw.strip().isdigit() and int(raw) > 0:
        return int(raw)
    return LIMITS[name]


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


class Divergence(Doc, frozen=True):
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
    if raw[:1] in (b"{", b"["):
        try:
            doc = json.loads(raw)
        except (ValueError, RecursionError) as exc:
            raise FlightRecorderError(f"{path}: not a Flight Recorder dump ({exc})") from None
        budget = limit("TRACECOMM_MAX_FR_OBJECTS")  # JSON is a tree: what is read is all
    else:
        # shared references (a GET of a list) can make a tree of 2**60 nodes from 500 bytes:
        # the walk follows at most a few times the objects the pickle holds
        objects = _scan(path, raw)
        budget = min(limit("TRACECOMM_MAX_FR_OBJECTS"), _EXPANSION * objects + 10_000)
        try:
            doc = _PlainUnpickler(io.BytesIO(raw)).load()
        except _Refused as exc:
            raise FlightRecorderError(f"{path}: {exc}") from None
        except Exception as exc:  # a broken pickle can raise almost anything
            raise FlightRecorderError(
                f"{path}: not a Flight Recorder dump ({type(exc).__name__}: {str(exc)[:200]})"
            ) from None
    doc = _Walk(path, budget).plain(doc)
    if not isinstance(doc, dict) or "entries" not in doc:
        raise FlightRecorderError(f"{path}: not a Flight Recorder dump (no entries)")
    return _dump(path, doc)


def _read(path: Path) -> bytes:
    cap = limit("TRACECOMM_MAX_FR_BYTES")
    try:
        size = path.stat().st_size
        if size > cap:
            raise FlightRecorderError(
                f"{path}: {size:,} bytes, over the {cap:,} bytes read of a Flight Recorder dump "
                "(TRACECOMM_MAX_FR_BYTES raises the limit)"
            )
        return path.read_bytes()
    except OSError as exc:
        raise FlightRecorderError(f"{path}: {exc.strerror or exc}") from exc


# opcodes that add no object: framing, marks, memo stores, container updates
_NO_OBJECT = frozenset(
    {
        "PROTO",
        "FRAME",
        "STOP",
        "MARK",
        "POP",
        "POP_MARK",
        "PUT",
        "BINPUT",
        "LONG_BINPUT",
        "MEMOIZE",
        "APPEND",
        "APPENDS",
        "SETITEM",
        "SETITEMS",
        "ADDITEMS",
    }
)
_MEMO_STORE = frozenset({"PUT", "BINPUT", "LONG_BINPUT", "MEMOIZE"})


def _scan(path: Path, raw: bytes) -> int:
    """Bounds checked on the opcodes, before anything is built: objects, memo index."""
    max_objects = limit("TRACECOMM_MAX_FR_OBJECTS")
    max_memo = limit("TRACECOMM_MAX_FR_MEMO")
    objects = memo = 0
    try:
        for op, arg, _ in pickletools.genops(raw):
            name = op.name
            if name in _MEMO_STORE:
                index = memo if name == "MEMOIZE" else arg
                memo += 1
                if not isinstance(index, int) or index >= max_memo or memo > max_memo:
                    raise FlightRecorderError(
                        f"{path}: the pickle's memo goes past {max_memo:,} entries "
                        "(TRACECOMM_MAX_FR_MEMO raises the limit)"
                    )
            elif name not in _NO_OBJECT:
                objects += 1
                if objects > max_objects:
                    raise _too_many(path, max_objects)
            if name == "STOP":
                break
    except FlightRecorderError:
        raise
    except Exception as exc:  # genops raises ValueError and friends on a broken stream
        raise FlightRecorderError(
            f"{path}: not a Flight Recorder dump ({type(exc).__name__}: {str(exc)[:200]})"
        ) from None
    return objects


def _too_many(path: Path, cap: int) -> FlightRecorderError:
    if cap < limit("TRACECOMM_MAX_FR_OBJECTS"):
        return FlightRecorderError(
            f"{path}: the Flight Recorder dump's shared references expand past {cap:,} objects "
            f"(at most {_EXPANSION} visits per object of the pickle are followed)"
        )
    return FlightRecorderError(
        f"{path}: more than {cap:,} objects in the Flight Recorder dump "
        "(TRACECOMM_MAX_FR_OBJECTS raises the limit)"
    )


class _Walk:
    """The loaded value as plain data (dict / list / str / int / float / bool / None), with
    every visit counted, the depth bounded and cycles refused."""

    def __init__(self, path: Path, budget: int) -> None:
        self.path = path
        self.left = budget
        self.cap = budget
        self.depth = limit("TRACECOMM_MAX_FR_DEPTH")
        self.path_ids: set[int] = set()

    def plain(self, value: Any, depth: int = 0) -> Any:
        self.left -= 1
        if self.left < 0:
            raise _too_many(self.path, self.cap)
        if value is None or isinstance(value, (bool, str)):
            return value if not isinstance(value, str) else value[:_TEXT_MAX]
        if isinstance(value, int):
            # a 10,000-digit integer cannot even be printed (int -> str is bounded): marked
            return value if value.bit_length() <= 63 else f"<integer of {value.bit_length()} bits>"
        if isinstance(value, float):
            return value if math.isfinite(value) else None
        if isinstance(value, (bytes, bytearray)):
            return bytes(value[:_TEXT_MAX]).decode("utf-8", "replace")
        if not isinstance(value, (dict, list, tuple, set, frozenset)):
            raise FlightRecorderError(
                f"{self.path}: unexpected {type(value).__name__} value in a Flight Recorder dump"
            )
        if depth >= self.depth:
            raise FlightRecorderError(
                f"{self.path}: Flight Recorder dump nested deeper than {self.depth} levels "
                "(TRACECOMM_MAX_FR_DEPTH raises the limit)"
            )
        key = id(value)
        if key in self.path_ids:
            raise FlightRecorderError(f"{self.path}: the Flight Recorder dump contains a cycle")
        self.path_ids.add(key)
        try:
            if isinstance(value, dict):
                return {self._key(k): self.plain(v, depth + 1) for k, v in value.items()}
            return [self.plain(v, depth + 1) for v in value]
        finally:
            self.path_ids.discard(key)

    def _key(self, key: Any) -> str:
        self.left -= 1
        if isinstance(key, str):
            return key[:_TEXT_MAX]
        if isinstance(key, (bool, float)) or key is None:
            return str(key)
        if isinstance(key, int):
            return str(key) if abs(key) < _SEQ_MAX else "?"
        if isinstance(key, (bytes, bytearray)):
            return bytes(key[:_TEXT_MAX]).decode("utf-8", "replace")
        if isinstance(key, tuple):
            return json.dumps(self.plain(key))[:_TEXT_MAX]
        raise FlightRecorderError(
            f"{self.path}: unexpected {type(key).__name__} key in a Flight Recorder dump"
        )


def _int_field(path: Path, where: str, name: str, value: Any, default: int | None = None) -> int:
    if value is None and default is not None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or abs(value) >= _SEQ_MAX:
        shown = repr(value)
        shown = shown[:40] + "…" if len(shown) > 40 else shown
        raise FlightRecorderError(f"{path}: {where}: {name} is not an integer ({shown})")
    return value


def _text(value: Any, cap: int = 200) -> str:
    """A field as text for a message, control characters escaped (it may reach a terminal)."""
    if isinstance(value, str):
        return quote(value, cap)
    if value is None:
        return ""
    return quote(json.dumps(value), cap)


def _dump(path: Path, doc: Mapping[str, Any]) -> FrDump:
    version = _version(doc.get("version"), path)
    match = _RANK.search(path.stem if path.suffix == ".json" else path.name)
    if match is None:
        raise FlightRecorderError(f"{path}: no rank at the end of the file name")
    pg_ranks = {}
    config = doc.get("pg_config")
    if isinstance(config, Mapping):
        for key, cfg in config.items():
            if isinstance(cfg, Mapping):
                ranks = cfg.get("ranks")
                text = ranks if isinstance(ranks, str) else json.dumps(ranks)
                name = cfg.get("name", key)
                pg_ranks[_text(name)] = tuple(
                    int(r) for r in re.findall(r"\d{1,9}", text[: 1 << 20])[:1_000_000]
                )
    raw_entries = doc["entries"]
    if not isinstance(raw_entries, list):
        raise FlightRecorderError(f"{path}: entries is not a list")
    entries = []
    for i, e in enumerate(raw_entries):
        if not isinstance(e, Mapping):
            continue
        where = f"entry {i}"
        group = e.get("process_group") or ("", "")
        p2p = bool(e.get("is_p2p"))
        key = (
            "p2p_seq_id" if p2p else ("collective_seq_id" if "collective_seq_id" in e else "seq_id")
        )
        entries.append(
            FrEntry(
                pg=_text(group[0] if isinstance(group, list) and group else group),
                seq=_int_field(path, where, key, e.get(key), 0 if key not in e else None),
                p2p=p2p,
                op=_text(e.get("profiling_name", "")),
                state=_text(e.get("state", "")),
                input_sizes=_text(e.get("input_sizes")),
                output_sizes=_text(e.get("output_sizes")),
                record_id=_int_field(path, where, "record_id", e.get("record_id"), i),
            )
        )
    lib = doc.get("comm_lib_version")
    return FrDump(
        path=str(path),
        rank=int(match.group(1)),
        version=version,
        nccl_version=_text(lib, 64) if isinstance(lib, str) and lib else None,
        pg_ranks=pg_ranks,
        entries=tuple(entries),
    )


def _version(value: object, path: Path) -> tuple[int, int]:
    """ "2.10" is (2, 10): compared as integers, never as a float (2.10 > 2.9)."""
    text = value if isinstance(value, str) else (str(value) if isinstance(value, float) else "")
    match = re.fullmatch(r"(\d{1,6})\.(\d{1,6})", text.strip())
    if match is None:
        shown = repr(value)
        raise FlightRecorderError(
            f"{path}: no readable schema version ({shown[:40] + '…' if len(shown) > 40 else shown})"
        )
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
            if not present:
                continue  # no member holds it: the group's members list names other ranks
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
    return sorted(r for r in set(listed or ranks) if r in dumped)


def find_dumps(paths: Iterable[Path]) -> list[Path]:
    """``nccl_trace_rank_<N>`` files (no extension, or .json) among ``paths``."""
    return sorted(
        p
        for p in paths
        if p.is_file()
        and re.search(r"(trace_rank_|fr_trace_|flight_recorder)\d{1,9}(\.json)?$", p.name)
    )
