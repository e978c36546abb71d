"""What a run's inputs hold: trace files, or the summaries ``tracecomm ingest`` wrote. Done once
per run, with the standard library only, so that the CLI can size its process pool from it
before the heavy imports (and a cluster executor can do it where the files are)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tracecomm.errors import NoUsableInput, UsageError
from tracecomm.run.sources import find_sources, local_path, normalized

SUFFIX = ".tcsum.parquet"  # a per-rank summary (run.summaries)


@dataclass(frozen=True)
class Discovery:
    inputs: tuple[str, ...]  # as given, with file:// URLs turned into paths
    traces: tuple[str, ...]
    summaries: tuple[str, ...]  # ``tracecomm ingest`` output instead of traces


def discover(inputs: Sequence[str]) -> Discovery:
    """Raises ``UsageError`` (a missing path, traces and summaries mixed) or ``NoUsableInput``
    (nothing to analyze)."""
    given = tuple(normalized(i) for i in inputs)  # file:// folders hold settings and logs too
    summaries = tuple(find_summaries([i for i in given if local_path(i) is not None]))
    traces = () if summaries else tuple(find_sources(given))
    if summaries and any(not _holds_summaries(i) for i in given):
        raise UsageError(
            "mixing ingested summaries (*.tcsum.parquet) and traces in one analysis: pass "
            "either the folders `tracecomm ingest` wrote, or trace folders"
        )
    if not summaries and not traces:
        raise NoUsableInput(
            f"{', '.join(given)}: no trace files (*.json, *.json.gz, Nsight Systems *.sqlite / "
            "*.nsys-rep) found"
        )
    return Discovery(given, traces, summaries)


def _holds_summaries(item: str) -> bool:
    return local_path(item) is not None and bool(find_summaries([item]))


def find_summaries(folders: Sequence[str]) -> list[str]:
    """Summary files under the given folders (hidden and temporary files left out)."""
    found: list[str] = []
    for folder in map(Path, folders):
        if folder.is_file() and folder.name.endswith(SUFFIX):
            found.append(str(folder))
        elif folder.is_dir():
            found.extend(
                str(p)
                for p in sorted(folder.rglob(f"*{SUFFIX}"))
                if not any(part.startswith(".") for part in p.relative_to(folder).parts)
            )
    return found
