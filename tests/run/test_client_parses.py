"""The CLI's process parses ranks beside its pool (``run.pool.CLIENT_RANK_MAX_BYTES``): one
worker fewer, the same figures, and a worker's death still loses only its own file."""

from __future__ import annotations

import gzip
import os
from pathlib import Path
from typing import Any

import pytest

from tests.run import crashing
from tracecomm.analysis.report import report_document
from tracecomm.ingest.options import ReadOptions
from tracecomm.run import pool
from tracecomm.run.executors import LocalExecutor, WorkerDied
from tracecomm.run.request import request_of
from tracecomm.run.session import run_analysis as analyze


def beside_one_worker() -> LocalExecutor:
    return LocalExecutor(pool.new_pool(1, share=2), client_parses=True)


def test_the_client_and_the_worker_both_take_items_in_order() -> None:
    items = [str(i) for i in range(12)]
    calls: list[tuple[int, int]] = []
    out = beside_one_worker().map(
        crashing.where,
        items,
        (os.getpid(),),
        lambda d, t, p: calls.append((d, t)),
        lambda p, e: None,
        2,
    )
    assert [item for item, _ in out] == items
    assert {here for _, here in out} == {True, False}  # this process and the worker
    assert calls == [(i, 12) for i in range(13)]


def test_the_figures_are_the_serial_ones(run64: Path) -> None:
    opts: dict[str, Any] = {"detail": ["instances"]}
    serial = report_document(analyze(request_of(run64, jobs=1, **opts), None, LocalExecutor()))
    shared = report_document(
        analyze(request_of(run64, jobs=2, **opts), None, executor=beside_one_worker())
    )
    for doc in (serial, shared):
        doc["options"].pop("jobs", None)
    assert shared == serial
    assert len(shared["ranks"]) == 64


def test_a_worker_that_dies_loses_only_its_own_file(tmp_path: Path) -> None:
    items = ["a", "b", "c", "die-d", "e", "f", "g"]
    lost: dict[str, BaseException] = {}

    def lose(item: str, exc: BaseException) -> tuple[str, str]:
        lost[item] = exc
        return ("lost", item)

    out = beside_one_worker().map(
        crashing.die_in_a_worker,
        items,
        (os.getpid(), str(tmp_path / "died")),
        None,
        lose,
        2,
    )
    assert out == [("lost", i) if i.startswith("die") else ("ok", i) for i in items]
    assert isinstance(lost["die-d"], WorkerDied) and lost["die-d"].exitcode == 9


def test_a_pool_that_breaks_while_the_client_is_busy_loses_only_the_dead_file(
    tmp_path: Path,
) -> None:
    """Two workers: one dies while the client's thread is busy elsewhere (here, its
    ``meanwhile``), so the other's result is read from a pool that is broken already. Handing
    out the next item then raises in ``submit``; that item, and the dead one, run again in a
    fresh pool of one process, and only the dead one is lost."""
    import time

    items = ["a", "die-b", "c", "d", "e", "f"]
    out = LocalExecutor(pool.new_pool(2, share=3), client_parses=True).map(
        crashing.die_in_a_worker,
        items,
        (os.getpid(), str(tmp_path / "died")),
        None,
        lambda item, exc: ("lost", item),
        3,
        lambda: time.sleep(1.5),
    )
    assert out == [("lost", i) if i.startswith("die") else ("ok", i) for i in items]


def test_a_bug_reaches_the_caller() -> None:
    with pytest.raises(RuntimeError, match="a bug"):
        beside_one_worker().map(
            crashing.boom, ["a", "b", "boom", "c", "d"], (), None, lambda p, e: None, 2
        )


def test_only_the_default_jobs_and_small_files_share(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pool.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(pool, "POOL_MIN_BYTES", 8)
    files = [tmp_path / f"rank{i}.json" for i in range(3)]
    for path in files:
        path.write_bytes(b'{"traceEvents": []}')
    packed = tmp_path / "rank3.json.gz"
    packed.write_bytes(gzip.compress(b'{"traceEvents": []}'))
    names = [*map(str, files), str(packed)]

    def started(requested: int | None, read: ReadOptions | None = None) -> tuple[bool, int]:
        warm = pool.start_pool(names, requested, read)
        assert warm is not None
        warm.executor.shutdown(cancel_futures=True)
        return warm.client_parses, warm.executor._max_workers  # type: ignore[attr-defined]

    assert started(None) == (True, 1)  # two jobs: this process and one worker
    assert started(2) == (False, 2)  # --jobs 2: two workers
    # a run whose gzip files may inflate to 4 GiB: the trailer's size may have wrapped
    assert started(None, ReadOptions(max_inflate_ratio=2.0**32)) == (False, 2)
    monkeypatch.setattr(pool, "CLIENT_RANK_MAX_BYTES", 8)
    assert started(None) == (False, 2)  # a rank too big to parse here


def test_a_gzip_size_is_certain_only_where_its_trailer_cannot_have_wrapped(
    tmp_path: Path,
) -> None:
    from tracecomm.ingest.discover import certain_json_size

    text = b'{"traceEvents": []}' * 1000
    plain, packed = tmp_path / "a.json", tmp_path / "b.json.gz"
    plain.write_bytes(text)
    packed.write_bytes(gzip.compress(text))
    assert certain_json_size(plain, 2.0**40) == len(text)  # a plain file's size is its own
    assert certain_json_size(packed, 200.0) == len(text)  # the trailer's, exact
    # a bound that lets this file inflate to 4 GiB: its trailer may hold the size mod 2**32
    assert certain_json_size(packed, 2**32 / packed.stat().st_size) is None
