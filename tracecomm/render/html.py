"""The report document as one self-contained HTML file.

The page is the JSON document itself (``--format json --detail timeline``), embedded as a data
block, plus a small script that draws SVG from it; nothing is fetched, so it opens offline
from a file:// URL. Trace text (kernel names, paths, hosts) only ever reaches the page as JSON
string data and is put on screen with ``textContent``: it cannot become markup. A Content
Security Policy allows only this page's own script (by its hash) and no network at all.
"""

from __future__ import annotations

import base64
import hashlib
from importlib import resources
from typing import Any

import orjson

from tracecomm.analysis.report import Report, report_document
from tracecomm.render import View

# Inside a <script> data block only "</" (and "<!--") can end or confuse the element: JSON
# allows "\u003c" for "<", so no trace text can close it. U+2028/2029 are escaped for old
# parsers that treat them as line ends.
_JSON_ESCAPES = {
    ord("<"): "\\u003c",
    ord(">"): "\\u003e",
    ord("&"): "\\u0026",
    0x2028: "\\u2028",
    0x2029: "\\u2029",
}


def render_report(report: Report, view: View, trace_file: str | None = None) -> bytes:
    """The HTML report: the document of ``analyze --format json --detail timeline``;
    ``trace_file``: the exported trace written beside the page, which it links to."""
    return render_html(report_document(report), trace_file).encode()


def render_html(document: dict[str, Any], trace_file: str | None = None) -> str:
    """One HTML page holding ``document`` and the code that draws it."""
    extra = {"tracecomm-trace": trace_file} if trace_file else {}
    return render_page(document, "report.js", _title(document), extra)


def render_page(
    document: dict[str, Any], script_name: str, title: str, extra: dict[str, Any] | None = None
) -> str:
    """One HTML page holding ``document`` and the script (an asset) that draws it; the
    compare page (``render.compare``) is drawn by its own script in the same shell."""
    script = _asset("dom.js") + _asset(script_name)  # the shared builders, then the page
    style = _asset("report.css")
    digest = base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()
    policy = (
        "default-src 'none'; img-src data:; style-src 'unsafe-inline'; "
        f"script-src 'sha256-{digest}'; base-uri 'none'; form-action 'none'"
    )
    return (
        "<!doctype html>\n"
        '<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f'<meta http-equiv="Content-Security-Policy" content="{policy}">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{_text(title)}</title>\n"
        f"<style>\n{style}</style>\n</head>\n<body>\n"
        '<main id="report"><noscript>This report draws its charts with JavaScript.</noscript>'
        "</main>\n"
        f'<script type="application/json" id="tracecomm-data">{embed_json(document)}</script>\n'
        + "".join(
            f'<script type="application/json" id="{name}">{embed_json(value)}</script>\n'
            for name, value in (extra or {}).items()
        )
        + f"<script>{script}</script>\n</body>\n</html>\n"
    )


def embed_json(document: dict[str, Any]) -> str:
    """The document as JSON text that is safe inside a ``<script>`` data block."""
    return orjson.dumps(document).decode().translate(_JSON_ESCAPES)


def _title(document: dict[str, Any]) -> str:
    summary = document.get("summary") or {}
    ranks = summary.get("ranks_analyzed")
    return f"tracecomm report: {ranks} ranks" if ranks is not None else "tracecomm report"


def _text(value: str) -> str:
    return value.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _asset(name: str) -> str:
    return (resources.files("tracecomm.render") / "assets" / name).read_text(encoding="utf-8")
