"""What a file's first bytes say it is, read before anything heavy loads: the CLI asks this of
every input before it starts its process pool, which forks only while polars is not loaded
(``run.pool.new_pool``). Importing the saved-document loader (the Report's types, the
analysis) would load polars and make the pool spawn fresh interpreters, later."""

from __future__ import annotations

import re
from pathlib import Path

_SNIFF_BYTES = 256
_KIND = re.compile(rb'^\{\s*"kind"\s*:\s*"(tracecomm-[a-z]+)"')
_SAVED = re.compile(rb'^\{\s*"schema_version"')


def saved_kind(path: Path) -> str | None:
    """What the first bytes of a file say it is: ``"analyze"`` for an analyze document
    (``{"schema_version"``), the kind of another tracecomm document (``tracecomm-baseline``,
    ``tracecomm-compare``, …), None for anything else (a Kineto trace starts
    ``{"schemaVersion"`` or with other keys)."""
    try:
        with path.open("rb") as handle:
            head = handle.read(_SNIFF_BYTES).lstrip()
    except OSError:
        return None
    other = _KIND.match(head)
    if other:
        return other.group(1).decode()
    return "analyze" if _SAVED.match(head) else None


def looks_saved(path: Path) -> bool:
    """A file to read with ``run.saved.load_saved_report`` rather than as a trace: an analyze
    document, or another tracecomm document (which the loader refuses, in one line)."""
    return saved_kind(path) is not None
