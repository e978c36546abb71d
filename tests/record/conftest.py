"""The recording tests need torch: its CPU build (`pip install torch==2.13.0` on these machines;
`.ci/run` installs it). Without it they skip, unless TRACECOMM_REQUIRE_TORCH=1 (set by
`.ci/run`) turns that into a failure."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator

import pytest


def need_torch() -> None:
    if importlib.util.find_spec("torch") is None:
        if os.environ.get("TRACECOMM_REQUIRE_TORCH"):
            pytest.fail("torch is not installed, and TRACECOMM_REQUIRE_TORCH is set")
        pytest.skip("torch is not installed (pip install torch==2.13.0: its CPU build)")


@pytest.fixture(autouse=True)
def _environment_restored() -> Iterator[None]:
    """The recorder sets NCCL's variables in a process without a process group: not for the
    tests after it."""
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)
