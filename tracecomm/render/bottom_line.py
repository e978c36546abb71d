"""The first screen: who the run is, its step time, MFU next to busy %, and what costs the most
with what to try (the Report's findings, metrics.md §14). At most 25 lines at 100 columns;
``--brief`` prints only this."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from tracecomm.analysis.finding import Finding, StepParts
from tracecomm.analysis.report import Report
from tracecomm.analysis.throughput import Throughput
from tracecomm.text import compact_ranges, duration

SHOWN = 5  # findings on the first screen; the Findings section below has the rest


def bottom_line(report: Report) -> Group:
    lines: list[RenderableType] = [_identity(report), _step_line(report), _time_line(report)]
    found = report.findings
    lines.append(Text(""))
    parts = report.step_parts
    if not found and parts is None:
        lines.append(Text("No finding: no step and no analysis window to cost one against"))
    elif not found:
        of = "the step" if parts is None or parts.per_step else parts.basis
        lines.append(Text(f"Nothing costs 2 % of {of} or more: no finding (metrics.md §14)"))
    else:
        per = "per step" if parts is None or parts.per_step else f"over {parts.basis}"
        head = Text(f"What costs the most, {per}", style="bold")
        lines.append(head.append(" (metrics.md §14)", style="not bold"))
        for i, finding in enumerate(found[:SHOWN], 1):
            lines += _finding_lines(i, finding, report)
        if len(found) > SHOWN:
            lines.append(Text(f"  … {len(found) - SHOWN} more in Findings below", style="dim"))
    return Group(*lines)


def findings_section(report: Report) -> Group | None:
    """What the bottom line did not print: each shown finding's further evidence and advice,
    then the findings past the first screen whole; every line once, wrapped under its label."""
    parts: list[RenderableType] = []
    for i, finding in enumerate(report.findings, 1):
        skip = 1 if i <= SHOWN else 0
        evidence, advice = finding.evidence[skip:], finding.advice[skip:]
        if not evidence and not advice:
            continue
        parts += [_head(i, finding, report), _details(evidence, advice)]
    if not parts:
        return None
    title = "Findings: the rest of the evidence and advice (metrics.md §14)"
    return Group(Text(title, "bold"), *parts)


def _identity(report: Report) -> Text:
    s = report.summary
    world = f" of {s.world_size}" if s.world_size is not None else ""
    hosts = {r.host for r in report.ranks if r.host}
    devices = sorted({d for r in report.ranks for d in r.devices})
    parts = [f"{s.ranks_analyzed} rank{'s' if s.ranks_analyzed != 1 else ''}{world}"]
    if hosts:
        parts.append(f"{len(hosts)} host{'s' if len(hosts) != 1 else ''}")
    if devices:
        parts.append(devices[0] + (f" (+{len(devices) - 1})" if len(devices) > 1 else ""))
    elif "gpu" in s.timelines:
        parts.append("device unknown (the trace names none)")
    if s.timelines != ("gpu",):
        parts.append(f"{'/'.join(s.timelines).upper()} timeline")
    parts.append(_steps(s.steps))
    text = Text(f"tracecomm {report.tool.version}", style="bold")
    text.append(" · " + " · ".join(parts))
    if report.frameworks is not None:
        fw = report.frameworks
        text.append(f"\nframework: {fw.describe()}", style="not bold")
        if fw.inference:
            text.append(" · a serving engine: no training advice", style="not bold")
    if report.partial:
        text.append("\npartial result: some rank is missing or was cut short", style="bold yellow")
    return text


def _steps(steps: Sequence[int]) -> str:
    if not steps:
        return "no ProfilerStep: the whole trace"
    if len(steps) == 1:
        return f"step {steps[0]}"
    return f"steps {steps[0]}–{steps[-1]} ({len(steps)})"


def _step_range(steps: Sequence[int]) -> str:
    return f"steps {steps[0]}–{steps[-1]}" if len(steps) > 1 else f"step {steps[0]}"


def _step_line(report: Report) -> Text:
    th = report.throughput
    text = Text()
    if th is not None and th.step_time_ns:
        text.append("step time ", style="bold")
        text.append(duration(th.step_time_ns), style="bold")
        text.append(f" (the slowest rank's ProfilerStep, median of {_step_range(th.steps)})")
        if th.tokens_per_s is not None:
            text.append(f" · {th.tokens_per_s:,.0f} tokens/s")
    else:
        text.append("step time –: the traces hold no ProfilerStep span (metrics.md §8)")
    return text


def _no_mfu_reason(th: Throughput | None) -> str:
    """What MFU waits for, short: the Throughput panel and the warnings say it whole."""
    if th is None or th.flops is None:
        return "needs --model-flops-per-step or --model-config"
    return "the model's FLOPs are known; the device's peak is not: --peak-tflops"


def _time_line(report: Report) -> Text:
    """Busy next to MFU, then where the rest of the step goes: the same per-step shares the
    findings are costed from (StepParts), so every figure on the screen agrees."""
    th, parts = report.throughput, report.step_parts
    text = Text()
    # a CPU timeline (gloo, no device work) is busy with CPU ops: no GPU to speak of
    busy = "CPU busy" if report.summary.timelines == ("cpu",) else "GPU busy"
    text.append(f"{busy} {parts.busy_pct:.1f} %" if parts is not None else f"{busy} –")
    text.append(" (a dashboard's figure) · " if busy == "GPU busy" else " (CPU ops) · ")
    if th is not None and th.mfu is not None and th.mfu_possible is False:
        text.append("MFU –", style="bold")
        text.append(f" (impossible: {100 * th.mfu:,.1f} %; see finding 1)")
    elif th is not None and th.mfu is not None:
        text.append(f"MFU {100 * th.mfu:.1f} %", style="bold")
    else:
        text.append("MFU –", style="bold")
        text.append(f" ({_no_mfu_reason(th)})")
    if parts is None:
        return text
    of = "per step" if parts.per_step else f"of {parts.basis}"
    text.append(f"\n{of}: exposed comm {parts.exposed_comm_pct:.1f} %")
    by_type = sorted(parts.exposed_comm_by_type_pct.items(), key=lambda kv: (-kv[1], kv[0]))
    if by_type:  # two types fit on the line at 100 columns; the Findings name them all
        shown = ", ".join(f"{t} {p:.1f}" for t, p in by_type[:2])
        text.append(f" ({shown}{', …' if len(by_type) > 2 else ''})")
    text.append(f" · memory {parts.exposed_memory_pct:.1f} % · idle {parts.idle_pct:.1f} %")
    return text


def _finding_lines(i: int, f: Finding, report: Report) -> list[RenderableType]:
    """The first screen's lines of one finding: its head, its first why and first thing to
    try, whole (wrapped, never cut: the numbers in them are the evidence)."""
    return [_head(i, f, report), _details(f.evidence[:1], f.advice[:1])]


def _details(evidence: Sequence[str], advice: Sequence[str]) -> Table:
    grid = Table.grid(padding=(0, 1))
    grid.add_column(style="dim", no_wrap=True)
    grid.add_column(overflow="fold")
    for e in evidence:
        grid.add_row("    why:", e)
    for a in advice:
        grid.add_row("    try:", a)
    return grid


def _head(i: int, f: Finding, report: Report) -> Text:
    head = Text(f" {i}. ", style="bold")
    head.append(f.title, style="bold red" if f.severity == "input" else "bold")
    cost = _cost(f, report.step_parts)
    if cost:
        head.append(f" — {cost}")
    where = _where(f, report)
    if where:
        head.append(f" — {where}", style="dim")
    return head


def _cost(f: Finding, parts: StepParts | None) -> str:
    if f.cost_ns is None:
        return "cost unknown from the traces" if f.severity == "uncosted" else ""
    per = "per step" if parts is None or parts.per_step else f"of {parts.basis}"
    text = f"{duration(f.cost_ns)} {per} ({f.cost_pct:.1f} %)"
    if f.recoverable_pct is not None and round(f.recoverable_pct, 1) != round(f.cost_pct or 0, 1):
        text += f", {f.recoverable_pct:.1f} % of the step back by a fix"
    return text


def _where(f: Finding, report: Report) -> str:
    everyone = {r.rank for r in report.ranks}
    parts = []
    if f.ranks:
        if set(f.ranks) == everyone and len(everyone) > 1:
            parts.append("all ranks")
        elif len(f.ranks) > 6:
            listed = compact_ranges(f.ranks[:3])
            parts.append(f"{len(f.ranks)} ranks ({listed}, …, {f.ranks[-1]})")
        else:
            parts.append(f"rank{'s' if len(f.ranks) > 1 else ''} {compact_ranges(f.ranks)}")
    if f.stage is not None:
        parts.append(f"stage {f.stage}")
    if f.group:
        parts.append(f"group {f.group}")
    if f.hosts:
        parts.append(", ".join(f.hosts[:3]))
    return " · ".join(parts)
