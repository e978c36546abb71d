"""The process pool that parses ranks side by side, sized from the input before any heavy
import, so the workers start (and import) while the main process is still loading its own
modules and discovering files."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

from tracecomm.ingest.discover import json_size

# Below this much input a pool costs more (interpreter + polars start) than it saves.
POOL_MIN_BYTES = 64 * 2**20
# polars' allocator (jemalloc) keeps freed pages for 10 s by default, and a run is shorter:
# the peak RSS counted every page a step ever freed. Handing them back after 0.1 s costs no
# measurable time and takes a 2 GB trace from 1.0 to 0.85 GiB (BENCHMARKS.md).
JEMALLOC_CONF = "_RJEM_MALLOC_CONF"  # read once, when polars' library first allocates
RETURN_FREED_PAGES = "dirty_decay_ms:100,muzzy_decay_ms:0"


def jobs_for(paths: Sequence[str | Path], requested: int | None) -> int:
    if requested is not None:
        return max(1, min(requested, len(paths)))
    # a remote file's size is not worth a round trip here: count it as worth a process
    total = sum(json_size(p) if "://" not in str(p) else POOL_MIN_BYTES for p in paths)
    if total < POOL_MIN_BYTES or len(paths) < 2:
        return 1
    return max(1, min(os.cpu_count() or 1, len(paths)))


def threads_for(paths: Sequence[str | Path], requested: int | None, jobs: int | None = None) -> int:
    """Ranks parsed side by side in this process, for a run too small for a pool: polars and
    inflation release the GIL, so two threads take 0.31 s where one takes 0.41 s over
    8 x 1 MB ranks (BENCHMARKS.md). ``--jobs 1`` keeps one; a pool run needs none. ``jobs``:
    ``jobs_for(paths, requested)`` when the caller has it (it reads every file's size)."""
    if requested is not None or len(paths) < 2:
        return 1
    try:
        if (jobs if jobs is not None else jobs_for(paths, None)) > 1:
            return 1
    except OSError:
        return 1
    return max(1, min(os.cpu_count() or 1, len(paths)))


def new_pool(jobs: int) -> ProcessPoolExecutor:
    # Forking a process whose polars thread pool runs can deadlock: fork only while this
    # process has not loaded polars (the CLI starts its pool first), else spawn. A forked
    # worker skips the interpreter's start and the imports already made.
    method = "spawn" if "polars" in sys.modules or sys.platform != "linux" else "fork"
    return ProcessPoolExecutor(
        max_workers=jobs,
        mp_context=get_context(method),
        initializer=polars_threads,
        initargs=(max(1, (os.cpu_count() or 1) // jobs),),
    )


def polars_threads(threads: int) -> None:
    """Before a worker imports polars: its share of the cores (measured, BENCHMARKS.md: one
    thread per worker when the workers fill the cores, faster than the default of one per
    core, whose threads the workers' per-rank frames are too small to keep busy). A
    ``POLARS_MAX_THREADS`` the user set is kept."""
    os.environ.setdefault("POLARS_MAX_THREADS", str(threads))


def start_pool(traces: Sequence[str], requested: int | None) -> ProcessPoolExecutor | None:
    """A warm pool for a run big enough to use one (None otherwise): its workers import the
    per-rank code while the main process loads its own. A run too small for one is parsed in
    this process, on ``threads_for`` threads that share polars' default pool."""
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


def return_freed_pages() -> None:
    """Before polars loads (here, and in the workers, which inherit the environment). A
    setting the user made is kept."""
    os.environ.setdefault(JEMALLOC_CONF, RETURN_FREED_PAGES)


def warm() -> None:
    """Runs in a fresh worker: imports the per-rank unit (defined here, not there, so that
    submitting it imports nothing heavy in the main process)."""
    from tracecomm.run.worker import preload

    preload()
