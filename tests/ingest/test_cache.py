"""--cache: a repeat run reads Parquet instead of JSON and reports the same figures."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tracecomm import pipeline
from tracecomm.cli import EXIT_OK, app
from tracecomm.synth import fsdp_run, write_run


def analyze(run: Path, *extra: str) -> dict[str, object]:
    result = CliRunner().invoke(app, ["analyze", str(run), "-f", "json", "-q", *extra])
    assert result.exit_code == EXIT_OK, result.stderr
    doc: dict[str, object] = json.loads(result.stdout)
    return doc


@pytest.fixture
def run(tmp_path: Path) -> Path:
    path = tmp_path / "run"
    write_run(fsdp_run(world_size=4, steps=3, seed=6), path)
    return path


def test_a_cached_run_gives_the_same_figures(
    run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    first = analyze(run, "--cache", str(cache), "-j", "1")
    assert len([p for p in cache.iterdir() if not p.name.startswith(".")]) == 4
    assert analyze(run) == first  # and the same without the cache

    def no_parse(path: str) -> None:
        raise AssertionError(f"{path} parsed again")

    monkeypatch.setattr(pipeline, "load_rank", no_parse)
    assert analyze(run, "--cache", str(cache), "-j", "1") == first


def test_a_changed_file_is_parsed_again(run: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    analyze(run, "--cache", str(cache))
    victim = sorted(run.iterdir())[0]
    stat = victim.stat()
    os.utime(victim, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    analyze(run, "--cache", str(cache))
    assert len([p for p in cache.iterdir() if not p.name.startswith(".")]) == 5


def test_jobs_do_not_change_the_figures(run: Path) -> None:
    assert analyze(run, "-j", "1") == analyze(run, "-j", "2")
