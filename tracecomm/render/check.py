"""The CI gate's verdicts as a terminal table, JSON, GitHub workflow commands, JUnit XML and
Markdown. Values only change units here; the verdicts come from tracecomm.check.verdicts."""

from __future__ import annotations

import io
import xml.etree.ElementTree as ET
from typing import Any

import orjson
from rich.console import Console

from tracecomm.check.verdicts import CheckResult, FigureCheck
from tracecomm.render import View
from tracecomm.render.fit import FitTable
from tracecomm.text import json_safe, map_strings, markdown_safe, visible, xml_safe

CHECK_SCHEMA_VERSION = 1
_MARK = {"regressed": "✗ regressed", "pass": "✓ pass", "improved": "✓ improved"}


def value(v: float | None, unit: str) -> str:
    if v is None:
        return "–"
    if unit == "ns":
        return f"{v / 1e6:.3f} ms"
    if unit == "pct":
        return f"{v:.1f} %"
    return f"{v:.4f}"


def delta(f: FigureCheck) -> str:
    if f.delta is None:
        return "–"
    sign = "+" if f.delta >= 0 else "−"
    text = sign + value(abs(f.delta), f.unit).replace(" %", " pt")
    return text + (f" ({100 * f.change:+.1f} %)" if f.change is not None else "")


def budget(f: FigureCheck) -> str:
    b = f.budget
    parts = []
    if b.max_change is not None:
        word = "+" if f.unit == "ns" else "−"
        parts.append(f"{word}{100 * b.max_change:g} % (floor {value(b.noise_floor, f.unit)})")
    if b.limit is not None:
        parts.append(("≤ " if f.unit == "ns" else "≥ ") + value(b.limit, f.unit))
    return ", ".join(parts) or "–"


def verdict(f: FigureCheck) -> str:
    return _MARK.get(f.verdict, f.verdict)


def render_terminal(result: CheckResult, view: View) -> bytes:
    result = map_strings(result, visible)  # a baseline's path or a type name came from a file
    out = io.StringIO()
    console = Console(
        file=out,
        width=view.width or 120,
        force_terminal=view.color,
        highlight=False,
        markup=False,
    )
    table = FitTable(
        title=f"tracecomm check: {'PASS' if result.passed else 'REGRESSION'} "
        f"(baseline {result.baseline})",
        caption=f"medians over steps, then over the {len(result.shared_ranks)} shared ranks "
        "(straggler delay: the worst rank); step_time: the run's step time as analyze prints "
        "it (metrics.md §8); step_window: each rank's median step window",
        title_justify="left",
    )
    for name in ("Figure", "Baseline", "Current", "Δ", "Budget", "Verdict"):
        table.add_column(name, justify="left" if name in ("Figure", "Verdict") else "right")
    for f in result.figures:
        style = "bold red" if f.verdict == "regressed" else None
        table.add_row(
            f.figure,
            value(f.baseline, f.unit),
            value(f.current, f.unit),
            delta(f),
            budget(f),
            verdict(f),
            style=style,
        )
    console.print(table)
    for f in result.regressed:
        console.print(f"regressed: {f.figure}: {f.reason}", style="red")
    for note in result.notes:
        console.print(f"note: {note}", style="yellow")
    return out.getvalue().encode()


def check_document(result: CheckResult) -> dict[str, Any]:
    return {
        "kind": "tracecomm-check",
        "schema_version": CHECK_SCHEMA_VERSION,
        "passed": result.passed,
        "baseline": result.baseline,
        "current": result.current,
        "shared_ranks": list(result.shared_ranks),
        "notes": list(result.notes),
        "regressed": [f.figure for f in result.regressed],
        "figures": [
            {
                "figure": f.figure,
                "unit": f.unit,
                "baseline": f.baseline,
                "current": f.current,
                "delta": f.delta,
                "change": f.change,
                "budget": {
                    "max_change": f.budget.max_change,
                    "noise_floor": f.budget.noise_floor,
                    "limit": f.budget.limit,
                },
                "verdict": f.verdict,
                "reason": f.reason,
            }
            for f in result.figures
        ],
    }


def render_json(result: CheckResult, view: View) -> bytes:
    return json_safe(orjson.dumps(check_document(result), option=orjson.OPT_INDENT_2) + b"\n")


def render_markdown(result: CheckResult, view: View) -> bytes:
    head = (
        "### ✅ tracecomm check passed"
        if result.passed
        else "### ❌ tracecomm check: "
        + ", ".join(f"{_code(f.figure)} regressed" for f in result.regressed)
    )
    lines = [
        head,
        "",
        f"Baseline {_code(result.baseline)}; medians over steps, then over "
        f"{len(result.shared_ranks)} shared ranks; `step_time` is the run's step time as "
        "analyze prints it (metrics.md §8), `step_window` each rank's median step window.",
        "",
        "| figure | baseline | current | Δ | budget | verdict |",
        "|---|---:|---:|---:|---:|---|",
    ]
    lines += [
        f"| {_code(f.figure)} | {value(f.baseline, f.unit)} | {value(f.current, f.unit)} | "
        f"{delta(f)} | {budget(f)} | {_bold(verdict(f), f.verdict == 'regressed')} |"
        for f in result.figures
    ]
    lines += [""] + [
        f"- {markdown_safe(f.figure)}: {markdown_safe(f.reason)}" for f in result.regressed
    ]
    lines += [f"- note: {markdown_safe(n)}" for n in result.notes]
    return ("\n".join(lines).rstrip() + "\n").encode()


def _code(text: str) -> str:
    """A code span that no name can close, nor break the table it stands in."""
    return "`" + visible(text).replace("`", "'").replace("|", "\\|") + "`"


def _bold(text: str, bold: bool) -> str:
    return f"**{text}**" if bold else text


def render_github(result: CheckResult, view: View) -> bytes:
    """Workflow commands: one ::error per regressed figure, ::warning per note, one ::notice."""
    out = []
    for f in result.regressed:
        message = (
            f"{f.figure} regressed: {f.reason} "
            f"(baseline {value(f.baseline, f.unit)}, current {value(f.current, f.unit)})"
        )
        out.append(f"::error title={_prop('tracecomm check: ' + f.figure)}::{_data(message)}")
    out += [f"::warning title=tracecomm check::{_data(n)}" for n in result.notes]
    if result.passed:
        out.append(
            f"::notice title=tracecomm check::{_data('no regression against ' + result.baseline)}"
        )
    return ("\n".join(out) + "\n").encode()


def _data(text: str) -> str:
    """Escape a workflow command's message (GitHub's toolkit: %, CR, LF), control characters
    made visible first."""
    return visible(text).replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _prop(text: str) -> str:
    """Escape a workflow command's property value: also ':' and ','."""
    return _data(text).replace(":", "%3A").replace(",", "%2C")


def render_junit(result: CheckResult, view: View) -> bytes:
    result = map_strings(result, xml_safe)
    suite = ET.Element(
        "testsuite",
        name="tracecomm check",
        tests=str(len(result.figures)),
        failures=str(len(result.regressed)),
        skipped=str(sum(f.verdict == "not comparable" for f in result.figures)),
        errors="0",
    )
    for f in result.figures:
        case = ET.SubElement(suite, "testcase", classname="tracecomm.check", name=f.figure)
        detail = (
            f"baseline {value(f.baseline, f.unit)}, current {value(f.current, f.unit)}, "
            f"change {delta(f)}, budget {budget(f)}"
        )
        if f.verdict == "regressed":
            ET.SubElement(case, "failure", message=f.reason, type="regression").text = detail
        elif f.verdict == "not comparable":
            ET.SubElement(case, "skipped", message=f.reason)
        else:
            ET.SubElement(case, "system-out").text = detail
    if result.notes:
        ET.SubElement(suite, "system-out").text = "\n".join(result.notes)
    root = ET.Element("testsuites", name="tracecomm")
    root.append(suite)
    ET.indent(root)
    text = '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode")
    return (text + "\n").encode()
