"""The scaling projection in the terminal (metrics.md §11): fits, then one row per world size."""

from __future__ import annotations

from rich.console import Group
from rich.text import Text

from tracecomm.analysis.projection import Projection
from tracecomm.render.fit import FitTable


def projection_section(projection: Projection) -> Group | Text:
    if projection.reason is not None or projection.sizes is None or projection.fits is None:
        return Text(f"Scaling projection: none ({projection.reason})", style="yellow")
    types = sorted({t for size in projection.sizes for t in size.exposed_comm_ns})
    table = FitTable(
        title=(
            f"Scaling projection, {projection.scaling} scaling (an estimate): rank "
            f"{projection.rank}'s step {projection.step} replayed at each world size"
        ),
        title_justify="left",
        caption="first row: the measured size, replayed with the fitted network (a check)",
    )
    for name in ("GPUs", "Projected step ms", "Throughput ×", "MFU %", "Exposed comm ms"):
        table.add_column(name, justify="right")
    for t in types:
        table.add_column(f"{t} exposed", justify="right")
    for size in projection.sizes:
        mark = " ◀ peak" if size.world_size == projection.turning_point else ""
        table.add_row(
            f"{size.world_size:,}",
            f"{size.step_ns / 1e6:,.2f}",
            f"{size.relative_throughput:.2f}{mark}",
            "–" if size.mfu is None else f"{100 * size.mfu:.1f}",
            f"{size.exposed_comm_total_ns / 1e6:,.2f}",
            *(f"{size.exposed_comm_ns.get(t, 0) / 1e6:,.2f}" for t in types),
        )
    fits = Text("fitted network: t = alpha·hops(n) + bytes·f(n)/B\n")
    for f in projection.fits:
        b = "–" if f.bus_gbps is None else f"{f.bus_gbps:,.1f} GB/s"
        fits.append(
            f"  {f.coll_type}: alpha {f.alpha_ns / 1e3:,.3f} µs per hop, B {b}, "
            f"{f.instances} instances, {f.sizes} size(s), fit error {f.fit_error_pct:.2f} %\n"
        )
    verdict = (
        Text(
            f"throughput peaks at {projection.turning_point:,} GPUs: beyond it, adding GPUs makes "
            "this job slower (its collectives no longer hide behind the shrinking compute)",
            style="bold yellow",
        )
        if projection.turning_point is not None
        else Text("no turning point in the projected range: throughput still grows")
    )
    notes = Text("assumptions:\n" + "\n".join(f"  · {a}" for a in projection.assumptions or ()))
    for note in projection.notes or ():
        notes.append(f"\n  note: {note}")
    return Group(table, fits, verdict, notes)
