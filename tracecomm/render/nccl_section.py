"""The NCCL section of the terminal report: what the logs say, then the diagnostics."""

from __future__ import annotations

from rich.text import Text

from tracecomm.nccl.diagnose import NcclSummary

_STYLE = {"error": "bold red", "warning": "yellow", "info": "dim"}
_MARK = {"error": "✗", "warning": "!", "info": "·"}


def nccl_section(s: NcclSummary) -> Text:
    text = Text()
    text.append("NCCL logs", style="bold")
    text.append(
        f" · {len(s.files)} file(s), {s.nccl_lines:,} NCCL lines ({s.unknown_lines} unknown), "
        f"{s.processes} process(es), {s.colls:,} COLL lines"
    )
    if s.flight_recorder_dumps:
        text.append(f", {s.flight_recorder_dumps} Flight Recorder dump(s)")
    if s.versions:
        text.append("\n  NCCL " + "; ".join(f"{v} ×{len(p)}" for v, p in s.versions.items()))
    if s.networks:
        text.append(
            "\n  network " + "; ".join(f"{n} on {len(h)} host(s)" for n, h in s.networks.items())
        )
    if s.transports:
        text.append("\n  connections " + ", ".join(f"{k} {n}" for k, n in s.transports.items()))
    if not s.diagnostics:
        text.append("\n  no findings", style="green")
    for d in s.diagnostics:
        text.append(f"\n  {_MARK[d.severity]} {d.rule}: ", style=_STYLE[d.severity])
        text.append(d.message)
    return text
