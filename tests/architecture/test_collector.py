"""Where the cyclic collector may run (``tracecomm.collector``): never while a worker loads the
per-rank modules (which it then freezes), and over no object at the CLI's exit. Each check runs
in a fresh interpreter: freezing the test process's objects would keep its garbage."""

from __future__ import annotations

import gc
import subprocess
import sys
from pathlib import Path

from tracecomm import collector

REPO = Path(__file__).resolve().parents[2]  # this checkout's tracecomm, first on the path

COUNT = """
import gc, sys
passes = []
gc.callbacks.append(lambda phase, info: phase == "stop" and passes.append(info["generation"]))
"""

WARM = (
    COUNT
    + """
from tracecomm.run.pool import warm
passes.clear()  # a forked worker has these already
warm()
assert "polars" in sys.modules and "tracecomm.engine.partition" in sys.modules
print(len(passes), gc.isenabled(), gc.get_freeze_count())
"""
)

EXIT = (
    COUNT
    + """
sys.argv = ["tracecomm", "--version"]
from tracecomm.cli import main
try:
    main()
except SystemExit as exc:
    print(exc.code, gc.get_freeze_count(), file=sys.stderr)
"""
)


def _run(code: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=False
    )
    assert done.returncode == 0, done.stderr
    return done


def test_a_worker_loads_its_modules_without_a_pass_and_freezes_them() -> None:
    passes, enabled, frozen = _run(WARM).stdout.split()
    # without the pause, loading polars and numpy runs about 90 passes; frozen only after the
    # collector is back on, the first allocation runs one over every new object
    assert passes == "0"
    assert enabled == "True"  # the collector is back on for the ranks
    assert int(frozen) > 20_000  # the modules' objects (about 48,000 with polars and numpy)


def test_the_cli_freezes_every_object_before_it_exits() -> None:
    done = _run(EXIT)
    assert done.stdout.startswith("tracecomm ")
    code, frozen = done.stderr.split()
    assert code == "0"
    assert int(frozen) > 10_000


def test_a_pause_keeps_a_collector_the_caller_turned_off_off() -> None:
    was = gc.isenabled()
    try:
        gc.enable()
        with collector.paused():
            assert not gc.isenabled()
        assert gc.isenabled()
        gc.disable()
        with collector.paused():
            pass
        assert not gc.isenabled()
    finally:
        (gc.enable if was else gc.disable)()
