"""Step time, tokens/s, MFU (metrics.md §8, mfu.md §2) and where the gap to the dashboard went."""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Annotated

from msgspec import Meta

from tracecomm.analysis.rank import RankReport, RankResult
from tracecomm.doc import Doc, Percent
from tracecomm.mfu.inputs import ModelFlops
from tracecomm.mfu.peaks import Peak, find_peak

HOW_TO_GIVE_FLOPS = (
    "MFU needs the model's FLOPs: --model-flops-per-step N, or --flops-per-token F with "
    "--tokens-per-step T, or --model-config config.json with --seq-len and --global-batch "
    "(or the same keys in tracecomm.toml in the run folder)"
)
UNRECORDED = "(not recorded)"  # the device name of ranks whose trace names none


class DevicePeak(Doc, frozen=True):
    """One device name of the run, how many ranks use it, and its dense peak (None: unknown)."""

    name: str
    ranks: int
    peak: Peak | None


class GapShares(Doc, frozen=True):
    """One group of ranks doing the same work: where its GPU time went, in % of its analysis
    window (sums over the group's ranks). ``mfu_pct`` is the run's MFU; the compute above it
    ran below peak. The five shares add up to 100 (the compute share splits into two)."""

    ranks: tuple[int, ...]
    busy_pct: float
    mfu_pct: float | None  # the run's MFU; the bar shows at most the compute share of it
    compute_pct: float
    compute_below_peak_pct: float  # all compute when there is no MFU
    exposed_comm_pct: float
    exposed_comm_by_type_pct: dict[str, float]  # types may overlap (two streams)
    exposed_memory_pct: float
    idle_pct: float


class EnergyReport(Doc, frozen=True):
    """From GPU power logs: per step, sums over the GPUs with samples, medians over steps."""

    gpus: int  # GPUs (ranks) whose samples cover every step used
    logs: tuple[str, ...]
    energy_per_step_j: Annotated[
        float,
        Meta(description="median over steps of the sum over GPUs of each step window's energy"),
    ]
    compute_j_per_step: float
    exposed_comm_j_per_step: float
    exposed_memory_j_per_step: float
    idle_j_per_step: float
    avg_power_w: Annotated[float, Meta(description="per GPU over the analysis windows")]
    tokens_per_j: float | None  # needs every GPU of the job and tokens per step
    missing: str | None  # why a figure is absent or partial
    # shares of energy_per_step_j (each a median of its own: they need not add up to 100)
    idle_pct: Annotated[Percent | None, Meta(description="share of energy_per_step_j, in %")] = None
    exposed_comm_pct: Annotated[
        Percent | None, Meta(description="share of energy_per_step_j, in %")
    ] = None
    exposed_memory_pct: Annotated[
        Percent | None, Meta(description="share of energy_per_step_j, in %")
    ] = None


class ObservedReport(Doc, frozen=True):
    """FLOPs counted from recorded op shapes (metrics.md §8): a lower bound, labelled so."""

    ranks: int  # ranks whose trace recorded shapes
    flops_per_step: float  # summed over those ranks, each rank's total over its steps
    tflops_while_running: float  # counted FLOPs / the time their kernels ran
    coverage_pct: float  # share of compute-kernel time whose ops had a formula
    hfu_lower_bound: float | None  # flops per step / (step time × those ranks' peaks)
    by_family: dict[str, int]  # over all steps and ranks
    attention_causal_unknown_flops: int  # counted as a full square


class Throughput(Doc, frozen=True):
    steps: Annotated[
        tuple[int, ...],
        Meta(
            description=(
                "the steps step time is taken over (the first profiled one dropped when"
                " there are more than two)"
            )
        ),
    ]
    step_time_ns: int | None  # median over those steps of the slowest rank's ProfilerStep span
    worst_step_ns: int | None
    worst_step: int | None
    dtype: str
    devices: tuple[DevicePeak, ...]
    device_count: Annotated[
        int, Meta(description="one device per rank: world_size, else the analyzed ranks")
    ]
    assumed_ranks: Annotated[
        int, Meta(description="ranks without a trace, assumed to run the most common device")
    ]
    peak_total_tflops: float | None  # Σ over devices; None when a device has no peak
    flops: ModelFlops | None
    tokens_per_s: float | None
    achieved_tflops_per_device: float | None
    mfu: Annotated[float | None, Meta(description="a fraction of the summed dense peak")]
    # False: MFU over 100 % or over a group's compute share, so the FLOPs input is wrong (the
    # views print it only as impossible, the bottom line's first finding says why)
    mfu_possible: Annotated[
        bool | None,
        Meta(
            description=(
                "false: MFU over 100 % or over a group's compute share, so the FLOPs input "
                "is wrong (shown only as impossible); null without MFU"
            )
        ),
    ]
    hfu: Annotated[
        float | None, Meta(description="with full activation recompute (model config only)")
    ]
    gaps: tuple[GapShares, ...]
    missing: Annotated[str | None, Meta(description="why MFU is not computed")]
    warnings: tuple[str, ...] = ()
    energy: EnergyReport | None = None
    observed: Annotated[
        ObservedReport | None,
        Meta(description="observed TFLOP/s from recorded shapes: a lower bound, not MFU"),
    ] = None


def throughput(
    ranks: Sequence[RankReport],
    results: Mapping[int, RankResult],
    world_size: int | None,
    flops: ModelFlops | None,
    dtype: str = "bf16",
    peak_tflops: float | None = None,
) -> Throughput | None:
    """None when no rank has an included step with a ProfilerStep span."""
    spans = _slowest_spans(ranks)
    if not spans:
        return None
    steps = sorted(spans)
    if len(steps) > 2:
        steps = steps[1:]  # the first profiled step warms up (metrics.md §8)
    times = [spans[s] for s in steps]
    step_time = math.floor(statistics.median(times) + 0.5)
    worst = max(steps, key=lambda s: (spans[s], s))
    devices = _device_peaks(ranks, results, dtype, peak_tflops)
    count = world_size if world_size and world_size >= len(ranks) else len(ranks)
    assumed = count - len(ranks)
    total = _peak_total(devices, assumed)
    missing = _why_no_mfu(flops, devices)
    seconds = step_time / 1e9
    mfu = flops.per_step / (seconds * total * 1e12) if flops and total and not missing else None
    hfu = (
        flops.hfu_per_step / (seconds * total * 1e12)
        if flops and flops.hfu_per_step and total and not missing
        else None
    )
    signatures = {rank: r.breakdown.work_signature for rank, r in results.items()}
    possible = None if mfu is None else _mfu_possible(mfu, _gaps(ranks, signatures, None))
    gaps = _gaps(ranks, signatures, mfu if possible else None)
    energy, energy_warnings = _energy(ranks, steps, flops.tokens_per_step if flops else None, count)
    return Throughput(
        steps=tuple(steps),
        step_time_ns=step_time,
        worst_step_ns=spans[worst],
        worst_step=worst,
        dtype=dtype,
        devices=devices,
        device_count=count,
        assumed_ranks=assumed,
        peak_total_tflops=total,
        flops=flops,
        tokens_per_s=flops.tokens_per_step / seconds if flops and flops.tokens_per_step else None,
        achieved_tflops_per_device=flops.per_step / seconds / count / 1e12 if flops else None,
        mfu=mfu,
        mfu_possible=possible,
        hfu=hfu,
        gaps=gaps,
        missing=missing,
        warnings=_warnings(mfu, gaps)
        + energy_warnings
        + ((missing,) if flops is not None and missing else ()),
        energy=energy,
        observed=_observed(ranks, step_time, devices, peak_tflops),
    )


def _observed(
    ranks: Sequence[RankReport],
    step_ns: int,
    devices: Sequence[DevicePeak],
    peak_tflops: float | None,
) -> ObservedReport | None:
    shaped = [(r, r.observed) for r in ranks if r.observed is not None and r.included_steps]
    if not shaped:
        return None
    per_step = sum(o.flops / len(r.included_steps) for r, o in shaped)
    kernel_ns = sum(o.kernel_ns for _, o in shaped)
    every = sum(o.compute_kernel_ns for _, o in shaped)
    peaks = {d.name: d.peak.tflops for d in devices if d.peak is not None}
    rank_peaks = [peaks.get(r.devices[0] if r.devices else "") for r, _ in shaped]
    total_peak = None if None in rank_peaks else sum(p for p in rank_peaks if p is not None)
    families: Counter[str] = Counter()
    for _, o in shaped:
        families.update(o.by_family)
    return ObservedReport(
        ranks=len(shaped),
        flops_per_step=per_step,
        tflops_while_running=sum(o.flops for _, o in shaped) / kernel_ns / 1e3
        if kernel_ns
        else 0.0,
        coverage_pct=100.0 * kernel_ns / every if every else 0.0,
        hfu_lower_bound=per_step / (step_ns / 1e9 * total_peak * 1e12) if total_peak else None,
        by_family=dict(families),
        attention_causal_unknown_flops=sum(o.attention_causal_unknown_flops for _, o in shaped),
    )


def _energy(
    ranks: Sequence[RankReport], steps: Sequence[int], tokens: int | None, device_count: int
) -> tuple[EnergyReport | None, tuple[str, ...]]:
    powered = [r for r in ranks if r.power_log]
    warnings: tuple[str, ...] = ()
    shared = [r for r in powered if r.power_log and r.power_log.endswith("(the only log)")]
    if len({r.host for r in shared}) > 1:
        warnings = (
            "one power log without host names, for ranks on several hosts: energy left out "
            "(add a host column, or put the host name in each log's file name)",
        )
        powered = [r for r in powered if r not in shared]
    by_rank = {r.rank: {s.step: s.window for s in r.included_steps} for r in powered}
    covered = [
        r
        for r in powered
        if all((w := by_rank[r.rank].get(s)) is not None and w.energy for s in steps)
    ]
    if not covered:
        if powered:
            warnings += ("the power logs do not cover the analyzed steps: no energy figures",)
        return None, warnings

    def per_step(field: str) -> float:
        sums = [
            sum(getattr(by_rank[r.rank][s].energy, field) for r in covered)  # type: ignore[union-attr]
            for s in steps
        ]
        return float(statistics.median(sums))

    windows = [r.window for r in covered if r.window is not None]
    joules = sum(w.energy.joules for w in windows if w.energy)
    seconds = sum(w.figures.window_ns for w in windows if w.energy) / 1e9
    energy = per_step("joules")

    def share(field: str) -> float | None:
        return min(100.0, 100.0 * per_step(field) / energy) if energy > 0 else None

    everyone = len(covered) == device_count
    missing = None if everyone else f"power for {len(covered)} of {device_count} GPUs"
    if everyone and tokens is None:
        missing = "tokens per joule needs --tokens-per-step (or a model config)"
    return (
        EnergyReport(
            gpus=len(covered),
            logs=tuple(sorted({str(r.power_log).rsplit(" (", 1)[0] for r in covered})),
            energy_per_step_j=energy,
            compute_j_per_step=per_step("compute_j"),
            exposed_comm_j_per_step=per_step("exposed_comm_j"),
            exposed_memory_j_per_step=per_step("exposed_memory_j"),
            idle_j_per_step=per_step("idle_j"),
            avg_power_w=joules / seconds if seconds else 0.0,
            tokens_per_j=tokens / energy if tokens and everyone and energy else None,
            missing=missing,
            idle_pct=share("idle_j"),
            exposed_comm_pct=share("exposed_comm_j"),
            exposed_memory_pct=share("exposed_memory_j"),
        ),
        warnings,
    )


def _mfu_possible(mfu: float, gaps: Sequence[GapShares]) -> bool:
    """MFU can be no more than 100 % nor more than any group's compute share: the GPUs do
    model FLOPs only while they compute (metrics.md §8)."""
    return mfu <= 1 and all(g.compute_pct >= 100 * mfu for g in gaps)


def _warnings(mfu: float | None, gaps: Sequence[GapShares]) -> tuple[str, ...]:
    if mfu is None:
        return ()
    if mfu > 1:
        return (
            f"MFU {100 * mfu:.1f} % is over 100 %: the model FLOPs are per step for the whole "
            "job (all ranks), the peak per device; check both",
        )
    low = [g for g in gaps if g.compute_pct < 100 * mfu]
    if low:
        return (
            f"MFU {100 * mfu:.1f} % exceeds the GPU compute share of ranks "
            f"{', '.join(str(g.ranks[0]) for g in low)}…: the model FLOPs may be too high",
        )
    return ()


def _slowest_spans(ranks: Sequence[RankReport]) -> dict[int, int]:
    """Per step: the longest ProfilerStep span over the ranks that include it."""
    out: dict[int, int] = {}
    for rank in ranks:
        for step in rank.included_steps:
            if step.cpu_span_ns is not None and step.cpu_span_ns > 0:
                out[step.step] = max(out.get(step.step, 0), step.cpu_span_ns)
    return out


def _device_peaks(
    ranks: Sequence[RankReport],
    results: Mapping[int, RankResult],
    dtype: str,
    peak_tflops: float | None,
) -> tuple[DevicePeak, ...]:
    names = Counter(r.devices[0] if r.devices else "" for r in ranks)
    props = {r.devices[0]: results[r.rank].device_props() for r in ranks if r.devices}
    out = []
    for name, n in names.most_common():
        if peak_tflops is not None:
            peak: Peak | None = Peak(name, "user", dtype, peak_tflops, "--peak-tflops", "user")
        else:
            peak = find_peak(name, dtype, props.get(name)) if name else None
        out.append(DevicePeak(name or UNRECORDED, n, peak))
    return tuple(out)


def _peak_total(devices: Sequence[DevicePeak], assumed: int) -> float | None:
    if not devices or any(d.peak is None for d in devices):
        return None
    total = sum(d.ranks * d.peak.tflops for d in devices if d.peak is not None)
    common = devices[0].peak
    return total + assumed * common.tflops if common is not None else None


def _why_no_mfu(flops: ModelFlops | None, devices: Sequence[DevicePeak]) -> str | None:
    unknown = [d.name for d in devices if d.peak is None]
    if unknown == [UNRECORDED]:
        return (
            "the traces name no device (a CPU timeline, or no deviceProperties): pass "
            "--peak-tflops (dense, per device) for MFU"
        )
    if unknown:
        return (
            f"no peak for device {', '.join(repr(n) for n in unknown)} in the peak table: "
            "pass --peak-tflops (dense, per device) for MFU"
        )
    return None if flops is not None else HOW_TO_GIVE_FLOPS


def _gaps(
    ranks: Sequence[RankReport], signatures: Mapping[int, str | None], mfu: float | None
) -> tuple[GapShares, ...]:
    groups: dict[str | None, list[RankReport]] = {}
    for rank in ranks:
        if rank.window is not None:
            groups.setdefault(signatures.get(rank.rank), []).append(rank)
    out = []
    for members in sorted(groups.values(), key=lambda m: m[0].rank):
        windows = [m.window for m in members if m.window is not None]
        total = sum(w.figures.window_ns for w in windows)
        if total == 0:
            continue

        def pct(ns: int, total: int = total) -> float:
            return 100.0 * ns / total

        compute = pct(sum(w.figures.compute_ns for w in windows))
        mfu_pct = None if mfu is None else 100.0 * mfu
        by_type: Counter[str] = Counter()
        for w in windows:
            for t in w.by_type:
                by_type[t.coll_type] += t.exposed_comm_ns
        out.append(
            GapShares(
                ranks=tuple(m.rank for m in members),
                busy_pct=100.0 - pct(sum(w.figures.idle_ns for w in windows)),
                mfu_pct=mfu_pct,
                compute_pct=compute,
                compute_below_peak_pct=max(0.0, compute - (mfu_pct or 0.0)),
                exposed_comm_pct=pct(sum(w.figures.exposed_comm_ns for w in windows)),
                exposed_comm_by_type_pct={t: pct(ns) for t, ns in by_type.most_common() if ns},
                exposed_memory_pct=pct(sum(w.figures.exposed_memory_ns for w in windows)),
                idle_pct=pct(sum(w.figures.idle_ns for w in windows)),
            )
        )
    return tuple(out)
