"""The process pool that parses ranks side by side, sized from the input before any heavy
import, so the workers start (and import) while the main process is still loading its own
modules and discovering files."""

from __future__ import annotations

import io
import os
import sys
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from multiprocessing import get_context, popen_spawn_posix, reduction, spawn, util
from multiprocessing.context import (
    BaseContext,
    SpawnContext,
    SpawnProcess,
    set_spawning_popen,
)
from pathlib import Path
from typing import Any

from tracecomm import collector
from tracecomm.ingest.discover import certain_json_size, json_size
from tracecomm.ingest.options import ReadOptions

# Below this much input a forked pool (the CLI's) saves nothing over threads of this process,
# which use less CPU. Measured on two cores (issue 33, interleaved medians of 5): 8 ranks of
# 10 MB 1.74 s pooled / 1.82 s threaded, 16 of 34 MB in all 2.57 / 2.63 s; above, the pool
# wins: 64 ranks of 47 MB in all 6.6 / 9.4 s, 8 x 35 MB 2.9 / 3.3 s (the Python between
# polars calls holds the GIL, and small ranks are mostly that).
POOL_MIN_BYTES = 32 * 2**20
# Larger ranks stay with the pool too (issue 47, bench/threads_or_pool.py, quiet, medians of 3):
# 8 real ranks of 35 MB tie (1.09 s both; threads spend a fifth less CPU), 8 x 100 MB 1.74 s
# forked against 1.91 s threaded, 64 x 3 MB 2.08 / 3.15 s; the threads only won on a loaded
# machine, where CPU is what runs out. About half of a rank's work holds the GIL (the Python
# between polars calls), so threads cannot pass about 2x however many cores there are.
# ... for a pool of fresh interpreters, which the Python API starts (polars is loaded there, so
# no fork): each worker starts Python and imports polars and the per-rank code (0.42-0.5 CPU-s)
# before its first rank, where threads of the caller start at once. On two busy cores (best
# of 3-5), two spawned workers took 3.9 s where threads took 2.4 s over 8 x 30 MB, 6.0 s
# against 5.0 s over 8 x 100 MB, and 7.1 s against 15.5 s over 8 x 250 MB. More cores favour
# the pool sooner (threads share the GIL), but under 1 GiB the threads finish in seconds.
SPAWNED_POOL_MIN_BYTES = 2**30
# The CLI's own process parses ranks beside its pool, which then has one worker fewer: it loads
# polars and the per-rank code for the cross-rank stage anyway, so the run pays one load of
# them less (0.27 CPU-s). Measured (issue 47, 2 cores, one worker and this process against two
# workers, interleaved medians): the real 8 x 35 MB run 1,083 -> 1,020 ms (20 rounds), 64 x 3 MB
# 2,233 -> 2,046 ms and 8 x 100 MB 1,808 -> 1,645 ms (5). Only while no file is larger than
# this: a big rank parsed here would add its peak to the results this process holds, and a
# crash in a native library would end the run where a worker's loses one file. ``--jobs N``
# keeps N workers.
CLIENT_RANK_MAX_BYTES = 256 * 2**20
# polars' allocator (jemalloc) keeps freed pages for 10 s by default, and a run is shorter:
# the peak RSS counted every page a step ever freed. Handing them back after 0.1 s costs no
# measurable time and takes a 2 GB trace from 1.0 to 0.85 GiB (BENCHMARKS.md).
JEMALLOC_CONF = "_RJEM_MALLOC_CONF"  # read once, when polars' library first allocates
RETURN_FREED_PAGES = "dirty_decay_ms:100,muzzy_decay_ms:0"


def jobs_for(
    paths: Sequence[str | Path], requested: int | None, min_bytes: int | None = None
) -> int:
    """Worker processes for the run: ``requested``, else one per core once the input reaches
    ``min_bytes`` (``POOL_MIN_BYTES``; ``SPAWNED_POOL_MIN_BYTES`` where the workers would be
    spawned)."""
    if requested is not None:
        return max(1, min(requested, len(paths)))
    least = POOL_MIN_BYTES if min_bytes is None else min_bytes
    # a remote file's size is not worth a round trip here: count it as worth a process
    total = sum(json_size(p) if "://" not in str(p) else least for p in paths)
    if total < least or len(paths) < 2:
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


def new_pool(jobs: int, share: int | None = None) -> ProcessPoolExecutor:
    """``jobs`` workers, each with its share of the cores for polars: one of ``share`` when
    this process parses beside them (else of ``jobs``)."""
    # Forking a process whose polars thread pool runs can deadlock: fork only while this
    # process has not loaded polars (the CLI starts its pool first), else start fresh
    # interpreters that leave the caller's script alone (``unguarded_spawn``). A forked
    # worker skips the interpreter's start and the imports already made.
    fork = "polars" not in sys.modules and sys.platform == "linux"
    return ProcessPoolExecutor(
        max_workers=jobs,
        mp_context=get_context("fork") if fork else unguarded_spawn(),
        initializer=polars_threads,
        initargs=(max(1, (os.cpu_count() or 1) // (share or jobs)),),
    )


def unguarded_spawn() -> BaseContext:
    """multiprocessing's ``spawn``, but the workers do not run the caller's ``__main__``.

    A spawned worker normally imports the main module again (the script, by its path) so that
    functions defined there unpickle: a script calling ``tracecomm.analyze`` without an ``if
    __name__ == "__main__":`` guard then runs in every worker, whose own ``analyze`` cannot
    start processes while it is being imported, and the pool breaks. The pool's tasks are
    tracecomm's own functions, imported by name, so the workers need nothing from
    ``__main__``: these leave it out (as loky's workers do), and a plain script, code piped to
    ``python -``, ``python -c`` and a notebook all work alike, guard or not. Windows keeps the
    plain ``spawn``."""
    if sys.platform == "win32":
        return get_context("spawn")
    return UnguardedSpawnContext()


def polars_threads(threads: int) -> None:
    """Before a worker imports polars: its share of the cores (measured, BENCHMARKS.md: one
    thread per worker when the workers fill the cores, faster than the default of one per
    core, whose threads the workers' per-rank frames are too small to keep busy). A
    ``POLARS_MAX_THREADS`` the user set is kept."""
    os.environ.setdefault("POLARS_MAX_THREADS", str(threads))


@dataclass(frozen=True)
class WarmPool:
    """A pool started before the run. ``client_parses``: this process takes ranks beside its
    workers, one of the run's jobs (``CLIENT_RANK_MAX_BYTES``)."""

    executor: ProcessPoolExecutor
    client_parses: bool


def start_pool(
    traces: Sequence[str], requested: int | None, read: ReadOptions | None = None
) -> WarmPool | None:
    """A warm pool for a run big enough to use one (None otherwise): its workers import the
    per-rank code while the main process loads its own. A run too small for one is parsed in
    this process, on ``threads_for`` threads that share polars' default pool. ``read``: the
    run's bounds (how far a gzip file may inflate)."""
    ratio = (read or ReadOptions()).max_inflate_ratio
    try:
        jobs = jobs_for(traces, requested)
        client = requested is None and jobs > 1 and all(_small(t, ratio) for t in traces)
    except OSError:
        return None
    if jobs <= 1:
        return None
    # the client keeps polars' default threads, for its cross-rank stage (on two cores, one
    # thread for its ranks too: 870 against 881 ms on the real run, 8 rounds: noise)
    pool = new_pool(jobs - client, share=jobs)
    for _ in range(jobs - client):
        pool.submit(warm)  # spawns the workers, which import the per-rank code
    return WarmPool(pool, client)


def _small(trace: str, inflate_ratio: float) -> bool:
    """Under ``CLIENT_RANK_MAX_BYTES`` for certain (``certain_json_size``)."""
    if "://" in trace:
        return False
    size = certain_json_size(trace, inflate_ratio)
    return size is not None and size <= CLIENT_RANK_MAX_BYTES


def return_freed_pages() -> None:
    """Before polars loads (here, and in the workers, which inherit the environment). A
    setting the user made is kept."""
    os.environ.setdefault(JEMALLOC_CONF, RETURN_FREED_PAGES)


def warm() -> None:
    """Runs in a fresh worker: imports the per-rank unit (defined here, not there, so that
    submitting it imports nothing heavy in the main process)."""
    with collector.loading_modules():
        from tracecomm.run.worker import preload

        preload()


class UnguardedPopen(popen_spawn_posix.Popen):
    """``popen_spawn_posix.Popen`` whose preparation data leaves out the main module, so the
    child never runs it. multiprocessing has no switch for that: this is its ``_launch`` (the
    same in Python 3.10 to 3.13) with the two ``pop`` calls added."""

    _fds: list[int]  # set by popen_spawn_posix.Popen.__init__

    def _launch(self, process_obj: Any) -> None:
        from multiprocessing import resource_tracker

        tracker_fd = resource_tracker.getfd()
        assert tracker_fd is not None  # ensure_running set it
        self._fds.append(tracker_fd)
        prep_data = spawn.get_preparation_data(process_obj._name)
        prep_data.pop("init_main_from_name", None)  # python -m script
        prep_data.pop("init_main_from_path", None)  # python script.py, python - < script.py
        fp = io.BytesIO()
        set_spawning_popen(self)
        try:
            reduction.dump(prep_data, fp)
            reduction.dump(process_obj, fp)
        finally:
            set_spawning_popen(None)
        parent_r = child_w = child_r = parent_w = None
        try:
            parent_r, child_w = os.pipe()
            child_r, parent_w = os.pipe()
            cmd = spawn.get_command_line(tracker_fd=tracker_fd, pipe_handle=child_r)
            self._fds.extend([child_r, child_w])
            exe = os.fsencode(spawn.get_executable())
            self.pid = util.spawnv_passfds(exe, cmd, self._fds)
            self.sentinel = parent_r
            with open(parent_w, "wb", closefd=False) as f:
                f.write(fp.getbuffer())
        finally:
            fds = [fd for fd in (parent_r, parent_w) if fd is not None]
            self.finalizer = util.Finalize(self, _close_fds, fds)
            for fd in (child_r, child_w):
                if fd is not None:
                    os.close(fd)


def _close_fds(*fds: int) -> None:
    for fd in fds:
        os.close(fd)


class UnguardedProcess(SpawnProcess):
    @staticmethod
    def _Popen(process_obj: Any) -> UnguardedPopen:
        return UnguardedPopen(process_obj)


class UnguardedSpawnContext(SpawnContext):
    Process = UnguardedProcess
