"""The settings a pool's workers parse under: polars' threads (their share of the cores) and
its allocator handing freed pages back (both before polars loads, both kept when the user set
them); spawned workers leave the caller's script alone."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO
from tracecomm.run import pool


def environ(name: str) -> str | None:
    return os.environ.get(name)


def test_freed_pages_go_back_unless_the_user_said_otherwise(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(pool.JEMALLOC_CONF, raising=False)
    pool.return_freed_pages()
    assert os.environ[pool.JEMALLOC_CONF] == pool.RETURN_FREED_PAGES
    monkeypatch.setenv(pool.JEMALLOC_CONF, "dirty_decay_ms:5000")
    pool.return_freed_pages()
    assert os.environ[pool.JEMALLOC_CONF] == "dirty_decay_ms:5000"


def test_workers_parse_with_their_share_of_the_cores_and_the_allocator_setting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("POLARS_MAX_THREADS", raising=False)
    monkeypatch.delenv(pool.JEMALLOC_CONF, raising=False)
    pool.return_freed_pages()
    with pool.new_pool(2) as workers:
        threads = workers.submit(environ, "POLARS_MAX_THREADS").result()
        conf = workers.submit(environ, pool.JEMALLOC_CONF).result()
    assert threads == str(max(1, (os.cpu_count() or 1) // 2))
    assert conf == pool.RETURN_FREED_PAGES


UNGUARDED = """
import os
import polars  # loaded, as in the Python API: the pool spawns its workers
from tracecomm.run import pool
print("the script ran")
with pool.new_pool(2) as workers:
    pids = {f.result() for f in [workers.submit(os.getpid) for _ in range(4)]}
print(len(pids) >= 1 and os.getpid() not in pids)
"""


def test_spawned_workers_do_not_run_the_callers_script(tmp_path: Path) -> None:
    """No ``if __name__ == "__main__":`` guard: multiprocessing's own ``spawn`` would run the
    script again in each worker (whose pool then fails to start, breaking this one)."""
    script = tmp_path / "unguarded.py"
    script.write_text(UNGUARDED)
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
    done = subprocess.run(
        [sys.executable, str(script)],
        env={**os.environ, "PYTHONPATH": path},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "the script ran\nTrue\n"
