"""The kernel and launch view (metrics.md §15) on generated runs, against figures computed from
the schedule alone: per class and kernel name the count, summed, median, p95 and max
duration; short kernels; launches per step and launch → start delays; graph replays (§16);
the recorded ops' FLOPs and bytes. Exact, in integer ns."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest

from tracecomm.engine import breakdown
from tracecomm.engine.kernels import BUCKETS_NS, SHORT_KERNEL_NS, TOP_KERNELS
from tracecomm.engine.model import KernelStats
from tracecomm.ingest import load_rank
from tracecomm.run.request import Request
from tracecomm.synth import RankSpec, RunSpec, fsdp_run, write_run
from tracecomm.synth.expected import is_complete
from tracecomm.synth.graphs import graph_replay_run
from tracecomm.synth.names import comm_type, kernel_name
from tracecomm.synth.shapes import SHAPES, with_shapes


def lower_median(values: list[int]) -> int:
    return sorted(values)[(len(values) - 1) // 2]


def p95(values: list[int]) -> int:
    ordered = sorted(values)
    rank = -(-95 * len(ordered) // 100)  # ⌈0.95·n⌉
    return ordered[rank - 1]


def expected_groups(spec: RankSpec) -> dict[tuple[str, str | None], dict[str, list[int]]]:
    """(class, collective type) -> kernel name -> durations, over the complete steps."""
    names = {id(op): kernel_name(op, spec.naming, i) for i, op in enumerate(spec.all_ops())}
    out: dict[tuple[str, str | None], dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
    for step in spec.steps:
        if not is_complete(step):
            continue
        for op in step.ops:
            if not (op.launched and op.recorded):
                continue
            cls = {"compute": "compute", "comm": "comm"}.get(op.kind, "memory")
            coll = comm_type(op, spec.naming) if op.kind == "comm" else None
            out[(cls, coll)][names[id(op)]].append(op.dur_ns)
    return out


def stats_of(path: Path) -> KernelStats:
    result = breakdown(load_rank(path, Request(()).read))
    assert result.kernels is not None
    return result.kernels


def assert_groups(spec: RankSpec, stats: KernelStats) -> None:
    want = expected_groups(spec)
    steps = sum(1 for s in spec.steps if is_complete(s))
    assert stats.steps == steps
    assert {(g.cls, g.coll_type) for g in stats.groups} == set(want)
    for group in stats.groups:
        kernels = want[(group.cls, group.coll_type)]
        total = sum(sum(d) for d in kernels.values())
        assert (group.events, group.names, group.total_ns) == (
            sum(len(d) for d in kernels.values()),
            len(kernels),
            total,
        )
        ranked = sorted(kernels, key=lambda n: (-sum(kernels[n]), n))[:TOP_KERNELS]
        assert [r.name for r in group.top] == ranked
        for row in group.top:
            d = kernels[row.name]
            assert (row.count, row.total_ns, row.median_ns, row.p95_ns, row.max_ns) == (
                len(d),
                sum(d),
                lower_median(d),
                p95(d),
                max(d),
            )
            assert row.share_pct == pytest.approx(100 * sum(d) / total)
            assert row.ns_per_step == pytest.approx(sum(d) / steps)
            assert row.count_per_step == pytest.approx(len(d) / steps)


def assert_short_and_launches(spec: RankSpec, stats: KernelStats) -> None:
    complete = [s for s in spec.steps if is_complete(s)]
    kernels = [
        op.dur_ns
        for s in complete
        for op in s.ops
        if op.launched and op.recorded and op.kind in ("compute", "comm")
    ]
    short = [d for d in kernels if d < SHORT_KERNEL_NS]
    assert (stats.short.kernels, stats.short.total_ns) == (len(short), sum(short))
    assert (stats.short.all_kernels, stats.short.all_ns) == (len(kernels), sum(kernels))
    bounds = [*BUCKETS_NS, None]
    for bucket, lo, hi in zip(stats.short.buckets, [0, *BUCKETS_NS], bounds, strict=True):
        mine = [d for d in kernels if d >= lo and (hi is None or d < hi)]
        assert (bucket.below_ns, bucket.kernels, bucket.total_ns) == (hi, len(mine), sum(mine))
    # one runtime call per kernel launch; one cudaGraphLaunch per graph replay
    per_step = sorted(
        len(
            {
                (op.graph, op.launch_ns) if op.graph else id(op)
                for op in s.ops
                if op.launched and not op.captured and op.kind in ("compute", "comm")
            }
        )
        for s in complete
    )
    launches = stats.launches
    assert launches.launches == sum(per_step)
    assert launches.per_step_median == per_step[(len(per_step) - 1) // 2]
    delays = [
        op.start_ns - op.launch_ns
        for s in complete
        for op in s.ops
        if op.launched and op.recorded and not op.graph
    ]
    assert launches.delayed == len(delays)
    assert (launches.delay_median_ns, launches.delay_p95_ns, launches.delay_max_ns) == (
        lower_median(delays),
        p95(delays),
        max(delays),
    )


RUNS = {
    "fsdp": lambda: fsdp_run(world_size=2, steps=3, seed=11),
    "fsdp, legacy names, idle causes": lambda: fsdp_run(
        world_size=1, steps=2, seed=12, naming="legacy", idle_detail=True
    ),
    "graph replays": lambda: graph_replay_run(world_size=2),
    "graph replays by node ids": lambda: graph_replay_run(graph_links="node"),
}


@pytest.mark.parametrize("name", sorted(RUNS))
def test_kernel_and_launch_figures_match_the_schedule(tmp_path: Path, name: str) -> None:
    spec: RunSpec = RUNS[name]()
    paths = write_run(spec, tmp_path / "run")
    for rank, path in zip(sorted(spec.ranks, key=lambda r: r.rank), paths, strict=True):
        stats = stats_of(path)
        assert_groups(rank, stats)
        assert_short_and_launches(rank, stats)


def test_starving_ops_add_up_to_the_host_bound_idle(tmp_path: Path) -> None:
    spec = fsdp_run(world_size=1, steps=3, seed=13, idle_detail=True, optimizer_launch_us=60)
    path = write_run(spec, tmp_path / "run")[0]
    result = breakdown(load_rank(path))
    assert result.kernels is not None and result.window is not None
    causes = result.window.idle_by_cause or {}
    launches = result.kernels.launches
    assert causes["host_bound"] > 0
    assert launches.host_bound_ns == causes["host_bound"]
    assert sum(s.starved_ns for s in launches.starving) == launches.host_bound_ns
    assert all(s.op is not None and s.kernel for s in launches.starving)


def test_graph_figures(tmp_path: Path) -> None:
    spec = graph_replay_run(capture_step=True)
    stats = stats_of(write_run(spec, tmp_path / "run")[0])
    graphs = stats.graphs
    assert graphs is not None
    replayed = [op for s in spec.ranks[0].steps for op in s.ops if op.graph]
    replays = {(op.graph, op.launch_ns) for op in replayed}
    assert (graphs.replayed, graphs.replayed_ns) == (
        len(replayed),
        sum(op.dur_ns for op in replayed),
    )
    assert graphs.graph_launches == stats.launches.graph_launches == len(replays)
    assert graphs.by_method == {"correlation": len(replayed)}
    assert (graphs.captures, graphs.captured_launches, graphs.unattributed) == (1, 9, 0)
    assert [(g.op, g.launches, g.kernels) for g in graphs.ops] == [
        ("CUDAGraph::replay", len(replays), len(replayed))
    ]


def test_no_graph_section_without_graphs(tmp_path: Path) -> None:
    assert stats_of(write_run(fsdp_run(world_size=1, steps=2), tmp_path / "run")[0]).graphs is None


def test_recorded_ops_flops_and_bytes(tmp_path: Path) -> None:
    spec = with_shapes(fsdp_run(world_size=1, steps=2, seed=14))
    stats = stats_of(write_run(spec, tmp_path / "run")[0])
    rank = spec.ranks[0]
    names = {id(op): kernel_name(op, rank.naming, i) for i, op in enumerate(rank.all_ops())}
    counts: dict[str, int] = defaultdict(int)
    for step in rank.steps:
        if is_complete(step):
            for op in step.ops:
                if names[id(op)] in SHAPES:
                    counts[names[id(op)]] += 1
    by_shape = {o.shapes: o for o in stats.ops}
    b, s, h, d = 2, 2048, 32, 128
    qkv = b * s * h * d
    for kernel, (dims, _) in SHAPES.items():
        shape = "[" + ",".join("[" + ",".join(map(str, x)) + "]" for x in dims) + "]"
        row = by_shape[shape]
        assert row.count == counts[kernel] and row.dtype == "bf16"
        if row.family == "matmul":
            (m, k), (_, n) = dims
            assert row.flops == counts[kernel] * 2 * m * k * n
            assert row.bytes == counts[kernel] * 2 * (m * k + k * n + m * n)
        elif len(dims) == 3:  # flash forward: reads Q, K, V, writes the output
            assert row.bytes == counts[kernel] * 2 * 4 * qkv
        else:  # backward: reads dO, Q, K, V, writes dQ, dK, dV
            assert row.bytes == counts[kernel] * 2 * 7 * qkv
