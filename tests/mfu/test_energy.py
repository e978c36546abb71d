"""Energy from GPU power logs: generated logs against hand-computed joules."""

from __future__ import annotations

import statistics
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import analyze_json
from tracecomm.engine.energy import window_energy
from tracecomm.engine.intervals import coverage
from tracecomm.ingest.power import PowerLogError, PowerSeries, is_power_log, load_power_log
from tracecomm.synth import expected_run, fsdp_run, write_run
from tracecomm.synth.power import power_log


def watts_of(gpu: int) -> float:
    return 300.0 + 10.0 * gpu


def test_state_split_of_a_power_step_by_hand() -> None:
    """compute [0,100), comm [50,150), memory [200,250); 100 W until t=120, then 300 W."""
    starts = np.array([0, 50, 200], dtype=np.int64)
    ends = np.array([100, 150, 250], dtype=np.int64)
    cov = coverage(starts, ends, np.array([0, 1, 2]), 3)
    power = PowerSeries(np.array([0, 120, 400], dtype=np.int64), np.array([100.0, 300.0, 300.0]))
    c = cov.covered
    e = window_energy(cov, (c[:, 0], c[:, 1], c[:, 2]), [(0, 300)], power)
    assert e is not None
    assert e.compute_j == pytest.approx(100 * 100e-9)
    assert e.exposed_comm_j == pytest.approx(100 * 20e-9 + 300 * 30e-9)  # [100, 150)
    assert e.exposed_memory_j == pytest.approx(300 * 50e-9)
    assert e.idle_j == pytest.approx(300 * 100e-9)  # [150, 200) and [250, 300)
    assert e.joules == pytest.approx(100 * 120e-9 + 300 * 180e-9)
    # a window the samples do not reach has no energy
    assert window_energy(cov, (c[:, 0], c[:, 1], c[:, 2]), [(-50, 300)], power) is None


def test_generated_run_energy_equals_hand_computed(tmp_path: Path) -> None:
    spec = fsdp_run(world_size=4, steps=4, seed=1, jitter=0.0)
    write_run(spec, tmp_path)
    (tmp_path / "gpu-power.csv").write_text(power_log(spec, "node0", lambda g, t: watts_of(g)))
    doc = analyze_json(tmp_path, "--tokens-per-step", "4096", "--model-flops-per-step", "1e12")
    energy = doc["throughput"]["energy"]
    assert energy["gpus"] == 4 and energy["logs"] == [str(tmp_path / "gpu-power.csv")]
    expected = expected_run(spec)
    steps = doc["throughput"]["steps"]

    def per_step(field: str) -> float:
        return statistics.median(
            sum(watts_of(r) * getattr(e.steps[s], field) * 1e-9 for r, e in expected.items())
            for s in steps
        )

    assert energy["energy_per_step_j"] == pytest.approx(per_step("window_ns"), rel=1e-12)
    assert energy["compute_j_per_step"] == pytest.approx(per_step("compute_ns"), rel=1e-12)
    assert energy["exposed_comm_j_per_step"] == pytest.approx(per_step("exposed_comm_ns"))
    assert energy["exposed_memory_j_per_step"] == pytest.approx(per_step("exposed_memory_ns"))
    assert energy["idle_j_per_step"] == pytest.approx(per_step("idle_ns"), rel=1e-9)
    windows = {r: e.total.window_ns for r, e in expected.items()}
    avg = sum(watts_of(r) * w for r, w in windows.items()) / sum(windows.values())
    assert energy["avg_power_w"] == pytest.approx(avg, rel=1e-12)
    assert energy["tokens_per_j"] == pytest.approx(4096 / per_step("window_ns"), rel=1e-12)
    # and per rank, each window's energy in the JSON
    rank0 = doc["ranks"][0]["window"]["energy"]
    assert rank0["joules"] == pytest.approx(watts_of(0) * windows[0] * 1e-9, rel=1e-12)


def test_energy_of_a_subset_of_gpus_has_no_tokens_per_joule(tmp_path: Path) -> None:
    spec = fsdp_run(world_size=2, steps=3, seed=2)
    write_run(spec, tmp_path)
    log = power_log(spec, "node0", lambda g, t: watts_of(g)).splitlines()
    (tmp_path / "power.csv").write_text("\n".join(line for line in log if ", 1, " not in line))
    energy = analyze_json(tmp_path, "--tokens-per-step", "10")["throughput"]["energy"]
    assert energy["gpus"] == 1 and energy["tokens_per_j"] is None
    assert energy["missing"] == "power for 1 of 2 GPUs"


def test_power_logs_in_other_formats(tmp_path: Path) -> None:
    dcgm = tmp_path / "dcgm.csv"
    dcgm.write_text(
        "timestamp,hostname,gpu,DCGM_FI_DEV_POWER_USAGE\n"
        "1764406800000000,node7,0,250.5\n1764406800100000,node7,0,N/A\n"
        "1764406800200000,node7,0,260\n"
    )
    assert is_power_log(dcgm)
    log = load_power_log(dcgm)
    series = log.series["node7"][0]
    assert series.t_ns.tolist() == [1764406800 * 10**9, 1764406800200 * 10**6]  # µs by size
    assert series.watts.tolist() == [250.5, 260.0]
    smi = tmp_path / "smi.csv"
    smi.write_text(
        "timestamp, index, power.draw [W]\n2025/12/01 00:00:00.250, 3, 701.33 W\n"
        "2025/12/01 00:00:01.250, 3, [N/A]\n"
    )
    only = load_power_log(smi).series[None][3]
    assert only.t_ns.tolist() == [1764547200250 * 10**6] and only.watts.tolist() == [701.33]
    bad = tmp_path / "bad.csv"
    bad.write_text("timestamp, index, power.draw [W]\nyesterday, 0, 5 W\n")
    with pytest.raises(PowerLogError, match="line 2"):
        load_power_log(bad)
    assert not is_power_log(tmp_path / "missing.csv")
