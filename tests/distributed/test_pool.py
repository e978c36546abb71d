"""The settings a pool's workers parse under: polars' threads (their share of the cores) and
its allocator handing freed pages back (both before polars loads, both kept when the user set
them)."""

from __future__ import annotations

import os

import pytest

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
