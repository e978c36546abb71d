"""Which files of a run folder are NCCL logs or Flight Recorder dumps."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from tracecomm.nccl.flight import FlightRecorderError, FrDump, find_dumps, load_dump
from tracecomm.nccl.quote import quote

if TYPE_CHECKING:
    from tracecomm.nccl.diagnose import NcclSummary
    from tracecomm.nccl.model import Tears

LOG_SUFFIXES = (".log", ".txt", ".out", ".err")
_SNIFF_BYTES = 1 << 16
_MARKERS = (b"NCCL INFO", b"NCCL WARN", b"NCCL version", b"ProcessGroupNCCL", b"WorkNCCL")


@dataclass(frozen=True)
class NcclInputs:
    logs: tuple[Path, ...]
    dumps: tuple[Path, ...]
    warnings: tuple[str, ...] = field(default=())


def has_nccl_lines(path: Path) -> bool:
    """NCCL output within the first 64 KiB (jobs print it at communicator init)."""
    try:
        with path.open("rb") as handle:
            head = handle.read(_SNIFF_BYTES)
    except OSError:
        return False
    return any(marker in head for marker in _MARKERS)


def discover(inputs: Sequence[str | Path], named_logs: Sequence[Path] = ()) -> NcclInputs:
    """NCCL logs (``*.log``, ``*.txt``, ``*.out``, ``*.err`` with NCCL lines, plus the files
    named with ``--nccl-log``) and Flight Recorder dumps under the run folders."""
    files: list[Path] = []
    for item in map(Path, inputs):
        if item.is_dir():
            files.extend(p for p in sorted(item.rglob("*")) if p.is_file())
        elif item.is_file():
            files.append(item)
    logs = [p for p in files if p.suffix.lower() in LOG_SUFFIXES and has_nccl_lines(p)]
    dumps = find_dumps(files)
    missing = [f"--nccl-log {p}: no such file" for p in named_logs if not p.is_file()]
    logs += [p for p in named_logs if p.is_file() and p not in logs and p not in dumps]
    return NcclInputs(tuple(logs), tuple(dumps), tuple(missing))


def tear_warning(path: Path, tears: Tears) -> str:
    """One line per file: the records torn, and the fix (one file per process)."""
    dropped = tears.torn - tears.recovered
    return (
        f"{path}: {tears.torn:,} NCCL record{'s' if tears.torn != 1 else ''} torn by processes "
        f"writing to one stream ({tears.recovered:,} joined back with their tails, {dropped:,} "
        "dropped); log each process to its own file: NCCL_DEBUG_FILE=<dir>/nccl.%h.%p.log "
        "(tracecomm.profile sets it)"
    )


def analyze_nccl(found: NcclInputs) -> tuple[NcclSummary | None, list[str]]:
    """Parse the logs (streaming) and dumps; a dump that cannot be read is a warning."""
    warnings = list(found.warnings)
    if not found.logs and not found.dumps:  # most runs: the parser need not load at all
        return None, [quote(w, 1000) for w in warnings]
    from tracecomm.nccl.diagnose import summarize
    from tracecomm.nccl.model import NcclLog
    from tracecomm.nccl.parse import parse_stream

    dumps: list[FrDump] = []
    for path in found.dumps:
        try:
            dumps.append(load_dump(path))
        except FlightRecorderError as exc:
            warnings.append(f"Flight Recorder dump skipped: {exc}")
    log = NcclLog()
    for path in found.logs:
        try:
            with path.open("rb") as handle:
                parse_stream(handle, log)
        except OSError as exc:
            warnings.append(f"NCCL log skipped: {path}: {exc.strerror or exc}")
            continue
        if (tears := log.tears.get(len(log.paths))) is not None:
            warnings.append(tear_warning(path, tears))
        log.paths.append(str(path))
    warnings = [quote(w, 1000) for w in warnings]  # file names and messages reach a terminal
    if not log.paths and not dumps:
        return None, warnings
    return summarize(log, dumps), warnings
