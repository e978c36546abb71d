"""The rich terminal report. Reads the Report; computes nothing but unit conversions."""

from __future__ import annotations

from typing import IO

from rich.console import Console
from rich.table import Table
from rich.text import Text

from tracecomm.analysis.model import RankReport, Report
from tracecomm.engine.model import Figures

# Beyond this many ranks the table shows the slowest ones; JSON and CSV always hold them all.
MAX_RANK_ROWS = 32


def render_terminal(report: Report, file: IO[str], color: bool | None = None) -> None:
    console = Console(
        file=file,
        width=None if file.isatty() else 160,
        force_terminal=color,
        no_color=color is False,
        highlight=False,
    )
    console.print(_headline(report))
    if report.summary.total is not None:
        console.print(_total_line(report.summary.total))
    console.print()
    console.print(_rank_table(report))
    if report.by_type:
        console.print()
        console.print(_type_table(report))
    if report.missing:
        console.print()
        console.print(_missing_table(report))


def _ms(ns: int | float | None) -> str:
    return "–" if ns is None else f"{ns / 1e6:,.3f}"


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{value:.1f}"


def _share(part: int, whole: int) -> str:
    return "–" if whole == 0 else f"{100 * part / whole:.1f}%"


def _headline(report: Report) -> Text:
    s = report.summary
    world = f" of {s.world_size}" if s.world_size is not None else ""
    steps = (
        f"steps {s.steps[0]}–{s.steps[-1]} ({len(s.steps)})"
        if len(s.steps) > 1
        else (f"step {s.steps[0]}" if s.steps else "no ProfilerStep: whole trace")
    )
    text = Text()
    text.append(f"tracecomm {report.tool_version}", style="bold")
    text.append(
        f" · {s.ranks_analyzed} rank(s){world} · {'/'.join(s.timelines).upper()} timeline · {steps}"
    )
    if s.worst_rank is not None:
        text.append(f"\nmedian rank {s.median_rank} · worst rank {s.worst_rank} (by {s.worst_by})")
    if report.partial:
        text.append("\npartial result: see missing ranks and warnings", style="bold yellow")
    return text


def _total_line(total: Figures) -> Text:
    w = total.window_ns
    text = Text("all ranks: ")
    text.append(f"compute {_share(total.compute_ns, w)}", style="green")
    text.append(" · ")
    text.append(f"exposed comm {_share(total.exposed_comm_ns, w)}", style="red")
    text.append(f" · exposed memory {_share(total.exposed_memory_ns, w)}")
    text.append(f" · idle {_share(total.idle_ns, w)}", style="yellow")
    text.append(f"  (of {_ms(w)} ms rank-time; comm overlapped {_pct(total.overlap_pct)}%)")
    return text


def _rank_rows(report: Report) -> tuple[list[RankReport], str | None]:
    ranks = list(report.ranks)
    if len(ranks) <= MAX_RANK_ROWS:
        return ranks, None
    slowest = sorted(
        ranks,
        key=lambda r: -(r.step_summary.median.window_ns if r.step_summary else 0),
    )[:MAX_RANK_ROWS]
    note = (
        f"{MAX_RANK_ROWS} slowest of {len(ranks)} ranks shown; "
        "--format json or csv lists every rank"
    )
    return sorted(slowest, key=lambda r: r.rank), note


def _rank_table(report: Report) -> Table:
    rows, note = _rank_rows(report)
    table = Table(
        title="Per rank, ms over the analysis window (first to last included step)",
        caption=note,
        title_justify="left",
    )
    for name in ("Rank", "Steps", "Window", "Step med"):
        table.add_column(name, justify="right")
    for name, style in (
        ("Compute", "green"),
        ("Comm", None),
        ("Overlapped", None),
        ("Exposed comm", "red"),
        ("Exposed mem", None),
        ("Idle", "yellow"),
        ("Overlap %", None),
        ("Busy %", None),
    ):
        table.add_column(name, justify="right", style=style)
    for rank in rows:
        window = rank.breakdown.window
        label = f"{rank.rank}{'*' if rank.partial else ''}"
        if window is None:
            table.add_row(label, "0", *(["–"] * 10))
            continue
        f = window.figures
        summary = rank.step_summary
        table.add_row(
            label,
            str(summary.steps if summary else "–"),
            _ms(f.window_ns),
            _ms(summary.median.window_ns) if summary else "–",
            _ms(f.compute_ns),
            _ms(f.comm_ns),
            _ms(f.overlapped_comm_ns),
            _ms(f.exposed_comm_ns),
            _ms(f.exposed_memory_ns),
            _ms(f.idle_ns),
            _pct(f.overlap_pct),
            _pct(f.busy_pct),
        )
    return table


def _type_table(report: Report) -> Table:
    table = Table(
        title="Per collective type, all ranks (ms, summed over ranks)",
        caption="types can run at once on two streams, so their exposed times may add up "
        "to more than the exposed comm total",
        title_justify="left",
    )
    for name in ("Type", "Kernels", "Ranks", "Comm", "Exposed", "Exposed share"):
        table.add_column(name, justify="left" if name == "Type" else "right")
    for t in report.by_type:
        table.add_row(
            t.coll_type,
            f"{t.kernels:,}",
            str(t.ranks),
            _ms(t.comm_ns),
            _ms(t.exposed_comm_ns),
            _share(t.exposed_comm_ns, t.comm_ns),
        )
    return table


def _missing_table(report: Report) -> Table:
    table = Table(title="Missing ranks", title_justify="left", title_style="bold yellow")
    table.add_column("Rank", justify="right")
    table.add_column("File")
    table.add_column("Why")
    for m in report.missing:
        table.add_row("?" if m.rank is None else str(m.rank), m.path or "–", m.reason)
    return table
