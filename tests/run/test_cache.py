"""--cache: a repeat run reads Parquet instead of JSON and reports the same figures."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from typer.testing import CliRunner

from tests.conftest import analyze_json
from tracecomm.cli import EXIT_PARTIAL, app
from tracecomm.ingest import load as ingest_load
from tracecomm.run import session
from tracecomm.synth import fsdp_run, write_run


@pytest.fixture
def run(tmp_path: Path) -> Path:
    path = tmp_path / "run"
    write_run(fsdp_run(world_size=4, steps=3, seed=6), path)
    return path


def entries(cache: Path) -> list[Path]:
    """Per-rank entries (the whole-command memo lives in ``memo/``)."""
    return [p for p in cache.iterdir() if not p.name.startswith(".") and p.name != "memo"]


def no_parse(monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(path: str) -> None:
        raise AssertionError(f"{path} parsed again")

    monkeypatch.setattr(ingest_load, "load_rank", fail)


def test_a_cached_run_gives_the_same_figures(
    run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    first = analyze_json(run, "-q", "--cache", str(cache), "-j", "1")
    assert len(entries(cache)) == 4
    assert analyze_json(run, "-q") == first  # and the same without the cache
    no_parse(monkeypatch)
    # other output options: the memo misses, the per-rank entries serve
    again = analyze_json(run, "-q", "--cache", str(cache), "-j", "1", "--top", "3")
    assert again["ranks"] == first["ranks"] and again["summary"] == first["summary"]


def test_a_changed_file_is_parsed_again(run: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    analyze_json(run, "-q", "--cache", str(cache))
    victim = sorted(run.iterdir())[0]
    stat = victim.stat()
    os.utime(victim, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    analyze_json(run, "-q", "--cache", str(cache))
    assert len(entries(cache)) == 5


def invoke(*args: str) -> Any:
    return CliRunner().invoke(app, list(args))


def test_an_identical_command_replays_its_output_without_analyzing(
    run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """stdout, the warnings and the exit code, byte for byte; nothing is parsed or analyzed."""
    cache = tmp_path / "cache"
    broken = run / "rank9.pt.trace.json.gz"
    broken.write_bytes(b"\x1f\x8b not gzip")
    args = ("analyze", str(run), "-f", "json", "--cache", str(cache))
    first = invoke(*args)
    assert first.exit_code == EXIT_PARTIAL and "rank9" in first.stderr
    assert len(list((cache / "memo").iterdir())) == 1

    def fail(*a: object, **k: object) -> None:
        raise AssertionError("analyzed again")

    monkeypatch.setattr(session, "analyze_run", fail)
    second = invoke(*args)
    assert (second.stdout_bytes, second.stderr, second.exit_code) == (
        first.stdout_bytes,
        first.stderr,
        first.exit_code,
    )
    for fmt in ("csv", "terminal"):  # each format is its own entry
        monkeypatch.undo()
        out = invoke("analyze", str(run), "-f", fmt, "--cache", str(cache))
        monkeypatch.setattr(session, "analyze_run", fail)
        assert invoke("analyze", str(run), "-f", fmt, "--cache", str(cache)).stdout == out.stdout


@pytest.mark.parametrize("change", ["touch", "content", "new file", "option", "settings"])
def test_the_memo_misses_when_anything_it_depends_on_changes(
    run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, change: str
) -> None:
    cache = tmp_path / "cache"
    args = ["analyze", str(run), "-f", "json", "-q", "--cache", str(cache)]
    invoke(*args)
    victim = sorted(run.iterdir())[0]
    if change == "touch":
        stat = victim.stat()
        os.utime(victim, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1))
    elif change == "content":  # same size and mtime, other bytes
        stat = victim.stat()
        data = bytearray(victim.read_bytes())
        data[len(data) // 2] ^= 0xFF
        victim.write_bytes(bytes(data))
        os.utime(victim, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    elif change == "new file":
        (run / "notes.txt").write_text("x")
    elif change == "option":
        args.append("--no-clock-align")
    else:
        (run / "tracecomm.toml").write_text("[model]\nflops-per-step = 1000000000000\n")
    calls: list[object] = []
    real = session.analyze_run

    def counted(*a: Any, **k: Any) -> Any:
        calls.append(1)
        return real(*a, **k)

    monkeypatch.setattr(session, "analyze_run", counted)
    invoke(*args)
    assert calls == [1]


def test_a_check_is_replayed_with_its_exit_code(run: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    slower = tmp_path / "slower"
    write_run(fsdp_run(world_size=4, steps=3, seed=6, slowdown=0.5), slower)
    args = ("check", str(slower), "--baseline", str(run), "--cache", str(cache), "-f", "json")
    first = invoke(*args)
    assert first.exit_code == 1  # a regression
    second = invoke(*args)
    assert (second.exit_code, second.stdout) == (1, first.stdout)
    assert len(list((cache / "memo").iterdir())) == 1


def test_jobs_do_not_change_the_figures(run: Path) -> None:
    assert analyze_json(run, "-q", "-j", "1") == analyze_json(run, "-q", "-j", "2")


def test_a_damaged_entry_that_still_decodes_is_a_miss(run: Path, tmp_path: Path) -> None:
    """A stored frame or result altered into another valid file (a flipped byte that the
    decoder does not notice): its checksum says so, the trace is parsed again, the figures are
    right, and one warning says why."""
    cache = tmp_path / "cache"
    clean = analyze_json(run, "-q")
    analyze_json(run, "-q", "--cache", str(cache), "-j", "1")
    entry = entries(cache)[0]
    device = entry / "device.parquet"
    frame = pl.read_parquet(device)
    frame.with_columns(pl.col("end_ns") + 1_000_000).write_parquet(device)
    for result in entry.glob("result-*.tcsum.parquet"):
        # another valid summary in its place: the next rank's
        other = next(entries(cache)[1].glob("result-*.tcsum.parquet"))
        result.write_bytes(other.read_bytes())
    shutil.rmtree(cache / "memo", ignore_errors=True)  # the entries are what is damaged here
    got, stderr = analyze_json(run, "--cache", str(cache), with_stderr=True)
    assert got["ranks"] == clean["ranks"]
    assert "does not match its checksum" in stderr
