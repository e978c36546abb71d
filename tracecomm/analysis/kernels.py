"""The kernel view across ranks (metrics.md §15–§16): the ranks' top kernels summed per class,
short kernels, launches, the ops that starve the GPU, graphs, and the roofline position of
the recorded matmul / conv / attention ops against their device's peaks.

Every figure is a sum over ranks, or a median / maximum of the ranks' own, said so by its
name; nothing here reads a trace.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Literal

from msgspec import Meta

from tracecomm.analysis.rank import RankReport, RankResult
from tracecomm.doc import Doc, NonNegative
from tracecomm.engine.model import KernelRow, KernelStats, KernelStep
from tracecomm.mfu.peaks import find_bandwidth, find_peak

TOP_RUN_KERNELS = 10
TOP_RUN_ROWS = 10


class RunKernelRow(Doc, frozen=True):
    """One kernel name summed over the ranks that list it among their top kernels."""

    name: str
    ranks: int
    count: int
    total_ns: int
    share_pct: float | None  # of its class's time summed over every rank
    count_per_step: float  # count / the included steps of those ranks
    ns_per_step: float  # total / the included steps of those ranks
    median_ns: int  # the (lower) median of those ranks' medians
    p95_ns: int  # the largest of their p95s
    max_ns: int


class RunKernelGroup(Doc, frozen=True):
    cls: str
    coll_type: str | None
    ranks: int
    events: int
    total_ns: int
    top: tuple[RunKernelRow, ...]


class RunShortKernels(Doc, frozen=True):
    threshold_ns: int
    kernels: int
    total_ns: int
    all_kernels: int
    all_ns: int
    share_of_kernels_pct: float | None
    share_of_time_pct: float | None


class RunStarvingOp(Doc, frozen=True):
    op: str | None
    ranks: int
    gaps: int
    starved_ns: int
    share_of_host_bound_pct: float | None
    kernel: str


class RunLaunches(Doc, frozen=True):
    launches: int
    per_step_median: int  # the lower median of the ranks' own medians
    graph_launches: int
    delay_median_ns: int | None  # the lower median of the ranks' medians
    delay_p95_ns: int | None  # the largest of the ranks' p95s
    delay_max_ns: int | None
    host_bound_ns: int
    starving: tuple[RunStarvingOp, ...]


class RunGraphs(Doc, frozen=True):
    ranks: int  # ranks with graph launches, replays or captures
    graph_launches: int
    replayed: int
    replayed_ns: int
    by_method: dict[str, int]
    unattributed: int
    captured_launches: int
    captures: int


class RooflineRow(Doc, frozen=True):
    """Recorded ops of one shape and dtype on one device model, summed over ranks: achieved
    FLOP/s and bytes/s over their kernels' time against the device's peaks (metrics.md §15).
    ``bound``: ``compute`` when the op's arithmetic intensity is at or above the device's ridge
    point (peak FLOP/s ÷ peak bytes/s), else ``memory``."""

    device: str
    op: str
    family: str
    dtype: str
    shapes: str
    ranks: int
    count: int
    flops: int
    bytes: int
    kernel_ns: int
    achieved_tflops: float | None
    achieved_gbps: float | None
    intensity: float  # FLOPs per byte
    peak_tflops: float | None
    peak_gbps: float | None
    ridge: float | None  # FLOPs per byte where the roofs meet
    pct_of_peak_flops: float | None
    pct_of_peak_bandwidth: float | None
    bound: Literal["compute", "memory", None]
    note: str | None = None


class KernelView(Doc, frozen=True):
    """the kernel view across ranks (metrics.md §15-§16): each rank's top kernels summed, short
    kernels, launches and the ops that starve the GPU, CUDA/HIP graphs, the roofline of the
    recorded ops against the device's peaks"""

    ranks: int
    steps: int  # included steps summed over those ranks
    groups: tuple[RunKernelGroup, ...]
    short: RunShortKernels
    launches: RunLaunches
    graphs: RunGraphs | None
    roofline: tuple[RooflineRow, ...]


class RunKernel(Doc, frozen=True):
    """One kernel name of the run's kernel table: per step of ``RunKernelSteps.steps``, its
    calls, their summed durations and the part of those exposed (0 in a step without it)."""

    name: str
    cls: Annotated[str, Meta(description="compute, comm or memory (metrics.md §1)")]
    coll_type: Annotated[str | None, Meta(description="comm: its collective type")]
    calls: tuple[NonNegative, ...]
    time_ns: tuple[NonNegative, ...]
    exposed_ns: Annotated[
        tuple[NonNegative, ...] | None,
        Meta(
            description=(
                "per step, the part of time_ns on the step's partition (metrics.md §3, §15): "
                "not hidden behind a kernel of a higher class; null in a document written "
                "before it"
            )
        ),
    ] = None


class RunKernelSteps(Doc, frozen=True):
    """Every kernel name of one rank's included steps, the median rank (else the lowest with
    device work), per step: what compare diffs by kernel (metrics.md §18). Names in the order
    they first ran."""

    rank: int
    steps: tuple[int, ...]
    kernels: tuple[RunKernel, ...]


def run_kernel_steps(
    results: Mapping[int, RankResult], median_rank: int | None
) -> RunKernelSteps | None:
    """None when no rank has device work in an included step."""
    have = {
        rank: r.breakdown.kernel_steps
        for rank, r in results.items()
        if r.breakdown.kernel_steps is not None
    }
    if not have:
        return None
    rank = median_rank if median_rank in have else min(have)
    return kernel_table_of(rank, have[rank] or ())


def kernel_table_of(rank: int, rows: Sequence[KernelStep]) -> RunKernelSteps:
    """The rank's per-step kernel rows (the engine's) as one row per name."""
    steps = sorted({k.step for k in rows})
    column = {s: i for i, s in enumerate(steps)}
    first = sorted(rows, key=lambda k: (k.step, k.order, k.name))
    exposed_known = all(k.exposed_ns is not None for k in rows)
    table: dict[tuple[str, str, str | None], tuple[list[int], list[int], list[int]]] = {}
    for k in first:
        calls, times, exposed = table.setdefault(
            (k.name, k.cls, k.coll_type), ([0] * len(steps), [0] * len(steps), [0] * len(steps))
        )
        calls[column[k.step]] += k.calls
        times[column[k.step]] += k.time_ns
        exposed[column[k.step]] += k.exposed_ns or 0
    return RunKernelSteps(
        rank=rank,
        steps=tuple(steps),
        kernels=tuple(
            RunKernel(
                name,
                cls,
                coll,
                tuple(calls),
                tuple(times),
                tuple(exposed) if exposed_known else None,
            )
            for (name, cls, coll), (calls, times, exposed) in table.items()
        ),
    )


def kernel_steps_problem(k: RunKernelSteps) -> str | None:
    """A saved document's kernel table that cannot be: a row per step, steps once each."""
    if len(set(k.steps)) != len(k.steps):
        return "kernel_steps: a step listed twice"
    n = len(k.steps)
    for row in k.kernels:
        if len(row.calls) != n or len(row.time_ns) != n:
            return f"kernel_steps: {row.name!r} does not have one figure per step"
        if row.exposed_ns is None:
            continue
        if len(row.exposed_ns) != n:
            return f"kernel_steps: {row.name!r} does not have one exposed time per step"
        if any(e > t for e, t in zip(row.exposed_ns, row.time_ns, strict=True)):
            return f"kernel_steps: {row.name!r} is exposed longer than it ran"
    return None


def kernel_view(
    ranks: Sequence[RankReport], results: Mapping[int, RankResult]
) -> KernelView | None:
    """None when no rank has a kernel view (CPU timelines, no included step)."""
    mine = [(r, r.kernels) for r in ranks if r.kernels is not None]
    stats = [k for _, k in mine if k is not None]
    if not stats:
        return None
    return KernelView(
        ranks=len(stats),
        steps=sum(k.steps for k in stats),
        groups=_groups(stats),
        short=_short(stats),
        launches=_launches(stats),
        graphs=_graphs(stats),
        roofline=_roofline([(r, k) for r, k in mine if k is not None], results),
    )


def _lower_median(values: Iterable[int]) -> int:
    ordered = sorted(values)
    return ordered[(len(ordered) - 1) // 2]


def _groups(stats: Sequence[KernelStats]) -> tuple[RunKernelGroup, ...]:
    keys: dict[tuple[str, str | None], None] = {}
    for k in stats:
        for g in k.groups:
            keys.setdefault((g.cls, g.coll_type))
    out = []
    for cls, coll in keys:
        groups = [(k, g) for k in stats for g in k.groups if (g.cls, g.coll_type) == (cls, coll)]
        total = sum(g.total_ns for _, g in groups)
        rows: dict[str, list[tuple[int, KernelRow]]] = defaultdict(list)
        for k, g in groups:
            for r in g.top:
                rows[r.name].append((k.steps, r))
        summed = []
        for name, listed in rows.items():
            tops = [r for _, r in listed]
            row_total = sum(r.total_ns for r in tops)
            steps = sum(steps for steps, _ in listed)
            summed.append(
                RunKernelRow(
                    name=name,
                    ranks=len(tops),
                    count=sum(r.count for r in tops),
                    total_ns=row_total,
                    share_pct=100.0 * row_total / total if total else None,
                    count_per_step=sum(r.count for r in tops) / steps,
                    ns_per_step=row_total / steps,
                    median_ns=_lower_median(r.median_ns for r in tops),
                    p95_ns=max(r.p95_ns for r in tops),
                    max_ns=max(r.max_ns for r in tops),
                )
            )
        summed.sort(key=lambda r: (-r.total_ns, r.name))
        out.append(
            RunKernelGroup(
                cls=cls,
                coll_type=coll,
                ranks=len(groups),
                events=sum(g.events for _, g in groups),
                total_ns=total,
                top=tuple(summed[:TOP_RUN_KERNELS]),
            )
        )
    return tuple(out)


def _short(stats: Sequence[KernelStats]) -> RunShortKernels:
    kernels = sum(k.short.kernels for k in stats)
    total = sum(k.short.total_ns for k in stats)
    every = sum(k.short.all_kernels for k in stats)
    every_ns = sum(k.short.all_ns for k in stats)
    return RunShortKernels(
        threshold_ns=stats[0].short.threshold_ns,
        kernels=kernels,
        total_ns=total,
        all_kernels=every,
        all_ns=every_ns,
        share_of_kernels_pct=100.0 * kernels / every if every else None,
        share_of_time_pct=100.0 * total / every_ns if every_ns else None,
    )


def _launches(stats: Sequence[KernelStats]) -> RunLaunches:
    launches = [k.launches for k in stats]
    medians = [la.delay_median_ns for la in launches if la.delay_median_ns is not None]
    p95s = [la.delay_p95_ns for la in launches if la.delay_p95_ns is not None]
    maxes = [la.delay_max_ns for la in launches if la.delay_max_ns is not None]
    bound = sum(la.host_bound_ns for la in launches)
    by_op: dict[str | None, list[tuple[int, int, str]]] = defaultdict(list)
    for la in launches:
        for s in la.starving:
            by_op[s.op].append((s.gaps, s.starved_ns, s.kernel))
    starving = sorted(
        (
            RunStarvingOp(
                op=op,
                ranks=len(rows),
                gaps=sum(g for g, _, _ in rows),
                starved_ns=sum(ns for _, ns, _ in rows),
                share_of_host_bound_pct=100.0 * sum(ns for _, ns, _ in rows) / bound
                if bound
                else None,
                kernel=statistics.mode(sorted(k for _, _, k in rows)),
            )
            for op, rows in by_op.items()
        ),
        key=lambda s: (-s.starved_ns, s.op is None, s.op or ""),
    )
    return RunLaunches(
        launches=sum(la.launches for la in launches),
        per_step_median=_lower_median(la.per_step_median for la in launches),
        graph_launches=sum(la.graph_launches for la in launches),
        delay_median_ns=_lower_median(medians) if medians else None,
        delay_p95_ns=max(p95s) if p95s else None,
        delay_max_ns=max(maxes) if maxes else None,
        host_bound_ns=bound,
        starving=tuple(starving[:TOP_RUN_ROWS]),
    )


def _graphs(stats: Sequence[KernelStats]) -> RunGraphs | None:
    graphs = [k.graphs for k in stats if k.graphs is not None]
    if not graphs:
        return None
    methods: dict[str, int] = defaultdict(int)
    for g in graphs:
        for method, n in g.by_method.items():
            methods[method] += n
    return RunGraphs(
        ranks=len(graphs),
        graph_launches=sum(g.graph_launches for g in graphs),
        replayed=sum(g.replayed for g in graphs),
        replayed_ns=sum(g.replayed_ns for g in graphs),
        by_method=dict(sorted(methods.items())),
        unattributed=sum(g.unattributed for g in graphs),
        captured_launches=sum(g.captured_launches for g in graphs),
        captures=sum(g.captures for g in graphs),
    )


@dataclass
class _OpSum:
    family: str
    ranks: set[int] = field(default_factory=set)
    count: int = 0
    flops: int = 0
    bytes: int = 0
    kernel_ns: int = 0


def _roofline(
    ranks: Sequence[tuple[RankReport, KernelStats]], results: Mapping[int, RankResult]
) -> tuple[RooflineRow, ...]:
    summed: dict[tuple[str, str, str, str], _OpSum] = {}
    props: dict[str, dict[str, object]] = {}
    for rank, k in ranks:
        device = rank.devices[0] if rank.devices else "unknown device"
        props.setdefault(device, results[rank.rank].device_props())
        for o in k.ops:
            row = summed.setdefault((device, o.op, o.dtype, o.shapes), _OpSum(o.family))
            row.ranks.add(rank.rank)
            row.count += o.count
            row.flops += o.flops
            row.bytes += o.bytes
            row.kernel_ns += o.kernel_ns
    rows = [
        _roofline_row(device, props[device], op, dtype, shapes, row)
        for (device, op, dtype, shapes), row in summed.items()
    ]
    rows.sort(key=lambda r: (-r.kernel_ns, r.device, r.op, r.shapes))
    return tuple(rows[:TOP_RUN_ROWS])


def _roofline_row(
    device: str, props: dict[str, object], op: str, dtype: str, shapes: str, row: _OpSum
) -> RooflineRow:
    flops, nbytes, kernel_ns = row.flops, row.bytes, row.kernel_ns
    peak = find_peak(device, dtype, props)
    bandwidth = find_bandwidth(device, props)
    # 1 FLOP per ns = 1e9 FLOP/s = 1e-3 TFLOP/s; 1 byte per ns = 1 GB/s
    tflops = flops / kernel_ns / 1e3 if kernel_ns else None
    gbps = nbytes / kernel_ns if kernel_ns else None
    intensity = flops / nbytes if nbytes else 0.0
    ridge = (
        peak.tflops * 1e3 / bandwidth.gbps if peak is not None and bandwidth is not None else None
    )
    pct_flops = 100.0 * tflops / peak.tflops if tflops is not None and peak is not None else None
    pct_bw = 100.0 * gbps / bandwidth.gbps if gbps is not None and bandwidth is not None else None
    note = None
    if peak is None or bandwidth is None:
        note = f"no {dtype} peak or memory bandwidth for {device} in the peak table"
    if (pct_flops or 0) > 100 or (pct_bw or 0) > 100:
        # more than the device can do: the op's kernels ran outside its CPU span (fused,
        # another thread) or its kernels' time was not all found; not a measurement
        note = "above the device's peak: not all of the op's kernel time was found"
        tflops = gbps = pct_flops = pct_bw = None
    return RooflineRow(
        device=device,
        op=op,
        family=row.family,
        dtype=dtype,
        shapes=shapes,
        ranks=len(row.ranks),
        count=row.count,
        flops=flops,
        bytes=nbytes,
        kernel_ns=kernel_ns,
        achieved_tflops=tflops,
        achieved_gbps=gbps,
        intensity=intensity,
        peak_tflops=peak.tflops if peak is not None else None,
        peak_gbps=bandwidth.gbps if bandwidth is not None else None,
        ridge=ridge,
        pct_of_peak_flops=pct_flops,
        pct_of_peak_bandwidth=pct_bw,
        bound=None if ridge is None else ("compute" if intensity >= ridge else "memory"),
        note=note,
    )
