"""`tracecomm crosscheck`: HTA run live next to the --compat mode of its release."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.compat.live import need_hta
from tests.conftest import SAMPLE_RUN
from tracecomm.cli import EXIT_HTA_FAILED, EXIT_OK, EXIT_USAGE, app
from tracecomm.compat import crosscheck
from tracecomm.compat.hta import HtaFigures
from tracecomm.compat.rules import mode_for_release
from tracecomm.synth import fsdp_run, fsdp_run_of_size, write_run


@pytest.mark.hta
@pytest.mark.parametrize("run", ["sample", "generated"])
def test_live_hta_agrees(tmp_path: Path, run: str) -> None:
    version = need_hta()
    if run == "generated":
        write_run(fsdp_run(world_size=4, steps=3, seed=9, time_format="epoch_us"), tmp_path)
        folder = tmp_path
    else:
        folder = SAMPLE_RUN
    result = CliRunner().invoke(app, ["crosscheck", str(folder)])
    assert result.exit_code == EXIT_OK, result.stdout
    assert "kernel_time_us" in result.stdout and "✗" not in result.stdout
    mode, _ = mode_for_release(version)
    assert f"--compat {mode} against HTA {version} run live" in " ".join(result.stdout.split())


def _fake_installed(version: str = "0.6.1") -> crosscheck.InstalledHta:
    return crosscheck.InstalledHta(version, mode_for_release(version)[0])


def test_a_difference_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    def fake(run: Path, version: str = "", files: object = None) -> dict[int, HtaFigures]:
        return {r: HtaFigures(r, 50.0, 1, 2, 3, 6, version) for r in range(8)}

    monkeypatch.setattr(crosscheck, "installed", _fake_installed)
    monkeypatch.setattr(crosscheck, "run_hta", fake)
    result = CliRunner().invoke(app, ["crosscheck", str(SAMPLE_RUN)])
    assert result.exit_code == 1 and "✗" in result.stdout
    assert "--compat hta against HTA 0.6.1" in " ".join(result.stdout.split())


def test_an_hta_failure_is_reported_as_htas(monkeypatch: pytest.MonkeyPatch) -> None:
    def fake(run: Path, version: str = "", files: object = None) -> dict[int, HtaFigures]:
        try:
            [].pop()  # what HTA does, in effect, on a rank with no kernel
        except IndexError as exc:
            raise crosscheck.HtaFailed(version, run, exc) from exc
        return {}

    monkeypatch.setattr(crosscheck, "installed", _fake_installed)
    monkeypatch.setattr(crosscheck, "run_hta", fake)
    result = CliRunner().invoke(app, ["crosscheck", str(SAMPLE_RUN), "-q"])
    assert result.exit_code == EXIT_HTA_FAILED == 5
    assert result.stderr == (
        f"tracecomm: error: HTA 0.6.1 failed on {SAMPLE_RUN}: IndexError: pop from empty list\n"
    )
    assert result.stdout == ""


def test_an_older_hta_is_compared_with_its_own_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = {}

    def fake(run: Path, version: str = "", files: object = None) -> dict[int, HtaFigures]:
        seen["version"] = version
        return {}

    monkeypatch.setattr(crosscheck, "installed", lambda: _fake_installed("0.5.0"))
    monkeypatch.setattr(crosscheck, "run_hta", fake)
    result = CliRunner().invoke(app, ["crosscheck", str(SAMPLE_RUN), "-q"])
    assert seen == {"version": "0.5.0"}
    assert "--compat hta-0.5 against HTA 0.5.0" in " ".join(result.stdout.split())
    assert result.exit_code == 1  # HTA gave no rank at all: every figure differs


def test_one_line_names_the_exception() -> None:
    try:
        raise ValueError("a\nmulti-line   message")
    except ValueError as exc:
        assert crosscheck.one_line(exc) == "ValueError: a multi-line message"
    try:
        raise AssertionError
    except AssertionError as exc:
        line = crosscheck.one_line(exc)
    assert line.startswith("AssertionError: (no message; raised in ") and "\n" not in line
    assert len(crosscheck.one_line(ValueError("x" * 5000))) < 450


def test_without_the_extra_it_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "hta.trace_analysis", None)  # import fails
    result = CliRunner().invoke(app, ["crosscheck", str(SAMPLE_RUN)])
    assert result.exit_code == EXIT_USAGE
    assert "pip install 'tracecomm[hta]'" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.hta
def test_hta_reads_the_files_tracecomm_read(tmp_path: Path) -> None:
    """HTA's own discovery takes any top-level .json as a trace (rank from its first "rank": N);
    crosscheck gives HTA tracecomm's rank files and says where the two discoveries differ."""
    need_hta()
    write_run(fsdp_run(world_size=2, steps=3, seed=3, time_format="epoch_us"), tmp_path)
    (tmp_path / "config.json").write_text('{"rank": 5, "lr": 0.1}')
    result = CliRunner().invoke(app, ["crosscheck", str(tmp_path)])
    assert result.exit_code == EXIT_OK, result.stdout + result.stderr
    assert "rank 5: config.json instead of no file" in " ".join(result.stderr.split())


@pytest.mark.hta
def test_a_mid_size_rank_runs_or_fails_as_htas(tmp_path: Path) -> None:
    """A rank of 32,768+ events whose correlation ids stay below 32,768: under pandas 3 HTA (0.5.0
    and 0.6.1 alike) raises TypeError in transform_correlation_to_index, hence the extra's
    pandas < 3. Either way crosscheck ends as HTA's run ends, never as an internal error."""
    version = need_hta()
    import pandas

    run = fsdp_run_of_size(10, world_size=2, seed=0, gzip=False)
    write_run(run, tmp_path)
    result = CliRunner().invoke(app, ["crosscheck", str(tmp_path), "-q"])
    if int(pandas.__version__.split(".")[0]) >= 3:
        assert result.exit_code == EXIT_HTA_FAILED, result.stdout
        assert f"HTA {version} failed on {tmp_path}: TypeError: Invalid value" in result.stderr
    else:
        assert result.exit_code == EXIT_OK, result.stdout + result.stderr
