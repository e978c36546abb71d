"""``tracecomm compare`` (metrics.md §18) in a terminal, as JSON (compare.schema.json), as
Markdown for a PR comment, and as an HTML page. Every figure comes from the ``Comparison``;
this module converts units and lays out. Labels are the inputs as given (paths): made safe by
each output's rules."""

from __future__ import annotations

import csv
import io
from collections.abc import Callable, Sequence
from dataclasses import asdict
from typing import Any

import msgspec
import orjson
from rich.console import Console
from rich.text import Text

from tracecomm._version import __version__
from tracecomm.analysis.compare import (
    Change,
    CollectiveChange,
    CollectiveFigures,
    ComparedRun,
    Comparison,
    Decomposition,
    KernelChange,
    PairComparison,
    TypicalStep,
)
from tracecomm.render import View
from tracecomm.render.fit import FitTable
from tracecomm.text import DASH, csv_safe, json_safe, map_strings, markdown_safe, visible

COMPARE_SCHEMA_VERSION = 2
MINUS = "−"
DEFAULT_ROWS = 8  # changed collectives listed per pair in the terminal and Markdown
CAUSE_NAMES = {
    "pipeline_fill": "pipeline fill",
    "pipeline_drain": "pipeline drain",
    "pipeline_wait": "pipeline wait",
    "sync": "after a synchronize",
    "dataloader": "data loader",
    "host_bound": "host-bound",
    "other": "other",
}


# --- JSON ------------------------------------------------------------------------------------


def compare_document(c: Comparison) -> dict[str, Any]:
    return {
        "kind": "tracecomm-compare",
        "schema_version": COMPARE_SCHEMA_VERSION,
        "tool": {"name": "tracecomm", "version": __version__},
        "scaling": c.scaling,
        "order": c.order,
        "compared_steps": None if c.compared_steps is None else list(c.compared_steps),
        "runs": [_run_document(r) for r in c.runs],
        "pairs": [_pair_document(p) for p in c.pairs],
        "projection": _plain(asdict(c.projection)),
        "notes": list(c.notes),
        "warnings": list(c.warnings),
        "partial": c.partial,
    }


def _run_document(r: ComparedRun) -> dict[str, Any]:
    doc = _plain(asdict(r))
    doc["typical_step"] = doc.pop("typical")
    return doc


def _pair_document(p: PairComparison) -> dict[str, Any]:
    doc = _plain(asdict(p))
    kernels = doc["kernels"]  # "class" is a Python keyword: the field is kernel_class
    kernels["changes"] = [
        {("class" if k == "kernel_class" else k): v for k, v in change.items()}
        for change in kernels["changes"]
    ]
    return doc


def _plain(value: Any) -> Any:
    if isinstance(value, msgspec.Struct):  # the Report's parts (a projected size)
        return _plain(msgspec.to_builtins(value))
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def render_json(c: Comparison, view: View) -> bytes:
    return json_safe(orjson.dumps(compare_document(c), option=orjson.OPT_INDENT_2) + b"\n")


def render_csv(c: Comparison, view: View) -> bytes:
    """``--table kernel-changes``: every changed kernel of every pair, largest change first
    (the JSON's ``pairs[].kernels.changes``), one row each; the whole name."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(
        [
            "baseline",
            "run",
            "name",
            "class",
            "status",
            "calls_baseline",
            "calls_run",
            "time_ns_baseline",
            "time_ns_run",
            "delta_ns",
            "exposed_ns_baseline",
            "exposed_ns_run",
            "delta_exposed_ns",
            "step_change_share_pct",
            "paired_by",
            "baseline_name",
        ]
    )
    for p in c.pairs:
        for k in p.kernels.changes:
            writer.writerow(
                [
                    csv_safe(c.runs[p.baseline].label),
                    csv_safe(c.runs[p.run].label),
                    csv_safe(k.name),
                    csv_safe(k.kernel_class),
                    k.status,
                    *("" if v is None else v for v in (*k.calls, *k.time_ns)),
                    k.delta_ns,
                    *(
                        "" if v is None else v
                        for v in (*k.exposed_ns, k.delta_exposed_ns, k.step_change_share_pct)
                    ),
                    k.paired_by or "",
                    csv_safe(k.baseline_name) if k.baseline_name else "",
                ]
            )
    return out.getvalue().encode()


# --- what the table shows, for the terminal and Markdown ----------------------------------------


def _ms(ns: float | None) -> str:
    return DASH if ns is None else f"{ns / 1e6:,.3f}"


def _signed_ms(ns: float | None) -> str:
    if ns is None:
        return DASH
    sign = "+" if ns > 0 else MINUS if ns < 0 else "±"
    return f"{sign}{abs(ns) / 1e6:,.3f}"


def _num(value: float | None, digits: int = 0) -> str:
    return DASH if value is None else f"{value:,.{digits}f}"


def _gbps(value: float | None) -> str:
    if value is None:
        return DASH
    return f"{value:,.1f}" if value >= 10 else f"{value:.3g}"


def _pct(value: float | None) -> str:
    return DASH if value is None else f"{value:.1f} %"


def _signed_pct(value: float | None) -> str:
    if value is None:
        return DASH
    return f"{'+' if value > 0 else MINUS if value < 0 else '±'}{abs(value):.1f} %"


def _share(ns: int, pct: float | None) -> str:
    return f"{_ms(ns)} · {pct:.1f} %" if pct is not None else _ms(ns)


def _change(change: Change | None, points: float | None, name: str | None = None) -> str:
    """Relative change in %; a share's change in percentage points (``points`` scales it); the
    difference itself where the first run's figure is (nearly) zero (``Change.relative``)."""
    if change is None:
        return ""
    if points is not None:
        d = change.delta * points
        return "±0 pt" if abs(d) < 0.05 else f"{'+' if d > 0 else MINUS}{abs(d):.1f} pt"
    if change.relative is None:  # the first run had none (or almost none) of it
        if not change.delta:
            return ""
        sign = "+" if change.delta > 0 else MINUS
        if name is not None and (name.endswith("_ns") or name.startswith(("exposed_", "idle."))):
            return f"{sign}{_ms(abs(change.delta))} ms"
        return f"{sign}{_num(abs(change.delta))}"
    r = 100 * change.relative
    return "±0 %" if abs(r) < 0.05 else f"{'+' if r > 0 else MINUS}{abs(r):.1f} %"


Row = tuple[str, Callable[[ComparedRun], str], str | None, float | None]


def _rows(c: Comparison) -> list[Row]:
    """(label, value of a run, the change's name, points scale for shares) per table row."""
    types = sorted({t for r in c.runs if r.typical for t in r.typical.exposed_comm_by_type_ns})
    causes = [
        cause
        for cause in CAUSE_NAMES
        if any(r.typical and (r.typical.idle_by_cause_ns or {}).get(cause) for r in c.runs)
    ]

    def typical(fn: Callable[[TypicalStep], str]) -> Callable[[ComparedRun], str]:
        return lambda r: fn(r.typical) if r.typical is not None else DASH

    rows: list[Row] = [
        (
            "World size",
            lambda r: f"{r.world_size:,}" + ("" if r.world_size_known else "?"),
            None,
            None,
        ),
        ("Ranks analyzed", lambda r: f"{r.ranks_analyzed:,}", None, None),
        ("Step time ms (§8)", lambda r: _ms(r.step_time_ns), "step_time_ns", None),
        ("Tokens/s", lambda r: _num(r.tokens_per_s), "tokens_per_s", None),
        ("Tokens/s per GPU", lambda r: _num(r.tokens_per_s_per_gpu), "tokens_per_s_per_gpu", None),
        (
            "Scaling efficiency",
            lambda r: (
                _pct(100 * r.scaling_efficiency) if r.scaling_efficiency is not None else DASH
            ),
            None,
            None,
        ),
        ("MFU", lambda r: _pct(100 * r.mfu) if r.mfu is not None else DASH, "mfu", 100.0),
        (
            "Typical step ms",
            typical(lambda t: _ms(t.window_ns)),
            "typical_step_ns",
            None,
        ),
        ("  busy", typical(lambda t: _pct(t.busy_pct)), "busy_pct", 1.0),
        ("  compute", typical(lambda t: _share(t.compute_ns, t.compute_pct)), "compute_ns", None),
        (
            "  exposed comm",
            typical(lambda t: _share(t.exposed_comm_ns, t.exposed_comm_pct)),
            "exposed_comm_ns",
            None,
        ),
    ]
    for t in types:
        rows.append(
            (
                f"    {t}",
                typical(_exposed_of(t)),
                f"exposed_comm.{t}",
                None,
            )
        )
    rows += [
        (
            "  exposed memory",
            typical(lambda t: _share(t.exposed_memory_ns, t.exposed_memory_pct)),
            "exposed_memory_ns",
            None,
        ),
        ("  idle", typical(lambda t: _share(t.idle_ns, t.idle_pct)), "idle_ns", None),
    ]
    for cause in causes:
        rows.append(
            (
                f"    {CAUSE_NAMES[cause]}",
                typical(_idle_of(cause)),
                f"idle.{cause}",
                None,
            )
        )
    rows += [
        (
            "Straggler recoverable",
            lambda r: _pct(r.straggler_recoverable_pct),
            "straggler_recoverable_pct",
            1.0,
        ),
        ("Avg power per GPU W", lambda r: _num(r.avg_power_w, 1), "avg_power_w", None),
        ("Energy per step J", lambda r: _num(r.energy_per_step_j, 1), "energy_per_step_j", None),
        ("Tokens per J", lambda r: _num(r.tokens_per_j, 3), "tokens_per_j", None),
    ]
    return rows


def _exposed_of(coll: str) -> Callable[[TypicalStep], str]:
    return lambda t: _share(
        t.exposed_comm_by_type_ns.get(coll, 0), t.exposed_comm_by_type_pct.get(coll, 0.0)
    )


def _idle_of(cause: str) -> Callable[[TypicalStep], str]:
    return lambda t: _share(
        (t.idle_by_cause_ns or {}).get(cause, 0), (t.idle_by_cause_pct or {}).get(cause, 0.0)
    )


def _delta_exposed_of(coll: str) -> Callable[[Decomposition], float | None]:
    return lambda d: d.delta_exposed_comm_by_type_ns.get(coll, 0)


def _delta_idle_of(cause: str) -> Callable[[Decomposition], float | None]:
    return lambda d: (d.delta_idle_by_cause_ns or {}).get(cause, 0)


def _cells(c: Comparison, row: Row) -> list[str]:
    _, value, name, points = row
    out = []
    for i, r in enumerate(c.runs):
        out.append(value(r))
        if i:
            out.append(_change(r.changes.get(name), points, name) if name else "")
    return out


def _typical_note(r: ComparedRun) -> str:
    t = r.typical
    if t is None:
        return f"{r.label}: no step window"
    where = f"step {t.step}" if t.step is not None else "its analysis window"
    return f"{r.label}: rank {t.rank}, {where}"


def _decomposition_rows(c: Comparison) -> list[tuple[str, list[str]]]:
    types = sorted(
        {
            t
            for p in c.pairs
            if p.decomposition
            for t in p.decomposition.delta_exposed_comm_by_type_ns
        }
    )
    causes = [
        cause
        for cause in CAUSE_NAMES
        if any(
            p.decomposition and (p.decomposition.delta_idle_by_cause_ns or {}).get(cause)
            for p in c.pairs
        )
    ]

    def col(fn: Callable[[Any], float | None]) -> list[str]:
        return [_signed_ms(fn(p.decomposition)) if p.decomposition else DASH for p in c.pairs]

    rows = [
        ("Δ typical step", col(lambda d: d.delta_step_ns)),
        ("  Δ compute", col(lambda d: d.delta_compute_ns)),
        ("  Δ exposed comm", col(lambda d: d.delta_exposed_comm_ns)),
    ]
    rows += [(f"    {t}", col(_delta_exposed_of(t))) for t in types]
    if any(p.decomposition and p.decomposition.delta_types_overlap_ns for p in c.pairs):
        rows.append(
            ("    less: types at once", col(lambda d: -d.delta_types_overlap_ns)),
        )
    rows += [
        ("  Δ exposed memory", col(lambda d: d.delta_exposed_memory_ns)),
        ("  Δ idle", col(lambda d: d.delta_idle_ns)),
    ]
    rows += [
        (
            f"    {CAUSE_NAMES[cause]}",
            col(_delta_idle_of(cause)),
        )
        for cause in causes
    ]
    rows += [
        ("Δ step time (§8)", [_signed_ms(p.delta_step_time_ns) for p in c.pairs]),
        ("  not in the partition", [_signed_ms(p.unpartitioned_ns) for p in c.pairs]),
    ]
    return rows


def _pair_name(c: Comparison, p: PairComparison) -> str:
    return f"{c.runs[p.run].label} − {c.runs[p.baseline].label}"


def _side(f: CollectiveFigures | None, fn: Callable[[CollectiveFigures], str]) -> str:
    return DASH if f is None else fn(f)


def _collective_cells(row: CollectiveChange) -> list[str]:
    def pair(fn: Callable[[CollectiveFigures], str]) -> str:
        return f"{_side(row.base, fn)} → {_side(row.run, fn)}"

    return [
        row.coll_type,
        row.group,
        row.size_bucket,
        row.status,
        pair(lambda f: f"{f.calls_per_step:,.1f}"),
        pair(lambda f: _ms(f.time_per_step_ns)),
        _signed_ms(row.delta_time_per_step_ns),
        pair(lambda f: _ms(f.transfer_per_step_ns)),
        pair(lambda f: _ms(f.wait_per_step_ns)),
        pair(lambda f: _gbps(f.busbw_gbps)),
    ]


KERNEL_ROWS = 10  # kernel changes shown per pair (--changes: as many as collectives)
KERNEL_NAME_CHARS = 72  # a longer name is cut (JSON and --table kernel-changes keep it whole)
_KERNEL_HEAD = (
    "Kernel",
    "Class",
    "Status",
    "Calls/step",
    "Time/step ms",
    "Δ ms",
    "Δ exposed ms",
    "of Δ step",
)
FAMILY_MARK = " †"  # paired with a name that differs in template arguments (KernelChange)
FAMILY_NOTE = (
    "†: paired with a name that differs only in template arguments, parameters or a "
    "launch-bounds suffix (the first run's name: --table kernel-changes)"
)


def _short_name(name: str) -> str:
    return name if len(name) <= KERNEL_NAME_CHARS else name[: KERNEL_NAME_CHARS - 1] + "…"


def _kernel_cells(k: KernelChange) -> list[str]:
    def pair(values: tuple[float | None, float | None], fn: Callable[[float], str]) -> str:
        return " → ".join(DASH if v is None else fn(v) for v in values)

    return [
        _short_name(k.name),
        k.kernel_class,
        k.status + (FAMILY_MARK if k.paired_by == "family" else ""),
        pair(k.calls, lambda v: f"{v:,.1f}"),
        pair(k.time_ns, _ms),
        _signed_ms(k.delta_ns),
        DASH if k.delta_exposed_ns is None else _signed_ms(k.delta_exposed_ns),
        _signed_pct(k.step_change_share_pct),
    ]


def _kernel_caption(p: PairComparison) -> str:
    k = p.kernels
    parts = ["per step of each run's median rank; time: the calls' durations summed"]
    if k.step_change_ns is not None:
        step = f"Δ step {_signed_ms(k.step_change_ns)} ms"
        if k.delta_not_kernels_ns is not None:
            step += f", {_signed_ms(k.delta_not_kernels_ns)} ms of it in no kernel (idle)"
        parts.append(step)
    parts.append("exposed: not hidden behind a kernel of a higher class (metrics.md §3)")
    if any(c.paired_by == "family" for c in k.changes):
        parts.append(FAMILY_NOTE)
    if k.note:
        parts.append(k.note)
    parts.append("all of them: --table kernel-changes")
    return "; ".join(parts)


_COLLECTIVE_HEAD = (
    "Collective",
    "Group",
    "Size",
    "Status",
    "Calls/step",
    "Time/step ms",
    "Δ ms",
    "Transfer/step ms",
    "Wait/step ms",
    "busbw GB/s",
)
_PROJECTION_HEAD = (
    "GPUs",
    "Run",
    "Typical step ms projected",
    "measured",
    "error",
    "Exposed comm ms projected",
    "measured",
    "error",
    "Throughput × projected",
    "measured",
    "error",
)


def _projection_rows(c: Comparison) -> list[list[str]]:
    return [
        [
            f"{row.world_size:,}",
            c.runs[row.run].label,
            _ms(row.projected_step_ns),
            _ms(row.measured_step_ns),
            _signed_pct(row.step_error_pct),
            _ms(row.projected_exposed_comm_ns),
            _ms(row.measured_exposed_comm_ns),
            _signed_pct(row.exposed_comm_error_pct),
            f"{row.projected_relative_throughput:.3f}",
            _num(row.measured_relative_throughput, 3),
            _signed_pct(row.throughput_error_pct),
        ]
        for row in c.projection.rows
    ]


def _title(c: Comparison) -> str:
    order = "by world size" if c.order == "world size" else "in the order given"
    return (
        f"tracecomm compare: {len(c.runs)} runs, {c.scaling} scaling, {order}; changes "
        f"against {c.runs[0].label} (metrics.md §18)"
    )


# --- terminal --------------------------------------------------------------------------------


def render_terminal(c: Comparison, view: View) -> bytes:
    c = map_strings(c, visible)
    out = io.StringIO()
    console = Console(
        file=out,
        width=view.width or 160,
        force_terminal=view.color,
        no_color=view.color is False,
        highlight=False,
        markup=False,
    )
    rows_shown = view.top or DEFAULT_ROWS
    table = FitTable(title=_title(c), title_justify="left")
    table.add_column("Figure")
    for i, r in enumerate(c.runs):
        table.add_column(r.label, justify="right")
        if i:
            table.add_column("Δ", justify="right")
    for row in _rows(c):
        table.add_row(row[0], *_cells(c, row))
    console.print(table)
    console.print(
        "typical step (metrics.md §18): " + "; ".join(_typical_note(r) for r in c.runs),
        style="dim",
    )
    console.print()
    where = FitTable(
        title="Where the time went: the typical step's difference, part by part (ms)",
        title_justify="left",
        caption="the parts add up to Δ typical step exactly; Δ step time is §8's",
    )
    where.add_column("Part")
    for p in c.pairs:
        where.add_column(_pair_name(c, p), justify="right")
    for label, cells in _decomposition_rows(c):
        where.add_row(label, *cells)
    console.print(where)
    for p in c.pairs:
        console.print()
        level = "type, group, size" if p.collectives.level == "instance" else "type"
        diff = FitTable(
            title=f"Largest changes by collective ({level}): {_pair_name(c, p)}",
            title_justify="left",
            caption="per step and member rank; time: kernel time (waiting included); "
            "transfer: moving data (§6)",
        )
        for i, name in enumerate(_COLLECTIVE_HEAD):
            diff.add_column(name, justify="left" if i < 4 else "right")
        shown = p.collectives.rows[:rows_shown]
        for change in shown:
            diff.add_row(*_collective_cells(change))
        if shown:
            console.print(diff)
        else:
            console.print(f"{_pair_name(c, p)}: no collective in either run")
        if p.collectives.note:
            console.print(f"note: {p.collectives.note}", style="yellow")
        _kernels_terminal(c, p, view.top or KERNEL_ROWS, console)
    console.print()
    _projection_terminal(c, console)
    for note in c.notes:
        console.print(f"note: {note}", style="yellow")
    return out.getvalue().encode()


def _kernels_terminal(c: Comparison, p: PairComparison, shown: int, console: Console) -> None:
    if p.kernels.missing:
        console.print(f"by kernel: {p.kernels.missing}", style="dim")
        return
    changes = p.kernels.changes
    if not changes:
        console.print(f"{_pair_name(c, p)}: no kernel changed")
        return
    table = FitTable(
        title=f"Largest changes by kernel: {_pair_name(c, p)} "
        f"({min(shown, len(changes))} of {len(changes)})",
        title_justify="left",
        caption=_kernel_caption(p),
    )
    for i, name in enumerate(_KERNEL_HEAD):
        table.add_column(name, justify="left" if i < 3 else "right")
    for k in changes[:shown]:
        table.add_row(*_kernel_cells(k))
    console.print()
    console.print(table)


def _projection_terminal(c: Comparison, console: Console) -> None:
    p = c.projection
    if not p.rows:
        console.print(Text(f"Projection against measurement: none ({p.missing})", style="yellow"))
        return
    table = FitTable(
        title=f"Projection against measurement: {c.runs[0].label} projected ({p.scaling} "
        "scaling, metrics.md §11) to the other runs' world sizes",
        title_justify="left",
        caption="step and exposed comm: the typical step; throughput: against the first run",
    )
    for name in _PROJECTION_HEAD:
        table.add_column(name, justify="left" if name == "Run" else "right")
    for cells in _projection_rows(c):
        table.add_row(*cells)
    console.print(table)
    if p.note:
        console.print(f"note: {p.note}", style="yellow")


# --- Markdown (a PR comment) -----------------------------------------------------------------


def _md_table(head: Sequence[str], rows: Sequence[Sequence[str]], left: int = 1) -> list[str]:
    def cell(text: str) -> str:
        return markdown_safe(text.strip()) if text.strip() else " "

    lines = [
        "| " + " | ".join(cell(h) for h in head) + " |",
        "|" + "|".join("---" if i < left else "---:" for i in range(len(head))) + "|",
    ]
    lines += ["| " + " | ".join(cell(x) for x in row) + " |" for row in rows]
    return lines


def _md_label(label: str) -> str:
    """Markdown keeps no leading spaces: a sub-row is marked instead."""
    depth = (len(label) - len(label.lstrip())) // 2
    return "↳ " * depth + label.strip()


def render_markdown(c: Comparison, view: View) -> bytes:
    rows_shown = view.top or DEFAULT_ROWS
    head = ["Figure"]
    for i, r in enumerate(c.runs):
        head += [r.label] + (["Δ"] if i else [])
    lines = [f"### {markdown_safe(_title(c))}", ""]
    lines += _md_table(head, [[_md_label(row[0]), *_cells(c, row)] for row in _rows(c)])
    lines += ["", "Typical step: " + markdown_safe("; ".join(_typical_note(r) for r in c.runs)), ""]
    lines += ["#### Where the time went (ms)", ""]
    lines += _md_table(
        ["Part", *(_pair_name(c, p) for p in c.pairs)],
        [[_md_label(label), *cells] for label, cells in _decomposition_rows(c)],
    )
    lines += ["", "The parts add up to Δ typical step exactly; Δ step time is metrics.md §8's.", ""]
    for p in c.pairs:
        level = "type, group, size" if p.collectives.level == "instance" else "type"
        lines += [
            f"#### Largest changes by collective ({level}): {markdown_safe(_pair_name(c, p))}",
            "",
        ]
        shown = p.collectives.rows[:rows_shown]
        if shown:
            lines += _md_table(_COLLECTIVE_HEAD, [_collective_cells(r) for r in shown], left=4)
        else:
            lines.append("No collective in either run.")
        if p.collectives.note:
            lines += ["", f"Note: {markdown_safe(p.collectives.note)}"]
        if p.kernels.missing:
            lines += ["", f"By kernel: {markdown_safe(p.kernels.missing)}"]
        elif p.kernels.changes:
            changes = p.kernels.changes
            shown_k = changes[: view.top or KERNEL_ROWS]
            lines += [
                "",
                f"#### Largest changes by kernel: {markdown_safe(_pair_name(c, p))} "
                f"({len(shown_k)} of {len(changes)})",
                "",
            ]
            lines += _md_table(_KERNEL_HEAD, [_kernel_cells(k) for k in shown_k], left=3)
            lines += ["", markdown_safe(_kernel_caption(p))]
        else:
            lines += ["", "No kernel changed."]
        lines.append("")
    if c.projection.rows:
        lines += ["#### Projection against measurement (metrics.md §11)", ""]
        lines += _md_table(_PROJECTION_HEAD, _projection_rows(c))
        lines.append("")
    else:
        lines += [
            f"Projection against measurement: none ({markdown_safe(c.projection.missing or '')})",
            "",
        ]
    lines += [f"- note: {markdown_safe(n)}" for n in c.notes]
    return ("\n".join(lines).rstrip() + "\n").encode()


# --- HTML ------------------------------------------------------------------------------------


def render_html(c: Comparison, view: View) -> bytes:
    from tracecomm.render.html import render_page

    return render_page(compare_document(c), "compare.js", _page_title(c)).encode()


def _page_title(c: Comparison) -> str:
    return f"tracecomm compare: {len(c.runs)} runs"
