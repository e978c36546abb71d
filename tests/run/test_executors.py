"""--executor dask: the per-rank parse on a real Dask cluster (separate worker processes,
loopback only) gives the figures the local executor gives, also when a worker dies."""

from __future__ import annotations

import os
import signal
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tests.conftest import analyze_json
from tests.run.conftest import need_distributed
from tracecomm.analysis.report import report_document
from tracecomm.cli import EXIT_USAGE, app
from tracecomm.run.executors import (
    DaskExecutor,
    ExecutorSpec,
    LocalExecutor,
    WorkerDied,
    parse_executor,
)
from tracecomm.run.request import request_of
from tracecomm.run.session import _lost
from tracecomm.run.session import run_analysis as analyze

OPTS = {"jobs": 1, "detail": ["instances"]}


def document(run: Path, executor: Any = None, progress: Any = None) -> dict[str, Any]:
    report = analyze(request_of(run, **OPTS), progress, executor=executor or LocalExecutor())
    doc: dict[str, Any] = report_document(report)
    return doc


@pytest.fixture(scope="module")
def local_doc(run64: Path) -> dict[str, Any]:
    return document(run64)


def test_a_dask_cluster_gives_the_local_figures(
    run64: Path, dask_executor: DaskExecutor, local_doc: dict[str, Any]
) -> None:
    workers = dask_executor.client.run(os.getpid)
    assert len(workers) == 2 and os.getpid() not in workers.values()  # real worker processes
    seen: list[int] = []
    doc = document(run64, dask_executor, lambda done, total, path: seen.append(done))
    assert doc == local_doc
    assert len(doc["ranks"]) == 64 and not doc["missing_ranks"]
    assert doc["stragglers"]["ranks"][0]["gain_ns"]  # the cross-rank work ran on the client
    assert seen[-1] == 64 and seen == sorted(seen)


def test_the_whole_run_reads_on_the_workers(
    run64: Path, dask_executor: DaskExecutor, local_doc: dict[str, Any], monkeypatch: Any
) -> None:
    """Nothing that reads the run folder runs on the client: parse, discovery and settings
    all fail here and the result is still complete."""
    from tracecomm.ingest import load as ingest_load
    from tracecomm.run import discover, session

    def not_here(*args: object) -> None:
        raise AssertionError("read on the client")

    monkeypatch.setattr(ingest_load, "load_rank", not_here)
    monkeypatch.setattr(discover, "find_sources", not_here)
    monkeypatch.setattr(session, "read_settings", not_here)
    assert document(run64, dask_executor) == local_doc


def test_a_worker_killed_mid_run_is_replaced_and_its_ranks_parsed_again(
    run64: Path, local_doc: dict[str, Any]
) -> None:
    need_distributed()
    with DaskExecutor(ExecutorSpec("dask"), workers=2) as executor:
        victim = next(iter(executor.client.run(os.getpid).values()))
        killed: list[int] = []

        def kill_once(done: int, total: int, path: str) -> None:
            if done == 4 and not killed:
                os.kill(victim, signal.SIGKILL)
                killed.append(victim)

        doc = document(run64, executor, kill_once)
        assert killed
        assert doc == local_doc  # complete: every rank, the same figures
        assert victim not in executor.client.run(os.getpid).values()  # the nanny restarted it


def test_a_rank_whose_worker_keeps_dying_is_reported_missing(
    run64: Path, local_doc: dict[str, Any]
) -> None:
    """With no retries allowed, the tasks on the killed worker are lost: those ranks are
    missing with the reason, and every other rank has its local figures."""
    need_distributed()
    import dask

    with (
        dask.config.set({"distributed.scheduler.allowed-failures": 0}),
        DaskExecutor(ExecutorSpec("dask"), workers=2) as executor,
    ):
        victim = next(iter(executor.client.run(os.getpid).values()))

        def kill_once(done: int, total: int, path: str) -> None:
            if done == 4:
                os.kill(victim, signal.SIGKILL)

        report = analyze(request_of(run64, **OPTS), kill_once, executor=executor)
    doc = report_document(report)
    assert 1 <= len(report.missing_ranks) <= 4
    assert all("KilledWorker" in m.reason for m in report.missing_ranks)
    assert report.partial
    lost = {m.rank for m in report.missing_ranks}
    assert len(report.ranks) + len(lost) == 64
    expected = {r["rank"]: r for r in local_doc["ranks"]}
    for rank in doc["ranks"]:
        assert rank == expected[rank["rank"]]


@pytest.mark.parametrize(
    ("text", "kind", "address"),
    [
        (None, "local", None),
        ("local", "local", None),
        ("dask", "dask", None),
        ("dask://head:9000", "dask", "tcp://head:9000"),
        ("dask://head", "dask", "tcp://head:8786"),
        ("tcp://10.0.0.5:8786/", "dask", "tcp://10.0.0.5:8786"),
    ],
)
def test_executor_addresses(text: str | None, kind: str, address: str | None) -> None:
    spec = parse_executor(text)
    assert (spec.kind, spec.address) == (kind, address)


@pytest.mark.parametrize(
    ("flag", "says"),
    [
        ("ray://head:10001", "Ray is not supported yet"),
        ("spark", "expected local, dask or dask://host:port"),
        ("dask://head:port", "the port must be a number"),
    ],
)
def test_unknown_executors_are_usage_errors(run64: Path, flag: str, says: str) -> None:
    result = CliRunner().invoke(app, ["analyze", str(run64), "--executor", flag])
    assert result.exit_code == EXIT_USAGE
    assert says in result.stderr and "Traceback" not in result.stderr


def test_an_unreachable_scheduler_is_a_usage_error(run64: Path) -> None:
    need_distributed()
    result = CliRunner().invoke(
        app, ["analyze", str(run64), "--executor", "dask://127.0.0.1:9", "-q"]
    )
    assert result.exit_code == EXIT_USAGE
    assert "cannot reach tcp://127.0.0.1:9" in result.stderr


def test_the_cli_runs_on_a_local_dask_cluster(run64: Path, local_doc: dict[str, Any]) -> None:
    need_distributed()
    import json

    doc = analyze_json(run64, "-q", "--executor", "dask", "-j", "2")
    assert doc["ranks"] == json.loads(json.dumps(local_doc["ranks"]))


def test_the_local_cluster_listens_on_loopback_only(dask_executor: DaskExecutor) -> None:
    import psutil  # a dependency of distributed

    workers = set(dask_executor.client.run(os.getpid).values())
    processes = {os.getpid(), *workers, *(psutil.Process(w).ppid() for w in workers)}
    listening = [
        c.laddr
        for c in psutil.net_connections("tcp")
        if c.status == psutil.CONN_LISTEN and c.pid in processes
    ]
    assert len(listening) >= 5  # scheduler, its HTTP server, two workers, two nannies
    assert {addr.ip for addr in listening} == {"127.0.0.1"}


@pytest.mark.parametrize("jobs", [1, 2])
def test_the_local_executor_reports_progress_from_zero(run64: Path, jobs: int) -> None:
    """The stderr progress bar starts at (0, n) and ends at (n, n), pool or not."""
    from tracecomm.engine import BreakdownOptions
    from tracecomm.ingest.model import ReadOptions
    from tracecomm.run.worker import RankWork, analyze_file

    paths = sorted(str(p) for p in run64.iterdir())[:6]
    calls: list[tuple[int, int]] = []
    out = LocalExecutor().map(
        analyze_file,
        paths,
        (RankWork(BreakdownOptions(), ReadOptions()),),
        lambda d, t, p: calls.append((d, t)),
        lambda p, e: None,
        jobs,
    )
    assert len(out) == 6 and all(len(o) == 1 for o in out)
    assert calls == [(i, 6) for i in range(7)]


def test_a_pool_process_that_dies_loses_only_its_own_file() -> None:
    """The local pool breaks when one process dies; every other item still gets its result
    and the one being parsed in the dying process is reported through on_error, with how
    that process ended."""
    from tests.run import crashing

    items = ["a", "b", "die-c", "d", "e", "f", "g"]
    calls: list[tuple[int, int]] = []
    lost: dict[str, BaseException] = {}

    def lose(item: str, exc: BaseException) -> tuple[str, str]:
        lost[item] = exc
        return ("lost", item)

    out = LocalExecutor().map(
        crashing.echo_or_die, items, (), lambda d, t, p: calls.append((d, t)), lose, 2
    )
    assert out == [("lost", item) if item.startswith("die") else ("ok", item) for item in items]
    died = lost["die-c"]
    assert isinstance(died, WorkerDied) and isinstance(died, BrokenProcessPool)
    assert died.exitcode == 9 and "exited with status 9" in died.how
    assert calls[0] == (0, 7) and calls[-1] == (7, 7)


def test_a_killed_pool_process_is_reported_as_killed_and_a_crash_as_a_crash() -> None:
    from tests.run import crashing

    out = LocalExecutor().map(
        crashing.echo_or_be_killed, ["a", "die-b", "c"], (), None, lambda item, e: e, 2
    )
    assert out[0] == ("ok", "a") and out[2] == ("ok", "c")
    assert isinstance(out[1], WorkerDied) and out[1].exitcode == -signal.SIGKILL
    reasons = {
        code: _lost("rank3.json", WorkerDied(code)).reason
        for code in (-signal.SIGKILL, -signal.SIGSEGV, 1, None)
    }
    assert "was killed (SIGKILL: the kernel's out-of-memory killer" in reasons[-signal.SIGKILL]
    assert "crashed (SIGSEGV)" in reasons[-signal.SIGSEGV]
    assert "exited with status 1 before finishing it" in reasons[1]
    assert "memory" not in reasons[1] and "memory" not in reasons[-signal.SIGSEGV]
    assert "died (killed for memory, or a crash)" in reasons[None]  # no exit status to read


def test_ranks_parsed_on_threads_give_the_serial_figures(
    run64: Path, local_doc: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run too small for a pool is parsed on threads of this process (one per core): the
    document is the one ``--jobs 1`` gives, ranks in the same order."""
    from tracecomm.run import pool

    monkeypatch.setattr(pool.os, "cpu_count", lambda: 4)
    assert pool.threads_for(sorted(str(p) for p in run64.iterdir()), None) == 4
    report = analyze(request_of(run64, **{**OPTS, "jobs": None}), None, executor=LocalExecutor())
    threaded = report_document(report)
    threaded["options"].pop("jobs", None)
    options = {k: v for k, v in local_doc["options"].items() if k != "jobs"}
    serial = {**local_doc, "options": options}
    assert threaded == serial


def test_threads_only_for_runs_too_small_for_a_pool(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tracecomm.run import pool

    monkeypatch.setattr(pool.os, "cpu_count", lambda: 8)
    small = [tmp_path / f"rank{i}.json" for i in range(3)]
    for path in small:
        path.write_bytes(b'{"traceEvents": []}')
    names = [str(p) for p in small]
    assert pool.threads_for(names, None) == 3  # one per file, at most one per core
    assert pool.threads_for(names, 1) == 1  # --jobs 1 is one at a time
    assert pool.threads_for(names[:1], None) == 1
    monkeypatch.setattr(pool, "POOL_MIN_BYTES", 8)  # now big enough for a pool of processes
    assert pool.jobs_for(names, None) > 1 and pool.threads_for(names, None) == 1


def test_threaded_results_come_back_in_item_order_with_progress() -> None:
    """Items that finish out of order still come back in item order; progress counts up."""
    calls: list[tuple[int, int]] = []
    out = LocalExecutor().map(
        _sleep_then_echo,
        ["0.2", "0.0", "0.1"],
        (),
        lambda d, t, p: calls.append((d, t)),
        lambda item, exc: None,
        1,
        threads=3,
    )
    assert out == ["0.2", "0.0", "0.1"]
    assert calls == [(0, 3), (1, 3), (2, 3), (3, 3)]


def _sleep_then_echo(item: str) -> str:
    import time

    time.sleep(float(item))
    return item


def test_a_bug_in_a_threaded_rank_propagates_and_no_queued_rank_starts() -> None:
    """``fn`` returns failures as values: an exception is a bug, and it reaches the caller as
    it would serially; the ranks still queued behind it are not started."""
    started: list[str] = []

    def boom_or_sleep(item: str) -> str:
        started.append(item)
        if item == "boom":
            raise RuntimeError("a bug")
        import time

        time.sleep(0.05)
        return item

    with pytest.raises(RuntimeError, match="a bug"):
        LocalExecutor().map(
            boom_or_sleep,
            ["boom", *(str(i) for i in range(20))],
            (),
            None,
            lambda item, exc: None,
            1,
            threads=2,
        )
    assert len(started) < 21
