"""Device names to dense peaks (mfu.md §7, data/gpu-peaks.csv shipped with the package)."""

from __future__ import annotations

import pytest

from tracecomm.mfu.peaks import find_bandwidth, find_peak, peak_table

H100_PROPS = {"computeMajor": 9, "computeMinor": 0, "numSms": 132, "warpSize": 32}


@pytest.mark.parametrize(
    ("name", "dtype", "tflops", "model"),
    [
        ("NVIDIA A100-SXM4-80GB", "bf16", 312.0, "A100 SXM4/PCIe 40/80GB"),
        ("NVIDIA A100-PCIE-40GB", "tf32", 156.0, "A100 SXM4/PCIe 40/80GB"),
        ("NVIDIA A100 80GB PCIe", "bf16", 312.0, "A100 SXM4/PCIe 40/80GB"),
        ("NVIDIA H100 80GB HBM3", "bf16", 989.4, "H100 SXM5"),
        ("NVIDIA H100 80GB HBM3", "fp8", 1978.9, "H100 SXM5"),
        ("NVIDIA H100", "fp32", 67.0, "H100 SXM5"),
        ("NVIDIA H100 PCIe", "bf16", 756.0, "H100 PCIe"),
        ("NVIDIA H100 NVL", "bf16", 835.5, "H100 NVL (per GPU)"),
        ("AMD Instinct MI300X", "bf16", 1307.4, "Instinct MI300X"),
        ("AMD Instinct MI300X OAM", "fp8", 2614.9, "Instinct MI300X"),
        ("  NVIDIA H200 ", "bf16", 989.4, "H200 SXM"),
    ],
)
def test_names_map_as_the_table_says(name: str, dtype: str, tflops: float, model: str) -> None:
    peak = find_peak(name, dtype)
    assert peak is not None
    assert (peak.tflops, peak.model, peak.inferred) == (tflops, model, False)


def test_the_table_ships_with_the_package() -> None:
    assert len(peak_table()) == 175
    assert {r.dtype for r in peak_table()} >= {"bf16", "fp16", "fp8", "tf32", "fp32"}


def test_unknown_devices_and_missing_dtypes_give_no_peak() -> None:
    # a specific name the table lacks is never guessed, even with properties that fit an H100
    assert find_peak("NVIDIA Quantum 9000", "bf16", H100_PROPS) is None
    assert find_peak("Tesla V100-SXM2-16GB", "bf16") is None  # no bf16 row on V100
    assert find_peak("NVIDIA H100 PCIe Extra", "bf16") is None  # anchored both ends


def test_generic_names_are_inferred_from_properties() -> None:
    peak = find_peak("NVIDIA Graphics Device", "bf16", H100_PROPS)
    assert peak is not None and peak.inferred and peak.tflops == 989.4
    assert "NVL" in (peak.note or "")  # the 132-SM ambiguity is stated
    amd = {"computeMajor": 9, "computeMinor": 4, "numSms": 304, "warpSize": 64}
    mi300 = find_peak("AMD Radeon Graphics", "bf16", amd)
    assert mi300 is not None and mi300.tflops == 1307.4 and mi300.inferred
    assert find_peak("AMD Radeon Graphics", "bf16", {**amd, "numSms": 7}) is None


def test_mig_slices_scale_by_their_share_of_sms() -> None:
    peak = find_peak("NVIDIA A100-SXM4-40GB MIG 3g.20gb", "bf16", {"numSms": 42})
    assert peak is not None and peak.tflops == pytest.approx(312 * 42 / 108)
    assert round(peak.tflops, 1) == 121.3  # mfu.md §7.1
    assert find_peak("NVIDIA A100-SXM4-40GB MIG 3g.20gb", "bf16", {}) is None


def test_mi250_name_shared_by_two_parts() -> None:
    shared = "AMD Instinct MI250X / MI250"
    mi250x, mi250 = find_peak(shared, "bf16", {"numSms": 110}), find_peak(shared, "bf16", {})
    assert mi250x is not None and mi250x.tflops == 191.5
    assert mi250 is not None and mi250.tflops == 181.05


@pytest.mark.parametrize(
    ("name", "gbps"),
    [
        ("NVIDIA H100 80GB HBM3", 3350.0),
        ("NVIDIA H100 PCIe", 2000.0),
        ("NVIDIA H200", 4800.0),
        ("NVIDIA A100-SXM4-80GB", 2039.0),
        ("AMD Instinct MI300X", 5300.0),
        ("Tesla V100-SXM2-16GB", 900.0),
    ],
)
def test_memory_bandwidth_of_a_device(name: str, gbps: float) -> None:
    bw = find_bandwidth(name)
    assert bw is not None and bw.gbps == gbps and bw.source


def test_every_row_has_a_memory_bandwidth_with_its_source() -> None:
    assert all(r.mem_gbps and r.mem_source and r.mem_confidence for r in peak_table())


def test_no_bandwidth_for_unknown_devices_or_mig_slices() -> None:
    assert find_bandwidth("NVIDIA Quantum 9000") is None
    assert find_bandwidth("NVIDIA A100-SXM4-40GB MIG 3g.20gb", {"numSms": 42}) is None
    inferred = find_bandwidth("NVIDIA Graphics Device", H100_PROPS)
    assert inferred is not None and inferred.inferred and inferred.gbps == 3350.0
