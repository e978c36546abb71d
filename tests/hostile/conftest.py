"""What every hostile-input case asserts: an exit code from the documented set (never 70), no
traceback, bounded time, and nothing written outside the output that was asked for."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tracecomm.cli import app

# docs/analyze.md "Exit codes": 0 ok, 1 regression / disagreement, 2 usage, 3 no input, 4 partial,
# 5 HTA failed, 74 output not written. 70 would mean a bug in tracecomm.
DOCUMENTED = {0, 1, 2, 3, 4, 5, 74}
SECONDS = 30  # a hang is a finding


@dataclass(frozen=True)
class Outcome:
    code: int
    stdout: str
    stderr: str


def snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    return {
        str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in folder.rglob("*")
        if p.is_file()
    }


def invoke(*args: str | Path, watch: Path | None = None) -> Outcome:
    """The CLI in this process; ``watch``: a folder the command must not write into."""
    before = snapshot(watch) if watch is not None else None
    result = CliRunner().invoke(app, [str(a) for a in args])
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(f"{args}: raised {result.exception!r}") from result.exception
    assert result.exit_code in DOCUMENTED, (args, result.exit_code, result.stderr[-500:])
    assert "Traceback" not in result.stderr and "Traceback" not in result.stdout
    if watch is not None:
        assert snapshot(watch) == before, f"{args} wrote into {watch}"
    return Outcome(result.exit_code, result.stdout, result.stderr)


@pytest.fixture(autouse=True)
def _bounded() -> Iterator[None]:
    # per test, for the examples CI runs (25 per property); a longer run gets as much per example
    budget = SECONDS * max(1, -(-examples(25) // 25))

    def expire(*_: object) -> None:
        raise TimeoutError(f"took more than {budget} s: unbounded work")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(budget)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@pytest.fixture(autouse=True)
def _in_a_fresh_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Run from an empty working folder, and check it stays empty (no stray file)."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    yield
    assert os.listdir(cwd) == [], f"files left in the working folder: {os.listdir(cwd)}"


def examples(default: int) -> int:
    """Hypothesis examples per property: ``--hostile-examples N`` (or TRACECOMM_HOSTILE_EXAMPLES)
    runs longer than CI does."""
    return int(os.environ.get("TRACECOMM_HOSTILE_EXAMPLES", default))
