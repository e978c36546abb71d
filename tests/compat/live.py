"""Running HTA itself in tests: skip without it, fail instead where CI requires it.

``TRACECOMM_REQUIRE_HTA=<version>`` (set by `.ci/run` to 0.6.1) turns a missing HTA, or an HTA
of another version, into a failure, so CI cannot pass by skipping the live tests."""

from __future__ import annotations

import os

import pytest

REQUIRE_ENV = "TRACECOMM_REQUIRE_HTA"


def need_hta(release: str | None = None) -> str:
    """The installed HTA's version; skip (or fail, see above) without one, or when ``release``
    (a prefix such as "0.5") is given and the installed one is another."""
    required = os.environ.get(REQUIRE_ENV, "")
    try:
        from tracecomm.compat.crosscheck import HtaMissing, installed

        version = installed().version
    except HtaMissing:
        if required:
            pytest.fail(f"HTA is not installed, and {REQUIRE_ENV}={required} is set")
        pytest.skip("HTA is not installed (pip install 'tracecomm[hta]')")
    if required and version != required:
        pytest.fail(f"HTA {version} is installed, and {REQUIRE_ENV}={required} is set")
    if release is not None and not (version == release or version.startswith(release + ".")):
        pytest.skip(f"needs HTA {release}; HTA {version} is installed")
    return version
