"""The process pool that parses ranks side by side, sized from the input before any heavy
import, so the workers start (and import) while the main process is still loading its own
modules and discovering files."""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

from tracecomm.ingest.discover import json_size

# Below this much input a pool costs more (interpreter + polars start) than it saves.
POOL_MIN_BYTES = 64 * 2**20


def jobs_for(paths: Sequence[str | Path], requested: int | None) -> int:
    if requested is not None:
        return max(1, min(requested, len(paths)))
    # a remote file's size is not worth a round trip here: count it as worth a process
    total = sum(json_size(p) if "://" not in str(p) else POOL_MIN_BYTES for p in paths)
    if total < POOL_MIN_BYTES or len(paths) < 2:
        return 1
    return max(1, min(os.cpu_count() or 1, len(paths)))


def new_pool(jobs: int) -> ProcessPoolExecutor:
    # spawn, not fork: forking a process whose polars thread pool is running can deadlock.
    return ProcessPoolExecutor(max_workers=jobs, mp_context=get_context("spawn"))


def start_pool(traces: Sequence[str], requested: int | None) -> ProcessPoolExecutor | None:
    """A warm pool for a run big enough to use one (None otherwise): its workers import the
    per-rank code while the main process loads its own."""
    try:
        jobs = jobs_for(traces, requested)
    except OSError:
        return None
    if jobs <= 1:
        return None
    pool = new_pool(jobs)
    for _ in range(jobs):
        pool.submit(warm)  # spawns the workers, which import the per-rank code
    return pool


def warm() -> None:
    """Runs in a fresh worker: imports the per-rank unit (defined here, not there, so that
    submitting it imports nothing heavy in the main process)."""
    import tracecomm.run.worker  # noqa: F401
