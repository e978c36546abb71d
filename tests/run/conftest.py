"""A generated 64-rank run, and Dask clusters of real worker processes on loopback.

Without Dask distributed installed these tests skip, unless ``TRACECOMM_REQUIRE_DASK=1`` (set by
`.ci/run`) turns that into a failure."""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tracecomm.synth import fsdp_run, write_run


def need(modules: tuple[str, ...], require_env: str, what: str) -> None:
    """Skip without ``modules``; fail instead where CI sets ``require_env``."""
    try:
        for module in modules:
            importlib.import_module(module)
    except ImportError:
        if os.environ.get(require_env):
            pytest.fail(f"{what} not installed, and {require_env} is set")
        pytest.skip(f"{what} not installed")


def need_distributed() -> None:
    need(("distributed",), "TRACECOMM_REQUIRE_DASK", "Dask distributed (tracecomm[dask]) is")


@pytest.fixture(scope="session")
def run64(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """64 ranks, one straggler, 3 complete steps each: every cross-rank figure is exercised."""
    path = tmp_path_factory.mktemp("run64") / "run"
    write_run(fsdp_run(world_size=64, steps=3, layers=2, seed=11), path)
    return path


@pytest.fixture(scope="session")
def dask_executor() -> Iterator[object]:
    """Two single-threaded worker processes (a nanny each), shared by the tests that do not
    kill workers."""
    need_distributed()
    from tracecomm.run.executors import DaskExecutor, ExecutorSpec

    executor = DaskExecutor(ExecutorSpec("dask"), workers=2)
    yield executor
    executor.close()
