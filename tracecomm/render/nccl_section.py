"""The NCCL section of the terminal report: what the logs say, then the diagnostics, each with
the log lines that prove it (already escaped by the parser: no control character from a log
reaches the terminal)."""

from __future__ import annotations

from pathlib import PurePath

from rich.text import Text

from tracecomm.nccl.diagnose import NcclSummary, VersionSeen
from tracecomm.nccl.quote import quote
from tracecomm.text import compact_ranges

_STYLE = {"error": "bold red", "warning": "yellow", "info": "dim"}
_MARK = {"error": "✗", "warning": "!", "info": "·"}


def _plural(n: int, word: str, many: str | None = None) -> str:
    """``3 file(s)``: the report's own way of counting."""
    return f"{n:,} {many or word + '(s)'}"


def _version(v: VersionSeen, several_files: bool = False) -> str:
    where = []
    if several_files and v.files:  # which log says so, by name (their folders are the run's)
        names = [PurePath(f).name for f in v.files]
        where.append("in " + ", ".join(names[:3]) + (", …" if len(names) > 3 else ""))
    if v.hosts:
        where.append(", ".join(v.hosts[:4]) + (", …" if len(v.hosts) > 4 else ""))
    if v.ranks:
        where.append(f"rank{'s' if len(v.ranks) > 1 else ''} {compact_ranges(v.ranks)}")
    elif v.processes:
        where.append(_plural(len(v.processes), "process", "process(es)"))
    return f"{v.library} {v.version}" + (f" ({'; '.join(where)})" if where else "")


def nccl_section(s: NcclSummary) -> Text:
    text = Text()
    text.append("NCCL logs", style="bold")
    hosts = f" on {_plural(len(s.hosts), 'host')}" if s.hosts else ""
    text.append(
        f" · {_plural(len(s.files), 'file')}, {_plural(s.nccl_lines, 'NCCL line')} "
        f"({s.unknown_lines:,} unknown), {_plural(s.processes, 'process', 'process(es)')}{hosts}, "
        f"{_plural(s.colls, 'COLL line')}"
    )
    if s.damaged_records:
        text.append(f" ({s.damaged_records:,} damaged, not counted)")
    if s.flight_recorder_dumps:
        text.append(f", {_plural(s.flight_recorder_dumps, 'Flight Recorder dump')}")
    read = s.colls + s.damaged_records
    if s.colls_compared < read:
        text.append(
            f"\n  COLL counts compared across processes for the first {s.colls_compared:,} of "
            f"{read:,} records (the rest checked for their size alone: memory stays bounded)"
        )
    if s.torn_records:
        text.append(
            f"\n  torn records {s.torn_records:,} ({s.torn_recovered:,} joined back, "
            f"{s.torn_records - s.torn_recovered:,} dropped): processes wrote to one stream"
        )
    if s.versions:
        several = len(s.files) > 1
        text.append("\n  versions " + "; ".join(_version(v, several) for v in s.versions))
    if s.networks:
        text.append(
            "\n  network "
            + "; ".join(f"{n} on {_plural(len(h), 'host')}" for n, h in s.networks.items())
        )
    if s.transports:
        text.append("\n  connections " + ", ".join(f"{k} {n:,}" for k, n in s.transports.items()))
    if not s.diagnostics:
        text.append("\n  no findings", style="green")
    for d in s.diagnostics:
        text.append(f"\n  {_MARK[d.severity]} {d.rule}: ", style=_STYLE[d.severity])
        text.append(quote(d.message, 2000))
        for line in d.evidence:
            text.append(f"\n      │ {quote(line, 200)}", style="dim")
    return text
