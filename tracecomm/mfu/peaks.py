"""Dense peak TFLOP/s of a device (mfu.md §7) and its peak memory bandwidth (the roofline,
metrics.md §15), from the shipped ``data/gpu-peaks.csv``."""

from __future__ import annotations

import csv
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Annotated, Any

from msgspec import Meta

from tracecomm.doc import Doc
from tracecomm.mfu.choices import DTYPES

_MIG = " MIG "
# Names that say nothing about the part (ROCm without amdgpu.ids, CUDA without a marketing
# name): only these are identified from the device properties; any other unknown name is
# reported as unknown, never guessed.
_GENERIC = re.compile(r"(NVIDIA Graphics Device|AMD Radeon Graphics|Device [0-9a-fA-F]+)?")

# Full-chip SM counts, to scale a MIG slice's peak by its share of the SMs (mfu.md §7.1).
_FULL_SMS = {
    "A100": 108,
    "A800": 108,
    "A30": 56,
    "H100 SXM5": 132,
    "H100 PCIe": 114,
    "H100 NVL (per GPU)": 132,
    "H800 SXM": 132,
    "H200 SXM": 132,
    "H200 NVL": 132,
    "GH200 (GPU part)": 132,
}

# (vendor, compute capability, SMs / CUs) -> a name the table knows: for generic device names
# (ROCm without amdgpu.ids, "NVIDIA Graphics Device"). Ambiguous keys carry a note.
_BY_PROPERTIES: dict[tuple[str, str, int], tuple[str, str | None]] = {
    ("NVIDIA", "8.0", 108): ("NVIDIA A100-SXM4-80GB", None),
    ("NVIDIA", "8.6", 72): ("NVIDIA A10", None),
    ("NVIDIA", "8.9", 58): ("NVIDIA L4", None),
    ("NVIDIA", "8.9", 142): ("NVIDIA L40S", None),
    ("NVIDIA", "8.9", 128): ("NVIDIA GeForce RTX 4090", None),
    ("NVIDIA", "9.0", 132): (
        "NVIDIA H100",
        "CC 9.0 with 132 SMs is H100/H200 SXM or GH200 (989.4 bf16) or an NVL part (835.5)",
    ),
    ("NVIDIA", "9.0", 114): ("NVIDIA H100 PCIe", None),
    ("NVIDIA", "9.0", 78): ("NVIDIA H20", None),
    ("AMD", "9.4", 304): ("AMD Instinct MI300X", "MI300X and MI325X share 304 CUs and peaks"),
    ("AMD", "9.4", 228): ("AMD Instinct MI300A", None),
    ("AMD", "9.0", 110): ("AMD Instinct MI250X", None),
    ("AMD", "9.0", 104): ("AMD Instinct MI250", None),
    ("AMD", "9.5", 256): ("AMD Instinct MI355X", "MI355X and MI350X share 256 CUs; clocks differ"),
}


@dataclass(frozen=True)
class PeakRow:
    pattern: re.Pattern[str]
    vendor: str
    model: str
    dtype: str
    tflops: float
    source: str
    confidence: str
    mem_gbps: float | None = None  # peak DRAM (HBM / GDDR) bandwidth, GB/s (1e9 B/s)
    mem_source: str = ""
    mem_confidence: str = ""


@dataclass(frozen=True)
class Bandwidth:
    """The peak memory bandwidth of a device: the roofline's slanted roof."""

    device: str
    model: str
    gbps: float
    source: str
    confidence: str
    inferred: bool = False


class Peak(Doc, frozen=True):
    """The dense peak one device contributes to MFU's denominator."""

    device: str  # the name the trace gives
    model: Annotated[str, Meta(description="the peak table's model, or 'user' for --peak-tflops")]
    dtype: str
    tflops: Annotated[float, Meta(description="dense peak per device")]
    source: str
    confidence: str  # verified / derived / unverified (the table's word), or "user"
    inferred: Annotated[
        bool, Meta(description="matched by (vendor, compute capability, SM count), not by name")
    ] = False  # matched by (vendor, CC, SM count), not by name
    note: str | None = None  # MIG scaling, an ambiguous inference


@cache
def peak_table() -> tuple[PeakRow, ...]:
    text = resources.files("tracecomm").joinpath("data/gpu-peaks.csv").read_text("utf-8")
    return tuple(
        PeakRow(
            re.compile(row["device_name_regex"]),
            row["vendor"],
            row["model"],
            row["dtype"],
            float(row["dense_tflops"]),
            row["source"],
            row["confidence"],
            float(row["mem_gbps"]) if row.get("mem_gbps") else None,
            row.get("mem_source") or "",
            row.get("mem_confidence") or "",
        )
        for row in csv.DictReader(text.splitlines())
    )


def find_bandwidth(name: str, props: Mapping[str, Any] | None = None) -> Bandwidth | None:
    """The peak memory bandwidth of the device ``name`` (matched as ``find_peak`` matches it,
    any dtype row). None for an unknown device, and for a MIG slice (its share of the memory
    bandwidth follows its memory slices, which the trace does not record)."""
    name = name.strip()
    props = props or {}
    if _MIG in name:
        return None
    for dtype in DTYPES:
        peak = find_peak(name, dtype, props)
        if peak is None:
            continue
        row = next((r for r in peak_table() if r.model == peak.model and r.mem_gbps), None)
        if row is None or row.mem_gbps is None:
            return None
        return Bandwidth(
            name, row.model, row.mem_gbps, row.mem_source, row.mem_confidence, peak.inferred
        )
    return None


def find_peak(name: str, dtype: str, props: Mapping[str, Any] | None = None) -> Peak | None:
    """The first table row whose regex matches the whole name and has ``dtype``; a MIG slice
    scaled by its share of the SMs; generic names (only) inferred from the device properties.
    None when nothing fits (no MFU is then computed unless the user gives a peak)."""
    name = name.strip()
    props = props or {}
    if _MIG in name:
        return _mig_peak(name, dtype, props)
    row = _row(name, dtype, props)
    if row is not None:
        return Peak(name, row.model, dtype, row.tflops, row.source, row.confidence)
    generic = _GENERIC.fullmatch(name) is not None
    guess = _BY_PROPERTIES.get(_key(props)) if props and generic else None
    if guess is None:
        return None
    row = _row(guess[0], dtype, props)
    if row is None:
        return None
    return Peak(
        name, row.model, dtype, row.tflops, row.source, row.confidence, inferred=True, note=guess[1]
    )


def _row(name: str, dtype: str, props: Mapping[str, Any]) -> PeakRow | None:
    rows = [r for r in peak_table() if r.dtype == dtype and r.pattern.fullmatch(name)]
    if not rows:
        return None
    # one name for two parts: MI250X has 110 CUs, MI250 104 (mfu.md §7.1)
    if name == "AMD Instinct MI250X / MI250" and props.get("numSms") == 110:
        return _row("AMD Instinct MI250X", dtype, {})
    return rows[0]


def _mig_peak(name: str, dtype: str, props: Mapping[str, Any]) -> Peak | None:
    base = name.split(_MIG)[0].strip()
    row = _row(base, dtype, props)
    sms = props.get("numSms")
    full = next((n for model, n in _FULL_SMS.items() if row and row.model.startswith(model)), None)
    if row is None or not isinstance(sms, int) or full is None:
        return None
    return Peak(
        name,
        row.model,
        dtype,
        row.tflops * sms / full,
        row.source,
        row.confidence,
        note=f"MIG slice: {row.tflops:g} × {sms}/{full} SMs",
    )


def _key(props: Mapping[str, Any]) -> tuple[str, str, int]:
    vendor = "AMD" if props.get("warpSize") == 64 else "NVIDIA"
    cc = f"{props.get('computeMajor')}.{props.get('computeMinor')}"
    sms = props.get("numSms")
    return vendor, cc, sms if isinstance(sms, int) else -1
