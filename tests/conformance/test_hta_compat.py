"""`--compat hta` (HTA 0.6.1) and `--compat hta-0.5` (HTA 0.5.0) against each release's own
numbers on the real traces (../shared/data/traces/hta-<release>-reference.csv): overlap % to
0.01, every µs figure exactly; and `crosscheck` on every shared run with the installed HTA."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.compat.live import need_hta
from tracecomm.cli import EXIT_HTA_FAILED, EXIT_OK, app
from tracecomm.compat.rules import mode_for_release

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "traces"
# --compat value → the reference CSV of the release it reproduces
REFERENCES = {"hta": "hta-0.6.1-reference.csv", "hta-0.5": "hta-0.5.0-reference.csv"}
ROWS = {
    mode: list(csv.DictReader((SHARED / name).open())) if (SHARED / name).exists() else []
    for mode, name in REFERENCES.items()
}
CASES = sorted({(mode, r["dir"]) for mode, rows in ROWS.items() for r in rows})
RUNS = sorted(p.name for p in SHARED.iterdir() if p.is_dir()) if SHARED.is_dir() else []
# HTA (0.5.0 and 0.6.1 alike) raises on these, so the reference CSVs have no row for them
HTA_FAILS = {
    "tbplugin-distributed_gloo_cpu",
    "tbplugin-distributed_gloo_gpu",
    "tbplugin-distributed_nccl",
    "tbplugin-distributed_nccl_user_annotation_has_communication",
}
absent = pytest.mark.skipif(not all(ROWS.values()), reason="../shared/data/traces is absent")


@absent
@pytest.mark.parametrize(("mode", "folder"), CASES or [("hta", "(none)")])
def test_compat_equals_the_reference(mode: str, folder: str) -> None:
    result = CliRunner().invoke(
        app, ["analyze", str(SHARED / folder), "--compat", mode, "--format", "json", "-q"]
    )
    assert result.exit_code in (EXIT_OK, 4), result.stderr  # 4: a partly readable file
    got = {f["rank"]: f for f in json.loads(result.stdout)["hta_compat"]}
    expected = [r for r in ROWS[mode] if r["dir"] == folder]
    assert sorted(got) == sorted(int(r["rank"]) for r in expected)
    for row in expected:
        mine = got[int(row["rank"])]
        assert mine["hta_version"] == REFERENCES[mode].split("-")[1]
        expected_pct = row["comm_comp_overlap_pct"]
        if expected_pct == "":  # HTA prints NaN: no communication kernel
            assert mine["comm_comp_overlap_pct"] is None
        else:
            assert mine["comm_comp_overlap_pct"] == pytest.approx(float(expected_pct), abs=0.005)
        for figure in ("idle_us", "compute_us", "non_compute_us", "kernel_time_us"):
            assert mine[figure] == float(row[figure]), (mode, folder, row["rank"], figure)


@absent
def test_the_references_cover_every_run_hta_can_read() -> None:
    """Both CSVs name the same runs: every shared Kineto run of HTA's and tb_plugin's but the
    four HTA fails on (the ByteDance folder is a 64-rank conversion, crosschecked below)."""
    for rows in ROWS.values():
        runs = {r["dir"] for r in rows}
        assert runs == {r for r in RUNS if r.startswith("hta-")}
        assert not runs & HTA_FAILS


@absent
def test_the_releases_differ_only_on_alexnet() -> None:
    """0.6.1 types AlexNet's `Stream Wait Event` syncs (cuda_sync on a stream) as non-compute;
    0.5.0 as compute (hta/common/types.py): 7 µs move, nothing else changes."""

    def key(row: dict[str, str]) -> tuple[str, str]:
        return row["dir"], row["rank"]

    new = {key(r): r for r in ROWS["hta"]}
    old = {key(r): r for r in ROWS["hta-0.5"]}
    assert new.keys() == old.keys()
    differ = {k for k in new if new[k] != old[k]}
    assert differ == {("hta-critical_path_alexnet_cuda_sync", "0")}
    a, b = new[next(iter(differ))], old[next(iter(differ))]
    assert float(b["compute_us"]) - float(a["compute_us"]) == 7.0
    assert float(a["non_compute_us"]) - float(b["non_compute_us"]) == 7.0


def test_hta_06_is_the_default_and_the_same_as_hta() -> None:
    from tracecomm.compat.rules import MODES

    assert MODES["hta"] is MODES["hta-0.6"] and MODES["hta"].release == "0.6.1"


@pytest.mark.hta
@absent
@pytest.mark.parametrize("folder", RUNS or ["(none)"])
def test_crosscheck_on_every_shared_run(folder: str) -> None:
    """Exit 0 (every figure agrees), or 5 with HTA's own exception where HTA fails."""
    version = need_hta()
    result = CliRunner().invoke(app, ["crosscheck", str(SHARED / folder), "-q"])
    if folder in HTA_FAILS:
        assert result.exit_code == EXIT_HTA_FAILED, result.stdout
        assert result.stderr == (
            f"tracecomm: error: HTA {version} failed on {SHARED / folder}: "
            "IndexError: single positional indexer is out-of-bounds\n"
        )
        assert "Traceback" not in result.stdout
    else:
        assert result.exit_code == EXIT_OK, result.stdout
        assert "✗" not in result.stdout and "✓" in result.stdout


@pytest.mark.hta
@absent
def test_crosscheck_on_a_real_pair() -> None:
    version = need_hta()
    result = CliRunner().invoke(app, ["crosscheck", str(SHARED / "hta-trace_filter"), "-q"])
    assert result.exit_code == EXIT_OK, result.stdout
    assert result.stdout.count("✓") == 10  # 2 ranks × 5 figures
    mode, _ = mode_for_release(version)
    assert f"--compat {mode} against HTA {version}" in " ".join(result.stdout.split())


@pytest.mark.hta
@absent
@pytest.mark.parametrize("release", ["0.5", "0.6"])
def test_crosscheck_alexnet_with_each_release(release: str) -> None:
    """Runs only where that release is installed (CI: 0.6.1; the 0.5.0 venv: 0.5)."""
    need_hta(release)
    folder = SHARED / "hta-critical_path_alexnet_cuda_sync"
    result = CliRunner().invoke(app, ["crosscheck", str(folder), "-q"])
    assert result.exit_code == EXIT_OK, result.stdout
    compute = "10,637" if release == "0.5" else "10,630"
    line = next(x for x in result.stdout.splitlines() if "compute_us" in x and "non" not in x)
    assert line.count(compute) == 2  # tracecomm and HTA
