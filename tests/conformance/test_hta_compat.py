"""`--compat hta` against HolisticTraceAnalysis 0.5.0's own numbers on the real traces
(../shared/data/traces/hta-0.5.0-reference.csv): overlap % to 0.01, every µs figure exactly."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tracecomm.cli import EXIT_OK, app

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "traces"
REFERENCE = SHARED / "hta-0.5.0-reference.csv"
ROWS = list(csv.DictReader(REFERENCE.open())) if REFERENCE.exists() else []
FOLDERS = sorted({r["dir"] for r in ROWS})


@pytest.mark.skipif(not ROWS, reason="../shared/data/traces is absent")
@pytest.mark.parametrize("folder", FOLDERS or ["(none)"])
def test_compat_hta_equals_the_reference(folder: str) -> None:
    result = CliRunner().invoke(
        app, ["analyze", str(SHARED / folder), "--compat", "hta", "--format", "json", "-q"]
    )
    assert result.exit_code in (EXIT_OK, 4), result.stderr  # 4: a partly readable file
    got = {f["rank"]: f for f in json.loads(result.stdout)["hta_compat"]}
    for row in (r for r in ROWS if r["dir"] == folder):
        mine = got[int(row["rank"])]
        expected_pct = row["comm_comp_overlap_pct"]
        if expected_pct == "":  # HTA prints NaN: no communication kernel
            assert mine["comm_comp_overlap_pct"] is None
        else:
            assert mine["comm_comp_overlap_pct"] == pytest.approx(float(expected_pct), abs=0.005)
        for figure in ("idle_us", "compute_us", "non_compute_us", "kernel_time_us"):
            assert mine[figure] == float(row[figure]), (folder, row["rank"], figure)


@pytest.mark.hta
@pytest.mark.skipif(not ROWS, reason="../shared/data/traces is absent")
def test_crosscheck_on_a_real_pair() -> None:
    pytest.importorskip("hta")
    result = CliRunner().invoke(app, ["crosscheck", str(SHARED / "hta-trace_filter"), "-q"])
    assert result.exit_code == EXIT_OK, result.stdout
    assert result.stdout.count("✓") == 10  # 2 ranks × 5 figures
