"""The CLI builds its commands, checks a request and tells a run from a saved document before
polars loads (docs/architecture.md, "Cheap until the pool starts"): the option declarations it
reads (``run.options``, and the choice lists in ``compat.rules`` and ``mfu.choices``) and the
sniff of each input (``run.sniff``) import nothing heavy, so the pool it starts next forks."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

CHECK = """
import sys, typer
from tracecomm.cli import app
typer.main.get_command(app)
from tracecomm.run.request import request_of
request_of("run/", steps="3:7", jobs="2", compat="hta", rank_from="pid", detail="timeline",
           model_flops_per_step="3.16e15", dtype="fp8", max_trace_size="1GiB")
from tracecomm.cli import flow
assert flow.saved_document(["fixtures/sample-run", "fixtures/sample-run/rank0.pt.trace.json.gz"],
                           {}) is None
assert "polars" not in sys.modules, "polars loaded"
from tracecomm.run.pool import new_pool
pool = new_pool(1)
assert pool._mp_context.get_start_method() == "fork", pool._mp_context.get_start_method()
pool.shutdown()
"""


def test_the_cli_and_its_request_load_no_polars() -> None:
    repo = Path(__file__).resolve().parents[2]  # this checkout's tracecomm, first on the path
    done = subprocess.run(
        [sys.executable, "-c", CHECK], capture_output=True, text=True, cwd=repo, check=False
    )
    assert done.returncode == 0, done.stderr


NO_LOG = """
import sys
from tracecomm import analyze
report = analyze("fixtures/sample-run", jobs=1)
assert report.ranks and report.nccl is None
assert "tracecomm.nccl.parse" not in sys.modules, "the NCCL log parser loaded"
"""


def test_a_run_without_nccl_logs_loads_no_log_parser() -> None:
    """The report's types hold the NCCL diagnosis, but its 60 patterns compile only when a
    log is there to read (nccl.discover.analyze_nccl): a run without one pays nothing."""
    repo = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-c", NO_LOG], capture_output=True, text=True, cwd=repo, check=False
    )
    assert done.returncode == 0, done.stderr
