"""The all-to-all section of the terminal report (metrics.md §7a): how much of it hides behind
compute, wait against transfer per rank, and the token imbalance. It formats the Report's
``all_to_all`` view; it computes nothing."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from tracecomm.analysis.alltoall import AllToAllView
from tracecomm.render.fit import FitTable
from tracecomm.text import ms, pct

MAX_ROWS = 8
_USE = {"expert": "expert parallel", "embedding": "embedding exchange"}


def all_to_all_section(view: AllToAllView) -> RenderableType:
    head = Text("All-to-all", style="bold")
    what = [_USE[view.use]] if view.use in _USE else []
    what += list(view.libraries)
    if what:
        head.append(f" ({' · '.join(what)})")
    head.append(
        f": {ms(view.comm_ns)} ms over all ranks, {pct(view.hidden_pct)} % of it hidden behind "
        f"compute, {ms(view.exposed_ns)} ms exposed"
    )
    lines: list[RenderableType] = [head]
    if view.wait_ns is not None and view.transfer_ns is not None:
        lines.append(
            Text(
                f"matched instances: {ms(view.wait_ns)} ms waiting for the group's last member, "
                f"{ms(view.transfer_ns)} ms transfer (metrics.md §6)"
            )
        )
    elif view.wait_reason:
        lines.append(Text(f"wait vs transfer: – ({view.wait_reason})"))
    lines.append(_imbalance_line(view))
    if len(view.ranks) > 1:
        lines.append(_rank_table(view))
    return Group(*lines)


def _imbalance_line(view: AllToAllView) -> Text:
    imb = view.imbalance
    if imb is None:
        return Text(f"token imbalance: – ({view.imbalance_reason})")
    text = Text(
        f"token imbalance: rank {imb.busiest_rank} receives {imb.ratio:.2f}× the median rank's "
        f"{imb.unit} ({imb.busiest_received:,} vs {imb.median_received:,.0f} over "
        f"{imb.instances} instances; {imb.worst_instance_ratio:.2f}× in the most uneven)"
    )
    if imb.gain_ns is not None:
        text.append(
            f"; balancing it gives back {ms(imb.gain_ns)} ms per step ({pct(imb.gain_pct)} %, "
            "the straggler replay)"
        )
    elif imb.gain_reason:
        text.append(f"; what balancing gives back: – ({imb.gain_reason})")
    return text


def _rank_table(view: AllToAllView) -> Table:
    rows = sorted(view.ranks, key=lambda r: (-(r.wait_ns or 0), -r.exposed_ns, r.rank))
    table = FitTable(
        title=f"All-to-all per rank (ms over the window; {min(len(rows), MAX_ROWS)} of "
        f"{len(rows)}, most waiting first)",
        title_justify="left",
    )
    for name in ("Rank", "Kernels", "Time", "Exposed", "Hidden %", "Wait", "Transfer", "Received"):
        table.add_column(name, justify="right")
    for r in rows[:MAX_ROWS]:
        table.add_row(
            str(r.rank),
            f"{r.kernels:,}",
            ms(r.comm_ns),
            ms(r.exposed_ns),
            pct(r.hidden_pct),
            ms(r.wait_ns),
            ms(r.transfer_ns),
            f"{r.received:,}" if r.received is not None else "–",
        )
    return table
