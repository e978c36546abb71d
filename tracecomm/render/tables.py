"""Format name -> renderer, per kind of result. Every renderer is ``(result, view) -> bytes``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tracecomm.render import View, check, export, formats, html, terminal

Renderer = Callable[[Any, View], bytes]

REPORT: dict[str, Renderer] = {
    "terminal": terminal.render_terminal,
    "json": formats.render_json,
    "csv": formats.render_csv,
    "html": html.render_report,
}
PROJECTION: dict[str, Renderer] = {
    "terminal": terminal.render_projection,
    "json": formats.render_json,
}
CHECK: dict[str, Renderer] = {
    "terminal": check.render_terminal,
    "json": check.render_json,
    "github": check.render_github,
    "junit": check.render_junit,
    "markdown": check.render_markdown,
}
NCCL: dict[str, Renderer] = {
    "terminal": terminal.render_nccl,
    "json": formats.render_nccl_json,
}
CROSSCHECK: dict[str, Renderer] = {"terminal": terminal.render_crosscheck}
EXPORT: dict[str, Renderer] = {"chrome": export.render_trace}  # Trace Event Format (Perfetto)


def _compare(name: str) -> Renderer:
    """Imported when a comparison is rendered: analysis.compare is off analyze's path."""

    def render(result: Any, view: View) -> bytes:
        from tracecomm.render import compare

        renderer: Renderer = getattr(compare, name)
        return renderer(result, view)

    return render


COMPARE: dict[str, Renderer] = {
    "terminal": _compare("render_terminal"),
    "json": _compare("render_json"),
    "markdown": _compare("render_markdown"),
    "html": _compare("render_html"),
}
