"""The published JSON Schemas of tracecomm's documents.

report.schema.json (``analyze --format json``) and nccl.schema.json (``nccl --format json``)
are generated from the types the analysis builds (``analysis.report.Report``,
``nccl.diagnose.NcclDocument``): after a change there, ``python -m tracecomm.schema`` writes
them again, and a test fails while a file is stale. The
other schemas here (baseline, check, compare) are written by hand.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

FOLDER = Path(__file__).resolve().parent
_DRAFT = "https://json-schema.org/draft/2020-12/schema"


def generated() -> dict[str, str]:
    """File name -> the text it should hold."""
    import msgspec

    from tracecomm.analysis.report import Report
    from tracecomm.doc import NCCL_SCHEMA_VERSION, SCHEMA_VERSION
    from tracecomm.nccl.diagnose import NcclDocument

    report = {
        "$schema": _DRAFT,
        "$id": f"https://tracecomm.invalid/schema/report-{SCHEMA_VERSION}.json",
        "title": "tracecomm analyze report",
        **msgspec.json.schema(Report),
    }
    nccl = {
        "$schema": _DRAFT,
        "$id": f"https://tracecomm.invalid/schema/nccl-{NCCL_SCHEMA_VERSION}.json",
        "title": "tracecomm nccl --format json",
        **msgspec.json.schema(NcclDocument),
    }
    return {"report.schema.json": _text(report), "nccl.schema.json": _text(nccl)}


def stale(folder: Path = FOLDER) -> list[str]:
    """The generated schema files whose text in ``folder`` is not what the types say."""
    out = []
    for name, text in generated().items():
        path = folder / name
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            out.append(name)
    return out


def write(folder: Path = FOLDER) -> list[str]:
    """Write the generated schema files that changed; their names."""
    changed = stale(folder)
    texts = generated()
    for name in changed:
        (folder / name).write_text(texts[name], encoding="utf-8")
    return changed


def _text(schema: dict[str, Any]) -> str:
    return json.dumps(_one_line(schema), indent=2, ensure_ascii=False) + "\n"


def _one_line(value: Any) -> Any:
    """Descriptions as one line each (a docstring wraps; the schema's readers need not)."""
    if isinstance(value, dict):
        return {
            k: " ".join(v.split()) if k == "description" and isinstance(v, str) else _one_line(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_one_line(v) for v in value]
    return value
