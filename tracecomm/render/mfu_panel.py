"""The "dashboard vs MFU" panel: busy % beside MFU and where the difference went.

Kept to 80 columns: one headline block, then per group of ranks a stacked bar and its legend.
"""

from __future__ import annotations

import textwrap

from rich.text import Text

from tracecomm.analysis.throughput import GapShares, Throughput
from tracecomm.text import compact_ranges, duration, pct

BAR_WIDTH = 50
# (share, glyph, label, style), in bar order
_SEGMENTS = (
    ("mfu_pct", "█", "MFU", "bold green"),
    ("compute_below_peak_pct", "▓", "compute below peak", "green"),
    ("exposed_comm_pct", "▒", "exposed comm", "red"),
    ("exposed_memory_pct", "░", "exposed memory", "yellow"),
    ("idle_pct", "·", "idle", "dim"),
)


def mfu_panel(th: Throughput, group_label: str) -> Text:
    text = Text()
    text.append("Dashboard vs MFU", style="bold")
    text.append(f" ({th.dtype} dense peak; shares of the ranks' analysis windows)\n")
    text.append(_step_line(th))
    if th.flops is not None:
        text.append(f"\nFLOPs per step {th.flops.per_step:.4g}\n  from {th.flops.source}")
    if th.mfu is not None:
        text.append("\nMFU ")
        if th.mfu_possible is False:
            text.append("– ", style="bold")
            text.append(
                f"(impossible: the FLOPs given make it {100 * th.mfu:,.2f} % of "
                f"{th.device_count} × {_peaks(th)}; check the FLOPs input)",
                style="red",
            )
        else:
            text.append(f"{100 * th.mfu:.2f} %", style="bold")
            text.append(f" of {th.device_count} × {_peaks(th)}")
        if th.achieved_tflops_per_device is not None and th.mfu_possible is not False:
            text.append(f" · {th.achieved_tflops_per_device:.1f} TFLOP/s per device")
        if th.hfu is not None:
            text.append(f"\nHFU {100 * th.hfu:.2f} % with full activation recompute")
    if th.assumed_ranks:
        text.append(
            f"\n{th.assumed_ranks} rank(s) without a trace assumed to run the same device",
            style="yellow",
        )
    if th.observed is not None:
        text.append(_observed(th))
    if th.energy is not None:
        text.append(_energy(th))
    for gap in th.gaps:
        text.append("\n\n")
        text.append(_bar(gap, group_label if len(th.gaps) == 1 else None))
    if th.missing:
        text.append("\n" + textwrap.fill(th.missing, 80), style="yellow")
    return text


def _observed(th: Throughput) -> str:
    o = th.observed
    assert o is not None
    line = (
        f"\nobserved from recorded shapes (a lower bound): {o.tflops_while_running:,.1f} "
        f"TFLOP/s\n  while those kernels ran, {o.coverage_pct:.0f} % of compute time covered"
    )
    if o.hfu_lower_bound is not None:
        line += f"\n  HFU ≥ {100 * o.hfu_lower_bound:.2f} % ({o.ranks} ranks with shapes)"
    if o.attention_causal_unknown_flops:
        line += "\n  some attention counted as a full square: the trace does not say causal"
    return line


def _energy(th: Throughput) -> str:
    e = th.energy
    assert e is not None
    line = (
        f"\nenergy {e.energy_per_step_j:,.1f} J per step ({e.gpus} GPUs)"
        f" · {e.avg_power_w:,.0f} W per GPU"
    )
    if e.tokens_per_j is not None:
        line += f" · {e.tokens_per_j:,.2f} tokens/J"
    line += (
        f"\n  of it idle {_share(e.idle_pct)} %, exposed comm {_share(e.exposed_comm_pct)} %, "
        f"exposed memory {_share(e.exposed_memory_pct)} %"
    )
    return line + (f"\n  {e.missing}" if e.missing else "")


def _share(value: float | None) -> str:
    return pct(value if value is not None else 0.0)


def _step_line(th: Throughput) -> str:
    line = f"step time {duration(th.step_time_ns)} median over steps {_steps(th.steps)}"
    line += f", worst {duration(th.worst_step_ns)} (step {th.worst_step})"
    if th.tokens_per_s is not None:
        line += f"\n{th.tokens_per_s:,.0f} tokens/s"
    return line


def _bar(gap: GapShares, label: str | None) -> Text:
    text = Text()
    who = label or f"ranks {_ranks(gap.ranks)}"
    text.append(f"{who}: busy {gap.busy_pct:.1f} %")
    if gap.mfu_pct is not None:
        text.append(f" · MFU {gap.mfu_pct:.1f} %")
    text.append("\n")
    shares = [(getattr(gap, f) or 0.0, g, n, s) for f, g, n, s in _SEGMENTS]
    # MFU can only be drawn out of compute time (a warning says when it claims more)
    drawn = [min(share, gap.compute_pct) if n == "MFU" else share for share, _, n, _ in shares]
    cells = _cells(drawn)
    for (_, glyph, _, style), n in zip(shares, cells, strict=True):
        text.append(glyph * n, style=style)
    for share, glyph, name, style in shares:
        if name == "MFU" and gap.mfu_pct is None:
            continue
        text.append(f"\n  {glyph} ", style=style)
        text.append(f"{name} {share:.1f} %")
        if name == "exposed comm" and gap.exposed_comm_by_type_pct:
            parts = ", ".join(f"{t} {p:.1f}" for t, p in gap.exposed_comm_by_type_pct.items())
            text.append(f" ({parts})")
    return text


def _cells(shares: list[float]) -> list[int]:
    """Bar cells per segment: largest remainders, so they always fill the bar exactly."""
    total = sum(shares) or 1.0
    exact = [BAR_WIDTH * s / total for s in shares]
    cells = [int(e) for e in exact]
    for i in sorted(range(len(exact)), key=lambda i: exact[i] - cells[i], reverse=True):
        if sum(cells) >= BAR_WIDTH:
            break
        cells[i] += 1
    return cells


def _peaks(th: Throughput) -> str:
    parts = []
    for d in th.devices:
        if d.peak is not None:
            mark = " (inferred)" if d.peak.inferred else ""
            parts.append(f"{d.peak.tflops:g} TFLOP/s {d.peak.model}{mark}")
    return ", ".join(parts)


def _steps(steps: tuple[int, ...]) -> str:
    return f"{steps[0]}–{steps[-1]}" if len(steps) > 1 else str(steps[0])


def _ranks(ranks: tuple[int, ...]) -> str:
    return compact_ranges(ranks)
