"""The terminal's "inside the step" section (metrics.md §15–§16): top kernels per class, short
kernels, launches and the ops that starve the GPU, graphs, the roofline. Display only."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from tracecomm.analysis.kernels import KernelView
from tracecomm.render.fit import FitTable
from tracecomm.text import ms, pct

ROWS_PER_CLASS = 5
STARVING_ROWS = 5
NAME_WIDTH = 64


def kernel_section(view: KernelView) -> RenderableType:
    parts: list[RenderableType] = [_top_kernels(view), _launch_lines(view)]
    if view.graphs is not None:
        parts.append(_graph_lines(view))
    if view.roofline:
        parts.append(_roofline(view))
    return Group(*parts)


def _us(ns: int | None) -> str:
    return "–" if ns is None else f"{ns / 1e3:,.1f}"


def _name(text: str) -> str:
    return text if len(text) <= NAME_WIDTH else text[: NAME_WIDTH - 1] + "…"


def _top_kernels(view: KernelView) -> Table:
    table = FitTable(
        title=f"Inside the step: top kernels per class (metrics.md §15; {view.ranks} rank(s), "
        f"{view.steps} rank-steps)",
        caption="per step = per rank and included step; share of the class's kernel time; "
        "median: of the ranks' medians, p95: the worst rank's",
        title_justify="left",
    )
    table.add_column("Class")
    table.add_column("Kernel", no_wrap=True, overflow="ellipsis", max_width=NAME_WIDTH)
    for name in ("Ranks", "Per step", "ms/step", "Share %", "Median µs", "p95 µs"):
        table.add_column(name, justify="right")
    for group in view.groups:
        label = group.coll_type if group.cls == "comm" and group.coll_type else group.cls
        for i, row in enumerate(group.top[:ROWS_PER_CLASS]):
            table.add_row(
                label if i == 0 else "",
                _name(row.name),
                str(row.ranks),
                f"{row.count_per_step:,.1f}",
                ms(round(row.ns_per_step)),
                pct(row.share_pct),
                _us(row.median_ns),
                _us(row.p95_ns),
            )
    return table


def _launch_lines(view: KernelView) -> Text:
    short, la = view.short, view.launches
    text = Text()
    text.append(
        f"short kernels (< {short.threshold_ns // 1000} µs): {short.kernels:,} of "
        f"{short.all_kernels:,} ({pct(short.share_of_kernels_pct)} %), "
        f"{pct(short.share_of_time_pct)} % of kernel time\n"
    )
    text.append(
        f"launches: {la.per_step_median:,} per step (median rank)"
        + (f", {la.graph_launches:,} graph launches" if la.graph_launches else "")
        + f"; CPU launch → GPU start: median {_us(la.delay_median_ns)} µs, "
        f"p95 {_us(la.delay_p95_ns)} µs (worst rank)\n"
    )
    if la.host_bound_ns:
        text.append(
            f"the GPU waited {ms(la.host_bound_ns)} ms for late launches (host-bound idle, "
            "all ranks); the ops that launched the work it waited for:\n"
        )
        for s in la.starving[:STARVING_ROWS]:
            text.append(
                f"  {s.op or '(no CPU op recorded)'}: {ms(s.starved_ns)} ms "
                f"({pct(s.share_of_host_bound_pct)} %, {s.gaps:,} gaps on {s.ranks} rank(s)), "
                f"then {_name(s.kernel)}\n"
            )
    return text


def _graph_lines(view: KernelView) -> Text:
    g = view.graphs
    assert g is not None
    text = Text("CUDA/HIP graphs (metrics.md §16): ", style="bold")
    text.append(
        f"{g.graph_launches:,} graph launches replayed {g.replayed:,} kernels "
        f"({ms(g.replayed_ns)} ms) on {g.ranks} rank(s)"
    )
    if g.by_method:
        text.append(
            "; tied to their launch by " + ", ".join(f"{m} ({n:,})" for m, n in g.by_method.items())
        )
    if g.unattributed:
        text.append(f"; {g.unattributed:,} with graph ids but no launch found", style="yellow")
    if g.captures:
        text.append(
            f"; {g.captures} capture(s): {g.captured_launches:,} launches during capture ran "
            "nothing"
        )
    return text.append("\n")


def _roofline(view: KernelView) -> Table:
    table = FitTable(
        title="Roofline of the recorded ops (metrics.md §15: achieved over their kernels' time "
        "against the device's peaks; bytes are the least the op must move)",
        title_justify="left",
    )
    for name in ("Op", "dtype", "Shapes", "Ranks", "TFLOP/s", "% peak", "GB/s", "% BW", "FLOP/B"):
        table.add_column(name, justify="left" if name in ("Op", "dtype", "Shapes") else "right")
    table.add_column("Bound")
    for r in view.roofline:
        table.add_row(
            r.op,
            r.dtype,
            _name(r.shapes),
            str(r.ranks),
            "–" if r.achieved_tflops is None else f"{r.achieved_tflops:,.1f}",
            pct(r.pct_of_peak_flops),
            "–" if r.achieved_gbps is None else f"{r.achieved_gbps:,.0f}",
            pct(r.pct_of_peak_bandwidth),
            f"{r.intensity:,.1f}",
            r.bound or (r.note or "–"),
        )
    return table
