"""Where the work that reads input files runs: this machine (a process pool), or the workers
of a Dask cluster (``--executor dask`` starts one on this machine, ``dask://host:8786`` joins a
running one).

The pipeline hands an executor two kinds of work: ``call`` (one small task that reads the run
folder: discovery, settings, NCCL logs) and ``map`` (the per-rank parse). Everything that
touches a trace runs there; only the small per-rank results come back to the client, which
does the cross-rank analysis itself.
"""

from __future__ import annotations

import logging
import os
import signal
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any, Generic, Literal, Protocol, TypeVar, cast

from tracecomm.errors import UsageError

T = TypeVar("T")
R = TypeVar("R")
Progress = Callable[[int, int, str], None]
OnError = Callable[[str, BaseException], Any]
Meanwhile = Callable[[], None] | None

DASK_PORT = 8786


@dataclass(frozen=True)
class ExecutorSpec:
    """``--executor``: ``local``, ``dask`` (a cluster of ``workers`` processes on this machine,
    loopback only) or ``dask://host:port`` (a running scheduler)."""

    kind: Literal["local", "dask"] = "local"
    address: str | None = None

    @property
    def remote(self) -> bool:
        return self.kind != "local"


def parse_executor(text: str | None) -> ExecutorSpec:
    value = (text or "local").strip()
    low = value.lower()
    if low == "local":
        return ExecutorSpec()
    if low == "dask":
        return ExecutorSpec("dask")
    for prefix in ("dask://", "tcp://"):
        if low.startswith(prefix):
            hostport = value[len(prefix) :].rstrip("/")
            if not hostport:
                break
            host, _, port = hostport.rpartition(":") if ":" in hostport else (hostport, "", "")
            if port and not port.isdigit():
                raise UsageError(f"--executor {value}: the port must be a number")
            return ExecutorSpec("dask", f"tcp://{host or hostport}:{port or DASK_PORT}")
    if low == "ray" or low.startswith("ray://"):
        raise UsageError(
            f"--executor {value}: Ray is not supported yet; use dask or dask://host:port "
            "(docs/scale-out.md)"
        )
    raise UsageError(f"--executor {value}: expected local, dask or dask://host:port")


class Executor(Protocol):
    def call(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` where the input files are; exceptions propagate."""
        ...

    def map(
        self,
        fn: Callable[..., R],
        items: Sequence[str],
        args: tuple[Any, ...],
        progress: Progress | None,
        on_error: OnError,
        jobs: int,
        meanwhile: Meanwhile = None,
        threads: int = 1,
    ) -> list[R]:
        """``fn(item, *args)`` for each item, in item order; an item whose task is lost (a
        worker that kept dying) gets ``on_error(item, exception)`` instead. ``meanwhile`` runs
        here once the tasks are out (the client's own imports, overlapping the parse).
        ``threads``: for work kept in this process (``jobs`` 1), how many items at a time."""
        ...

    def close(self) -> None: ...


class LocalExecutor:
    """This process for one job (items side by side on ``threads`` threads: the parse spends
    most of its time in polars and inflation, which release the GIL), else a process pool (the
    CLI may hand over one it started early, so workers import while the client loads its own
    modules). ``pool_min_bytes``: the input that pays for a pool when the caller leaves the
    number of jobs open (``run.pool.jobs_for``; None: ``POOL_MIN_BYTES``)."""

    def __init__(
        self,
        pool: ProcessPoolExecutor | None = None,
        pool_min_bytes: int | None = None,
        client_parses: bool = False,
    ) -> None:
        self._pool = pool
        self.pool_min_bytes = pool_min_bytes
        # the handed-over pool has one worker fewer than the run's jobs: this process takes
        # items beside it (``run.pool.client_parses``)
        self._client_parses = client_parses and pool is not None

    def call(self, fn: Callable[..., T], *args: Any) -> T:
        return fn(*args)

    def map(
        self,
        fn: Callable[..., R],
        items: Sequence[str],
        args: tuple[Any, ...],
        progress: Progress | None,
        on_error: OnError,
        jobs: int,
        meanwhile: Meanwhile = None,
        threads: int = 1,
    ) -> list[R]:
        out: list[R] = []
        if progress:
            progress(0, len(items), "")
        if jobs <= 1 and threads > 1 and len(items) > 1:
            self.close()
            return _threaded(fn, items, args, progress, threads, meanwhile)
        if jobs <= 1:
            self.close()
            if meanwhile:
                meanwhile()
            for i, item in enumerate(items):
                out.append(fn(item, *args))
                if progress:
                    progress(i + 1, len(items), item)
            return out
        if self._client_parses:
            return self._beside_pool(fn, items, args, progress, on_error, meanwhile)
        return self._pooled(fn, items, args, progress, on_error, jobs, meanwhile)

    def _beside_pool(
        self,
        fn: Callable[..., R],
        items: Sequence[str],
        args: tuple[Any, ...],
        progress: Progress | None,
        on_error: OnError,
        meanwhile: Meanwhile,
    ) -> list[R]:
        """The pool's workers and a thread of this process take the items one at a time, in
        item order, from one queue. A worker holds one item at a time: with one more queued
        behind it (to spare the round trip, 1-5 ms), the last two of a run went to the worker
        while the thread here had none left (measured: 0.19 s of one core idle at the end of the
        real 8-rank run, against 0.07 s with one). A pool that breaks takes no more: the
        items it held run again in a fresh pool of one process (``_pooled``), where a death
        can only be the item's own; the thread here takes the rest. (Every item it held counts
        as broken, finished or not: one submitted as it broke may never finish.) An exception
        (a bug: ``fn`` returns failures as values) reaches the caller, and no item starts
        after it."""
        import queue
        import threading
        from concurrent.futures import Future
        from functools import partial

        pool, self._pool, self._client_parses = self._pool, None, False
        assert pool is not None  # _client_parses is only set with a pool
        lock, order, stop = threading.Lock(), iter(range(len(items))), threading.Event()

        def take() -> int | None:
            with lock:
                return None if stop.is_set() else next(order, None)

        done: queue.SimpleQueue[tuple[int, Future[R] | _Outcome[R]]] = queue.SimpleQueue()

        def here() -> None:
            while (i := take()) is not None:
                try:
                    done.put((i, _Outcome(fn(items[i], *args))))
                except BaseException as exc:  # raised again in the caller's thread
                    done.put((i, _Outcome(None, exc)))
                    return

        held: dict[int, Future[R]] = {}  # the pool's items, until their result is read

        def submit() -> None:
            if (i := take()) is None:
                return
            try:
                future = pool.submit(fn, items[i], *args)
            except BrokenProcessPool as exc:  # it broke before the last result was read
                future = Future()
                future.set_exception(exc)
            held[i] = future
            future.add_done_callback(partial(_put, done, i))

        results: dict[int, R] = {}
        broken: list[int] = []
        try:
            for _ in range(getattr(pool, "_max_workers", 1)):
                submit()
            threading.Thread(target=here, name="tracecomm-rank", daemon=True).start()
            if meanwhile is not None:
                meanwhile()
            while len(results) + len(broken) < len(items):
                i, got = done.get()
                if isinstance(got, _Outcome):
                    results[i] = got.value()
                elif i not in held:
                    continue  # counted as broken already
                elif isinstance(got.exception(), BrokenProcessPool):
                    pool.shutdown(wait=True)  # its workers are gone: it takes nothing more
                    broken.extend(held)
                    held.clear()
                    continue
                else:
                    results[i] = held.pop(i).result()
                    if not broken:
                        submit()
                if progress:
                    progress(len(results), len(items), items[i])
        finally:  # an error or Ctrl-C: no item starts after it
            stop.set()
            pool.shutdown(wait=False, cancel_futures=True)
        if broken:
            again = self._pooled(fn, [items[i] for i in broken], args, None, on_error, 1, None)
            for i, result in zip(broken, again, strict=True):
                results[i] = result
                if progress:
                    progress(len(results), len(items), items[i])
        return [results[i] for i in range(len(items))]

    def _pooled(
        self,
        fn: Callable[..., R],
        items: Sequence[str],
        args: tuple[Any, ...],
        progress: Progress | None,
        on_error: OnError,
        jobs: int,
        meanwhile: Meanwhile,
    ) -> list[R]:
        """A worker process that dies (the kernel's OOM killer, a crash in a native library)
        breaks the whole pool: what had not finished runs again in a fresh pool of one
        process, where a death can only be the file being parsed, which alone is lost."""
        from concurrent.futures import as_completed

        from tracecomm.run.pool import new_pool

        results: dict[int, R] = {}
        pending = list(range(len(items)))
        pool, self._pool = self._pool or new_pool(jobs), None
        while pending:
            broken = False
            with pool:
                futures = {pool.submit(fn, items[i], *args): i for i in pending}
                workers = _workers(pool)
                if meanwhile is not None:
                    meanwhile()
                    meanwhile = None  # a retry after a broken pool has it done already
                try:
                    for future in as_completed(futures):
                        results[futures[future]] = future.result()
                        if progress:
                            progress(len(results), len(items), items[futures[future]])
                except BrokenProcessPool:
                    broken = True
            if broken and jobs == 1:  # one process, in submission order: the first unfinished
                culprit = next(i for i in pending if i not in results)
                # the pool is shut down: its process joined, its exit status known
                status = next((w.exitcode for w in workers), None)
                results[culprit] = on_error(items[culprit], WorkerDied(status))
                if progress:
                    progress(len(results), len(items), items[culprit])
            pending = [i for i in pending if i not in results]
            if not pending:
                return [results[i] for i in range(len(items))]
            jobs = 1
            pool = new_pool(1)
        return []

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None


class WorkerDied(BrokenProcessPool):
    """The one process of a pool died while it ran the item: how it ended (its exit status,
    when the pool let it be read), so that a crash is not reported as running out of memory,
    nor an error at the worker's start as either."""

    def __init__(self, exitcode: int | None) -> None:
        self.exitcode = exitcode
        super().__init__(self.how)

    @property
    def how(self) -> str:
        code = self.exitcode
        if code is None:
            return "died (killed for memory, or a crash)"
        if code == -signal.SIGKILL:
            return "was killed (SIGKILL: the kernel's out-of-memory killer, most likely)"
        if code < 0:
            try:
                return f"crashed ({signal.Signals(-code).name})"
            except ValueError:
                return f"crashed (signal {-code})"
        return f"exited with status {code} before finishing it (its error is on stderr)"


def _put(done: Any, i: int, future: Any) -> None:
    done.put((i, future))


@dataclass(frozen=True)
class _Outcome(Generic[R]):
    """What an item run in this process gave: its result, or the exception it raised."""

    result: R | None
    error: BaseException | None = None

    def value(self) -> R:
        if self.error is not None:
            raise self.error
        return cast(R, self.result)


def _workers(pool: ProcessPoolExecutor) -> list[Any]:
    """The pool's processes, for their exit status once it is shut down (an attribute of
    ``ProcessPoolExecutor``'s that Python 3.10 to 3.13 all have; none where it is missing)."""
    processes = getattr(pool, "_processes", None)
    return list(processes.values()) if isinstance(processes, dict) else []


def _threaded(
    fn: Callable[..., R],
    items: Sequence[str],
    args: tuple[Any, ...],
    progress: Progress | None,
    threads: int,
    meanwhile: Meanwhile,
) -> list[R]:
    """``fn`` over the items on a few threads of this process, results in item order; an
    exception (a bug: ``fn`` returns failures as values) propagates as it would serially."""
    from concurrent.futures import ThreadPoolExecutor, as_completed

    tp = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="tracecomm-rank")
    try:
        futures = {tp.submit(fn, item, *args): i for i, item in enumerate(items)}
        if meanwhile:
            meanwhile()
        results: dict[int, R] = {}
        for future in as_completed(futures):
            i = futures[future]
            results[i] = future.result()
            if progress:
                progress(len(results), len(items), items[i])
    finally:  # an error or Ctrl-C: the ranks not yet started never start
        tp.shutdown(wait=True, cancel_futures=True)
    return [results[i] for i in range(len(items))]


class DaskExecutor:
    """Tasks on a Dask cluster. A worker that dies mid-task is replaced and its tasks run again
    (the scheduler's ``allowed-failures``); a task that still cannot finish is the caller's
    ``on_error``, not the end of the run."""

    def __init__(self, spec: ExecutorSpec, workers: int | None = None) -> None:
        try:
            from distributed import Client, LocalCluster
        except ImportError:
            raise UsageError(
                "--executor dask needs Dask distributed: pip install 'tracecomm[dask]'"
            ) from None
        self._cluster = None
        try:
            if spec.address is None:
                self._cluster = LocalCluster(
                    n_workers=workers or os.cpu_count() or 1,
                    threads_per_worker=1,  # the parse holds the GIL half its time
                    processes=True,
                    host="127.0.0.1",
                    dashboard_address="127.0.0.1:0",  # its HTTP server: loopback, any port
                    silence_logs=logging.ERROR,
                )
                self._client = Client(self._cluster)
            else:
                self._client = Client(spec.address, timeout="10s")
        except (OSError, TimeoutError, RuntimeError) as exc:  # RuntimeError: a nanny that failed
            self.close()
            where = spec.address or "a local cluster"
            raise UsageError(f"--executor: cannot reach {where}: {exc}") from None

    @property
    def client(self) -> Any:
        return self._client

    def call(self, fn: Callable[..., T], *args: Any) -> T:
        result: T = self._client.submit(fn, *args, pure=False).result()
        return result

    def map(
        self,
        fn: Callable[..., R],
        items: Sequence[str],
        args: tuple[Any, ...],
        progress: Progress | None,
        on_error: OnError,
        jobs: int,
        meanwhile: Meanwhile = None,
        threads: int = 1,
    ) -> list[R]:
        from distributed import as_completed

        run = uuid.uuid4().hex[:8]
        futures = [
            self._client.submit(fn, item, *args, key=f"tracecomm-{run}-{i}", pure=False)
            for i, item in enumerate(items)
        ]
        if meanwhile:
            meanwhile()
        index = {f.key: i for i, f in enumerate(futures)}
        out: list[Any] = [None] * len(items)
        if progress:
            progress(0, len(items), "")
        for done, future in enumerate(as_completed(futures), 1):
            i = index[future.key]
            try:
                out[i] = future.result()
            except Exception as exc:  # KilledWorker, a result that did not deserialize, …
                out[i] = on_error(items[i], exc)
            future.release()
            if progress:
                progress(done, len(items), items[i])
        return out

    def __enter__(self) -> DaskExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        client, cluster = getattr(self, "_client", None), self._cluster
        if client is not None:
            client.close()
        if cluster is not None:
            cluster.close()


def open_executor(
    spec: ExecutorSpec,
    jobs: int | None,
    pool: ProcessPoolExecutor | None = None,
    pool_min_bytes: int | None = None,
    client_parses: bool = False,
) -> Executor:
    if spec.kind == "dask":
        return DaskExecutor(spec, jobs)
    return LocalExecutor(pool, pool_min_bytes, client_parses)
