"""Format name -> renderer, per kind of result. Every renderer is ``(result, view) -> bytes``.

A renderer's module is imported when it renders, not before: a command pays only for the view
it prints (the gate's, the HTML page's and the comparison's modules stay off analyze's path).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from tracecomm.render import View

Renderer = Callable[[Any, View], bytes]
# the tables ``analyze -f csv --table`` writes (render.formats.render_csv)
CSV_TABLES = ("ranks", "steps", "types", "stragglers", "instances", "kernels")


def _lazy(module: str, name: str) -> Renderer:
    def render(result: Any, view: View) -> bytes:
        renderer: Renderer = getattr(importlib.import_module(f"tracecomm.render.{module}"), name)
        return renderer(result, view)

    render.__name__ = render.__qualname__ = name
    return render


REPORT: dict[str, Renderer] = {
    "terminal": _lazy("terminal", "render_terminal"),
    "json": _lazy("formats", "render_json"),
    "csv": _lazy("formats", "render_csv"),
    "html": _lazy("html", "render_report"),
}
PROJECTION: dict[str, Renderer] = {
    "terminal": _lazy("terminal", "render_projection"),
    "json": _lazy("formats", "render_json"),
}
CHECK: dict[str, Renderer] = {
    "terminal": _lazy("check", "render_terminal"),
    "json": _lazy("check", "render_json"),
    "github": _lazy("check", "render_github"),
    "junit": _lazy("check", "render_junit"),
    "markdown": _lazy("check", "render_markdown"),
}
NCCL: dict[str, Renderer] = {
    "terminal": _lazy("terminal", "render_nccl"),
    "json": _lazy("formats", "render_nccl_json"),
}
CROSSCHECK: dict[str, Renderer] = {"terminal": _lazy("terminal", "render_crosscheck")}
EXPORT: dict[str, Renderer] = {"chrome": _lazy("export", "render_trace")}  # Trace Event Format
COMPARE: dict[str, Renderer] = {
    "terminal": _lazy("compare", "render_terminal"),
    "json": _lazy("compare", "render_json"),
    "markdown": _lazy("compare", "render_markdown"),
    "html": _lazy("compare", "render_html"),
    "csv": _lazy("compare", "render_csv"),
}
