"""The rich terminal report. Reads the Report; computes nothing but unit conversions."""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console, RenderableType
from rich.table import Table
from rich.text import Text

from tracecomm.analysis.model import RankReport
from tracecomm.analysis.pipeline_view import PipelineView
from tracecomm.analysis.report import Report
from tracecomm.analysis.stragglers import on_mean_step
from tracecomm.compat.crosscheck import Crosscheck
from tracecomm.render import View
from tracecomm.render.alltoall_section import all_to_all_section
from tracecomm.render.bottom_line import bottom_line, findings_section
from tracecomm.render.fit import FitTable
from tracecomm.render.kernel_section import kernel_section
from tracecomm.render.mfu_panel import mfu_panel
from tracecomm.render.nccl_section import nccl_section
from tracecomm.render.projection_section import projection_section
from tracecomm.render.whatif_section import whatif_section
from tracecomm.text import (
    compact_ranges,
    in_unit,
    map_strings,
    ms,
    natural_key,
    pct,
    rank_list,
    time_unit,
    visible,
)

if TYPE_CHECKING:
    from tracecomm.nccl.diagnose import NcclSummary

# Beyond this many ranks the table shows the slowest ones; JSON and CSV always hold them all.
MAX_RANK_ROWS = 32


def console_of(out: io.StringIO, view: View, width: int) -> Console:
    """A console writing to ``out`` as the destination would show it: the terminal's width
    and colours, else ``width`` columns and only the colours the environment forces."""
    return Console(
        file=out,
        width=view.width or width,
        force_terminal=view.color,
        no_color=view.color is False,
        highlight=False,
        markup=False,  # a name with [brackets] is text, never style or link markup
    )


def rich_bytes(renderables: Sequence[RenderableType], view: View, width: int) -> bytes:
    out = io.StringIO()
    console = console_of(out, view, width)
    for item in renderables:
        console.print(item)
    return out.getvalue().encode()


def render_projection(report: Report, view: View) -> bytes:
    assert report.projection is not None
    return rich_bytes([projection_section(map_strings(report.projection, visible))], view, 160)


def render_nccl(found: tuple[NcclSummary, Sequence[str]], view: View) -> bytes:
    return rich_bytes([nccl_section(map_strings(found[0], visible))], view, 120)


def render_terminal(report: Report, view: View) -> bytes:
    """The report for a terminal; every text that came from an input is made visible first
    (``text.visible``): no control character of a trace reaches the terminal."""
    out = io.StringIO()
    _report(map_strings(report, visible), console_of(out, view, 160), view.top, view.brief)
    return out.getvalue().encode()


def _report(
    report: Report, console: Console, straggler_rows: int | None, brief: bool = False
) -> None:
    console.print(bottom_line(report))
    if brief:
        return
    console.print()
    found = findings_section(report)
    if found is not None:
        console.print(found)
    console.print(_headline(report))
    console.print()
    if report.hta_compat is not None:
        console.print(_hta_table(report))
        console.print()
    console.print(_rank_table(report))
    if report.by_type:
        console.print()
        console.print(_type_table(report))
    if report.all_to_all is not None:
        console.print()
        console.print(all_to_all_section(report.all_to_all))
    idle = _idle_causes(report)
    if idle is not None:
        console.print()
        console.print(idle)
    if report.throughput is not None:
        console.print()
        console.print(mfu_panel(report.throughput, "all ranks"))
    if report.kernels is not None:
        console.print()
        console.print(kernel_section(report.kernels))
    if report.stragglers is not None:
        console.print()
        console.print(_straggler_table(report, straggler_rows or MAX_STRAGGLER_ROWS))
        console.print(_group_type_delays(report))
        if report.stragglers.slowest_instances:
            console.print(_slowest_instances(report))
        console.print(_heat_map(report, console.width))
        fix = whatif_section(report.stragglers)
        if fix is not None:
            console.print(fix)
    if report.cross_rank is not None:
        console.print()
        console.print(_cross_rank(report))
    if report.bandwidth is not None and report.bandwidth.rows:
        console.print()
        console.print(_bandwidth_table(report))
    for item in _pipelines(report.pipelines):
        console.print()
        console.print(item)
    if report.projection is not None:
        console.print()
        console.print(projection_section(report.projection))
    if report.nccl is not None:
        console.print()
        console.print(nccl_section(report.nccl))
    if report.missing_ranks:
        console.print()
        console.print(_missing_table(report))
    if report.notes:
        console.print()
        console.print(_notes(report))


def _headline(report: Report) -> Text:
    """The details' own header: which ranks the figures below are about."""
    s = report.summary
    text = Text("Details", style="bold")
    if s.worst_rank is not None:
        text.append(f": median rank {s.median_rank} · worst rank {s.worst_rank} (by {s.worst_by})")
    if report.partial:
        text.append("\npartial result: see missing ranks and warnings", style="bold yellow")
    return text


def _rank_rows(report: Report) -> tuple[list[RankReport], str | None]:
    ranks = list(report.ranks)
    if len(ranks) <= MAX_RANK_ROWS:
        return ranks, None
    shown = set(report.summary.slowest_first[:MAX_RANK_ROWS])
    slowest = [r for r in ranks if r.rank in shown]
    note = (
        f"{MAX_RANK_ROWS} slowest of {len(ranks)} ranks shown; "
        "--format json or csv lists every rank"
    )
    return sorted(slowest, key=lambda r: r.rank), note


def _rank_table(report: Report) -> Table:
    """Each rank's mean step (its analysis window over its included steps, metrics.md §3):
    figures a person compares across ranks and runs, in one unit chosen for their size."""
    rows, note = _rank_rows(report)
    means = [r.step_mean if r.step_median else None for r in rows]
    unit, per = time_unit(max((m.window_ns for m in means if m is not None), default=0))
    caption = (
        "mean step = the analysis window (first to last included step, the gaps between them "
        "too) over its steps; compute + exposed comm + exposed mem + idle = step; busy % is "
        "the share with any GPU activity: it is not MFU"
    )
    table = FitTable(
        title=f"Per rank, its mean step ({unit})",
        caption=f"{note}\n{caption}" if note else caption,
        title_justify="left",
    )
    for name, style in (
        ("Rank", None),
        ("Steps", None),
        ("Step", "bold"),
        ("Compute", "green"),
        ("Comm", None),
        ("Exposed comm", "red"),
        ("Exposed mem", None),
        ("Idle", "yellow"),
        ("Overlap %", None),
        ("Busy %", None),
    ):
        table.add_column(name, justify="right", style=style, overflow="fold")
    for rank, mean in zip(rows, means, strict=True):
        window = rank.window
        label = f"{rank.rank}{'*' if rank.partial else ''}"
        if window is None or mean is None or rank.step_median is None:
            table.add_row(label, "0", *(["–"] * 8))
            continue
        f = window.figures
        table.add_row(
            label,
            str(rank.steps_included),
            in_unit(mean.window_ns, per),
            in_unit(mean.compute_ns, per),
            in_unit(mean.comm_ns, per),
            in_unit(mean.exposed_comm_ns, per),
            in_unit(mean.exposed_memory_ns, per),
            in_unit(mean.idle_ns, per),
            pct(f.overlap_pct),
            pct(f.busy_pct),
        )
    return table


def _type_table(report: Report) -> Table:
    table = FitTable(
        title="Per collective type (ms, sum over ranks)",
        caption="types on two streams can overlap:\nexposed times may sum past the total",
        title_justify="left",
    )
    for name in ("Type", "Kernels", "Ranks", "Comm", "Exposed"):
        table.add_column(name, justify="left" if name == "Type" else "right")
    for t in report.by_type:
        table.add_row(
            t.coll_type, f"{t.kernels:,}", str(t.ranks), ms(t.comm_ns), ms(t.exposed_comm_ns)
        )
    return table


_CAUSE_WORDS = {
    "pipeline_fill": "pipeline fill",
    "pipeline_drain": "pipeline drain",
    "pipeline_wait": "waiting for a pipeline peer",
    "sync": "after a synchronize",
    "dataloader": "waiting for the data loader",
    "host_bound": "kernels launched late (CPU-bound)",
    "other": "other",
}


def _idle_causes(report: Report) -> Text | None:
    """Where the idle time went (metrics.md §10), summed over ranks."""
    causes, shares = report.summary.idle_by_cause, report.summary.idle_by_cause_pct
    total = report.summary.total
    if not causes or not shares or total is None or not total.idle_ns:
        return None
    lines = [
        f"  {_CAUSE_WORDS.get(cause, cause)}: {ms(ns)} ms ({shares[cause]:.0f} %)"
        for cause, ns in sorted(causes.items(), key=lambda item: -item[1])
        if ns
    ]
    text = Text(f"Idle {ms(total.idle_ns)} ms over all ranks, by cause:\n", style="bold")
    text.append("\n".join(lines))
    return text


def _pipelines(views: Sequence[PipelineView]) -> list[Text]:
    """One pipeline per distinct verdict (analysis.pipeline_view: ``shown_as``), then a line
    for the pipelines like it (the JSON holds them all)."""
    out = []
    for shown in (v for v in views if v.shown_as is None):
        text = _pipeline(shown)
        rest = [v for v in views if v.shown_as == shown.group]
        if rest:
            spans = [v.span_ns for v in rest]
            worst = max(s.bubble_pct for v in rest for s in v.per_stage)
            names = ", ".join(v.group for v in rest[:3]) + (", …" if len(rest) > 3 else "")
            text.append(
                f"\n  {len(rest)} more pipeline{'s' * (len(rest) > 1)} like this ({names}): "
                f"{_waiting(rest)}span {ms(min(spans))}–{ms(max(spans))} ms per step, bubble "
                f"up to {worst:.1f} % (all in the JSON)"
            )
        out.append(text)
    return out


def _waiting(views: Sequence[PipelineView]) -> str:
    """ "waiting for rank 0, " when every one of them waits for the same slow ranks."""
    waits = {v.waits_for for v in views}
    if len(waits) != 1 or not (slow := next(iter(waits))):
        return ""
    ranks = f"rank{'s' * (len(slow) > 1)} {rank_list(slow)}"
    return f"waiting for {ranks} at the data-parallel collectives, "


def _pipeline(view: PipelineView) -> Text:
    m = (
        f"{view.microbatches} micro-batches ({view.microbatches_source})"
        if view.microbatches
        else "micro-batches unknown (--microbatches)"
    )
    textbook = (
        f"; textbook 1F1B bubble {view.textbook_bubble_pct:.1f} %"
        if view.textbook_bubble_pct is not None
        else ""
    )
    text = Text(f"Pipeline {view.group}", style="bold")
    text.append(
        f": {view.stages} stages ({view.stages_source}), {m}{textbook}; "
        f"span {ms(view.span_ns)} ms per step over {view.steps} step(s)"
    )
    for s in view.per_stage:
        text.append(
            f"\n  stage {s.stage} (rank {s.rank}): bubble {s.bubble_pct:.1f} %, "
            f"compute {ms(s.compute_ns)} ms per step"
        )
    text.append(f"\n  {view.verdict}")
    return text


MAX_STRAGGLER_ROWS = 8
_SHADES = " ░▒▓█"


def _straggler_table(report: Report, rows: int) -> Table:
    st = report.stragglers
    assert st is not None
    flagged = rank_list(st.flagged) or "none"
    caption = f"flagged (by {st.flag_basis}): {flagged}"
    if st.flagged and st.recoverable_pct is not None:
        w = st.replay
        on_mean = on_mean_step(st) and w is not None
        base = w.mean_step_ns if on_mean and w is not None else st.median_step_ns
        caption += (
            f" · without them the ranks' {'mean' if on_mean else 'median'} step would take ≈ "
            f"{ms(st.step_if_no_straggler_ns)} ms instead of {ms(base)} ms "
            f"({st.recoverable_pct:.1f}% back; "
            f"{'first-order estimate' if st.recoverable_basis == 'first-order' else 'by replay'})"
        )
    table = FitTable(
        title="Stragglers, ms per step (gain = the step shortened by fixing the rank alone, "
        "by replay; root delay = max(compute, stage excess) + delay caused − inherited)",
        caption=caption,
        title_justify="left",
    )
    for name in (
        "Rank",
        "Gain",
        "Root delay",
        "Compute excess",
        "Stage excess",
        "Delay caused",
        "Inherited",
        "Last",
        "Waited",
        "Compute ratio",
    ):
        table.add_column(name, justify="right")
    for r in st.ranks[:rows]:
        table.add_row(
            f"{r.rank}{' ⚑' if r.flagged else ''}",
            ms(r.gain_ns),
            ms(r.root_delay_ns),
            ms(r.compute_excess_ns),
            ms(r.stage_excess_ns),
            ms(r.delay_caused_per_step_ns),
            ms(r.inherited_delay_per_step_ns),
            f"{r.times_last} ({pct(_share_pct(r.times_last_share))}%)",
            ms(r.wait_per_step_ns),
            "–" if r.compute_ratio is None else f"{r.compute_ratio:.3f}",
        )
    return table


def _slowest_instances(report: Report) -> Table:
    """The collective instances that took longest (metrics.md §6): which call, how many ranks,
    who came last, and how much of it was waiting for them against moving data."""
    st = report.stragglers
    assert st is not None
    table = FitTable(
        title="Slowest collective instances, ms (first arrival to the earliest end = wait for "
        "the last member + transfer)",
        title_justify="left",
    )
    for name in ("Group", "Type", "Seq / key", "Step", "Ranks", "Last", "Wait", "Transfer"):
        table.add_column(name, justify="left" if name in ("Group", "Type") else "right")
    for i in st.slowest_instances:
        table.add_row(
            i.group,
            i.coll_type,
            i.key,
            "–" if i.step is None else str(i.step),
            str(i.ranks),
            "–" if i.last_rank is None else str(i.last_rank),
            ms(i.arrival_skew_ns),
            ms(i.transfer_ns),
        )
    return table


def _group_type_delays(report: Report) -> Text:
    st = report.stragglers
    assert st is not None
    text = Text(
        "where the delay happened (group, type: instances, median arrival skew, delay caused):\n"
    )
    # groups whose order of arrival the schedule sets come after the ones that count
    for g in sorted(st.by_group_type, key=lambda g: g.by_schedule)[:6]:
        top = f", mostly rank {g.top_rank}" if g.top_rank is not None else ""
        if g.by_schedule:
            top += " (lateness by schedule: not counted against the rank)"
        text.append(
            f"  group {g.group} {g.coll_type}: {g.instances}, {ms(g.arrival_skew_ns)} ms, "
            f"{ms(g.delay_caused_ns)} ms{top}\n"
        )
    return text


def _share_pct(share: float | None) -> float | None:
    return None if share is None else 100 * share


MAX_HEAT_ROWS = 48
MAX_CLOCK_ROWS = 16
MAX_HEAT_STEPS = 40


def _heat_map(report: Report, width: int = 160) -> Text:
    """Ranks × steps, shaded by the root delay of each rank in each step (what it caused
    itself, metrics.md §6): a bad rank shows as a row, a bad host as a stripe, and the ranks
    that only waited for it stay pale. Large runs show hosts (their worst rank)."""
    st = report.stragglers
    assert st is not None
    heat = st.root_delay_by_rank()
    every = sorted({s for row in heat.values() for s in row})
    peak = max((d for row in heat.values() for d in row.values()), default=0)
    if not every or peak == 0:
        return Text("root delay per step: none\n")
    by_host = len(report.ranks) > MAX_HEAT_ROWS
    hosts = {r.rank: r.host or Path(r.path).name for r in report.ranks}
    rows = sorted(st.root_delay_by_host(hosts).items(), key=lambda kv: -sum(kv[1].values()))
    label = max(4, *(len(h) for h, _ in rows[:MAX_HEAT_ROWS])) if by_host and rows else 4
    # as many steps as fit the width (a wrapped row reads as two ranks)
    room = (width - 3 - label) // (_cell_width(every) + 1)
    steps = every[: max(1, min(MAX_HEAT_STEPS, room))]
    shown = (
        ""
        if len(steps) == len(every)
        else f"; steps {steps[0]}\u2013{steps[-1]}, the first {len(steps)} of {len(every)}"
    )
    if not by_host:
        text = Text(
            "root delay per step (what the rank caused itself; darker = more), ranks grouped "
            f"by host{shown}:\n"
        )
        text.append(f"  step {_step_labels(steps)}\n")
        host: str | None = None
        for r in sorted(report.ranks, key=lambda r: (natural_key(r.host or ""), r.rank)):
            if r.host and r.host != host:
                host = r.host
                text.append(f"  {host}\n", style="dim")
            cells = _cells(heat.get(r.rank, {}), steps, peak)
            text.append(f"  {str(r.rank).rjust(4)} {cells}\n")
    else:
        text = Text(
            f"root delay per step by host (its worst rank; {min(len(rows), MAX_HEAT_ROWS)} of "
            f"the {len(rows)} hosts that caused any, most delay first{shown}):\n"
        )
        text.append(f"  {'step'.ljust(label)} {_step_labels(steps)}\n")
        for host_name, row in rows[:MAX_HEAT_ROWS]:
            text.append(f"  {host_name.ljust(label)} {_cells(row, steps, peak)}\n")
    return text.append(f"  █ = {ms(peak)} ms\n")


def _cell_width(steps: list[int]) -> int:
    """Every step number whole (1204 is not "204"): the cells are as wide as the longest."""
    return max(3, *(len(str(s)) for s in steps))


def _step_labels(steps: list[int]) -> str:
    width = _cell_width(steps)
    return " ".join(str(s).rjust(width) for s in steps)


def _cells(row: dict[int, int], steps: list[int], peak: int) -> str:
    width = _cell_width(steps)
    return " ".join(_SHADES[min(4, round(4 * row.get(s, 0) / peak))] * width for s in steps)


def _cross_rank(report: Report) -> Text:
    cr = report.cross_rank
    assert cr is not None
    text = Text("Collectives across ranks\n", style="bold")
    keys: list[str] = sorted(set(cr.keyed_by.values())) or ["–"]
    text.append(
        f"  {cr.matched} of {cr.instances} instances matched on every member rank "
        f"(keyed by {' / '.join(keys)})"
    )
    if cr.point_to_point:
        text.append(
            f"; {cr.point_to_point} send/recv kernels: {cr.p2p_paired} pairs found by peer"
            + (f", {cr.p2p_unpaired} without their other side" if cr.p2p_unpaired else "")
        )
    text.append("\n")
    if cr.unsynchronized:
        text.append(
            f"  {cr.unsynchronized} matched instances are no rendezvous (a member's kernel ended "
            "before the last member arrived): left out of the straggler figures\n",
            style="yellow",
        )
    for m in cr.mismatches:
        missing = f", missing on ranks {compact_ranges(m.missing_ranks)}" if m.missing_ranks else ""
        sizes = ", message sizes differ" if m.sizes_disagree else ""
        text.append(
            f"  group {m.group}: {m.unmatched} unmatched, first at {m.first_instance}"
            f"{missing}{sizes}\n",
            style="yellow",
        )
    clocks = cr.clocks.hosts
    if len(clocks) > 1:
        text.append(f"  clock offsets against rank {cr.clocks.reference_rank}'s host:\n")
        shown = sorted(clocks, key=lambda c: -abs(c.offset_ns or 0))[:MAX_CLOCK_ROWS]
        if len(clocks) > MAX_CLOCK_ROWS:
            text.append(f"    ({MAX_CLOCK_ROWS} largest of {len(clocks)} hosts; all in JSON)\n")
        for c in sorted(shown, key=lambda c: min(c.ranks)):
            if c.offset_ns is None:
                text.append(f"    {c.host}: unknown (no collective shared with the reference)\n")
            else:
                text.append(
                    f"    {c.host} (ranks {compact_ranges(c.ranks)}): {c.offset_ns / 1e6:+,.3f} ms "
                    f"± {(c.error_ns or 0) / 1e3:,.1f} µs over {c.instances} instance ends\n"
                )
    elif not cr.clocks.aligned:
        text.append("  clock alignment off (--no-clock-align)\n")
    return text


def _notes(report: Report) -> Text:
    text = Text("Notes\n", style="bold")
    everyone = len(report.ranks)
    for note in report.notes:
        who = "all ranks" if len(note.ranks) == everyone else f"ranks {compact_ranges(note.ranks)}"
        text.append(f"  {who}: {note.text}\n")
    return text


def _missing_table(report: Report) -> Table:
    table = FitTable(title="Missing ranks", title_justify="left", title_style="bold yellow")
    table.add_column("Rank", justify="right")
    table.add_column("File")
    table.add_column("Why")
    for m in report.missing_ranks:
        table.add_row("?" if m.rank is None else str(m.rank), m.path or "–", m.reason)
    return table


def _bandwidth_table(report: Report) -> Table:
    bw = report.bandwidth
    assert bw is not None
    caption = (
        "GB/s, medians over matched instances; busbw excludes waiting, the last column keeps it"
    )
    if bw.without_size:
        caption += f"\n{bw.without_size} instance(s) without a message size in the trace"
    table = FitTable(
        title="Bandwidth per collective (metrics.md §7)", caption=caption, title_justify="left"
    )
    columns = ["Type", "Size", "Instances", "Median bytes", "algbw", "busbw", "busbw incl. wait"]
    if bw.link_gbps is not None:
        columns.append(f"< {bw.link_gbps:g} Gbit/s")
    for name in columns:
        table.add_column(name, justify="left" if name in ("Type", "Size") else "right")
    for r in bw.rows:
        cells = [
            r.coll_type,
            r.size_bucket,
            str(r.instances),
            f"{r.bytes_median:,}",
            f"{r.algbw_gbps:.1f}",
            f"{r.busbw_gbps:.1f}",
            f"{r.busbw_incl_wait_gbps:.1f}",
        ]
        if bw.link_gbps is not None:
            cells.append(pct(r.below_link_pct) + " %")
        table.add_row(*cells)
    return table


def _hta_table(report: Report) -> Table:
    versions = sorted({f.hta_version for f in report.hta_compat or ()}) or ["(no rank)"]
    table = FitTable(
        title=f"HTA-compatible figures (--compat: HolisticTraceAnalysis {', '.join(versions)}'s "
        "definitions)",
        caption="µs; overlap % = comm time overlapped by compute, HTA's kernel-name rules",
        title_justify="left",
    )
    for name in ("Rank", "Overlap %", "Idle", "Compute", "Non-compute", "Kernel time"):
        table.add_column(name, justify="right")
    for f in report.hta_compat or ():
        table.add_row(
            str(f.rank),
            "–" if f.comm_comp_overlap_pct is None else f"{f.comm_comp_overlap_pct:.2f}",
            f"{f.idle_us:,}",
            f"{f.compute_us:,}",
            f"{f.non_compute_us:,}",
            f"{f.kernel_time_us:,}",
        )
    return table


def render_crosscheck(check: Crosscheck, view: View) -> bytes:
    """``tracecomm crosscheck``: tracecomm's --compat figures beside HTA's own, per rank."""
    check = map_strings(check, visible)
    table = FitTable(
        title=f"tracecomm --compat {check.mode} against HTA {check.version} run live on "
        f"{check.run}",
        caption="µs; overlap in %; agreement to the printed precision",
        title_justify="left",
    )
    for name in ("Rank", "Figure", "tracecomm", "HTA", "Difference", ""):
        table.add_column(name, justify="left" if name in ("Figure", "") else "right")
    for r in check.rows:
        diff = (
            "–"
            if r.tracecomm is None or r.hta is None
            else f"{r.tracecomm - r.hta:+.2f}"
            if r.figure == "comm_comp_overlap_pct"
            else f"{r.tracecomm - r.hta:+,.0f}"
        )
        table.add_row(
            str(r.rank),
            r.figure,
            _hta_number(r.tracecomm, r.figure),
            _hta_number(r.hta, r.figure),
            diff,
            "✓" if r.agrees else "✗",
            style=None if r.agrees else "bold red",
        )
    return rich_bytes([table], view, 120)


def _hta_number(value: float | None, figure: str) -> str:
    if value is None:
        return "–"
    return f"{value:.2f}" if figure == "comm_comp_overlap_pct" else f"{value:,.0f}"
