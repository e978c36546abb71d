"""``tracecomm.analyze``: the CLI's figures for notebooks, with the tables as polars frames."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import polars as pl
import pytest

import tracecomm
from tests.conftest import REPO, SAMPLE_RUN, analyze_json
from tracecomm.errors import NoUsableInput, UsageError


@pytest.fixture(scope="module")
def report() -> tracecomm.Report:
    return tracecomm.analyze(SAMPLE_RUN)


@pytest.fixture(scope="module")
def document() -> dict:
    return analyze_json(SAMPLE_RUN)


def test_the_readme_line_prints_the_per_rank_frame() -> None:
    code = "import tracecomm; r = tracecomm.analyze('fixtures/sample-run'); print(r.ranks_frame())"
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout
    assert "shape: (8, " in out and "rank" in out and "node0" in out


def readme_example() -> str:
    """The guide's Python API example, docs/api.md (it asks for ``jobs=2``: worker processes)."""
    section = (REPO / "docs" / "api.md").read_text()
    start = section.index("```python") + len("```python\n")
    code = section[start : section.index("```", start)]
    assert "jobs=2" in code
    return code


def check_example_output(out: str) -> None:
    """Printed once: the per-rank frame, then the MFU, step time and costliest type."""
    assert out.count("shape: (8, ") == 1, out
    frame, last = out.rsplit("\n", 2)[0], out.rsplit("\n", 2)[1]
    assert "shape: (8, " in frame
    mfu, step_ns, costliest = last.split(" ", 2)
    assert 0.3 < float(mfu) < 0.5 and 19e6 < int(step_ns) < 21e6 and costliest == "AllGather"


def run_example(args: list[str], stdin: str | None = None) -> str:
    """The example in a fresh interpreter in the repository (for its relative paths), this
    checkout's tracecomm first on the path."""
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
    done = subprocess.run(
        [sys.executable, *args],
        input=stdin,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": path},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_readme_example_runs() -> None:
    check_example_output(run_example(["-c", readme_example()]))


def test_the_readme_example_runs_as_a_plain_script(tmp_path: Path) -> None:
    """No ``if __name__ == "__main__":`` guard: the worker processes that ``jobs=2`` starts
    do not run the script again (it would print its frame once per worker, and each worker's
    own ``analyze`` would break the pool)."""
    script = tmp_path / "example.py"
    script.write_text(readme_example())
    check_example_output(run_example([str(script)]))


def test_the_readme_example_runs_from_stdin() -> None:
    """``python - < example.py``: the main module is ``<stdin>``, no file to import again."""
    check_example_output(run_example(["-"], stdin=readme_example()))


def test_the_readme_example_runs_in_a_notebook_kernel() -> None:
    """A Jupyter kernel's ``__main__`` has no file: the example runs there as in a script."""
    pytest.importorskip("ipykernel")
    manager = pytest.importorskip("jupyter_client.manager")
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
    km, kc = manager.start_new_kernel(cwd=str(REPO), env={**os.environ, "PYTHONPATH": path})
    try:
        chunks: list[str] = []

        def output(msg: dict[str, Any]) -> None:
            if msg["msg_type"] == "stream":
                chunks.append(msg["content"]["text"])
            elif msg["msg_type"] == "error":
                chunks.append("\n".join(msg["content"]["traceback"]))

        reply = kc.execute_interactive(readme_example(), timeout=300, output_hook=output)
        assert reply["content"]["status"] == "ok", "".join(chunks)
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    check_example_output("".join(chunks))


def test_a_run_under_a_gib_is_parsed_on_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    """The API's worker processes would be fresh interpreters (polars is loaded: no fork), each
    importing polars before its first rank: below 1 GiB, where the CLI's forked pool starts
    from 32 MB, the ranks go to threads; ``jobs=N`` still asks for processes."""
    from tracecomm.run import pool

    started: list[int] = []

    def new_pool(jobs: int) -> Any:
        started.append(jobs)
        raise RuntimeError("no pool here")

    monkeypatch.setattr(pool, "POOL_MIN_BYTES", 8)  # the CLI's threshold, passed
    monkeypatch.setattr(pool, "new_pool", new_pool)
    assert tracecomm.analyze(SAMPLE_RUN).ranks_frame().height == 8 and not started
    with pytest.raises(RuntimeError, match="no pool here"):
        tracecomm.analyze(SAMPLE_RUN, jobs=2)
    assert started == [2]


def test_the_frames_hold_the_cli_figures(report: tracecomm.Report, document: dict) -> None:
    ranks = report.ranks_frame()
    assert isinstance(ranks, pl.DataFrame) and ranks["rank"].to_list() == list(range(8))
    want = {r["rank"]: r["window"]["figures"]["exposed_comm_ns"] for r in document["ranks"]}
    assert dict(zip(ranks["rank"], ranks["exposed_comm_ns"], strict=True)) == want
    medians = {r["rank"]: r["step_median"]["window_ns"] for r in document["ranks"]}
    assert dict(zip(ranks["rank"], ranks["step_median_window_ns"], strict=True)) == medians
    steps = report.steps_frame()
    assert steps.height == sum(len(r["steps"]) for r in document["ranks"])
    included = steps.filter(pl.col("included"))
    assert included.group_by("rank").len()["len"].to_list() == [4] * 8
    by_type = report.by_type_frame()
    assert by_type.to_dicts() == document["by_type"]
    stragglers = report.straggler_frame()
    assert stragglers["rank"].to_list() == [r["rank"] for r in document["stragglers"]["ranks"]]


def test_options_are_the_cli_options_as_keywords(report: tracecomm.Report) -> None:
    two = tracecomm.analyze(SAMPLE_RUN, steps="13:14", model_flops_per_step="3.2e15")
    assert two.summary.steps == (13, 14)
    assert two.throughput is not None and two.throughput.mfu is not None
    assert tracecomm.analyze(SAMPLE_RUN, steps=(13, 14)).summary.steps == (13, 14)


def test_bad_options_and_inputs_raise_the_errors_the_cli_maps(tmp_path: object) -> None:
    with pytest.raises(UsageError, match="--steps"):
        tracecomm.analyze(SAMPLE_RUN, steps="7:3")
    with pytest.raises(UsageError, match="unknown option 'step'"):
        tracecomm.analyze(SAMPLE_RUN, step="3")  # type: ignore[call-arg]
    with pytest.raises(NoUsableInput):
        tracecomm.analyze(str(tmp_path))
