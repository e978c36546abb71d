"""`tracecomm crosscheck`: HTA run live next to --compat hta (needs the hta extra)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.conftest import SAMPLE_RUN
from tracecomm.cli import EXIT_OK, EXIT_USAGE, app
from tracecomm.compat.hta import HtaFigures
from tracecomm.synth import fsdp_run, write_run


@pytest.mark.hta
@pytest.mark.parametrize("run", ["sample", "generated"])
def test_live_hta_agrees(tmp_path: Path, run: str) -> None:
    pytest.importorskip("hta")
    if run == "generated":
        write_run(fsdp_run(world_size=4, steps=3, seed=9, time_format="epoch_us"), tmp_path)
        folder = tmp_path
    else:
        folder = SAMPLE_RUN
    result = CliRunner().invoke(app, ["crosscheck", str(folder)])
    assert result.exit_code == EXIT_OK, result.stdout
    assert "kernel_time_us" in result.stdout and "✗" not in result.stdout


def test_a_difference_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    from tracecomm.compat import crosscheck

    def fake(run: Path) -> dict[int, HtaFigures]:
        return {r: HtaFigures(r, 50.0, 1, 2, 3, 6) for r in range(8)}

    monkeypatch.setattr(crosscheck, "run_hta", fake)
    result = CliRunner().invoke(app, ["crosscheck", str(SAMPLE_RUN)])
    assert result.exit_code == 1 and "✗" in result.stdout


def test_without_the_extra_it_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "hta.trace_analysis", None)  # import fails
    result = CliRunner().invoke(app, ["crosscheck", str(SAMPLE_RUN)])
    assert result.exit_code == EXIT_USAGE
    assert "pip install 'tracecomm[hta]'" in result.stderr and "Traceback" not in result.stderr
