"""CUDA graph runs with known truth: steps whose work is replayed by ``cudaGraphLaunch``, and
traces that record only the capture of a graph.

In a replay one runtime call launches every node of the graph: the kernels carry that call's
correlation id (``graph_links="correlation"``, as CUPTI records them) or only their graph and
node ids (``"node"``, a correlation no runtime call carries). A captured launch (between
``cudaStreamBeginCapture`` and ``cudaStreamEndCapture``) runs nothing; a trace of the capture
alone has no device work to analyze.
"""

from __future__ import annotations

from tracecomm.synth.schedule import CpuCall, Op, RankSpec, RunSpec, Step

_US = 1_000
STEP_NS = 4_000 * _US
FIRST_STEP = 10
# (name, µs) of a graph's compute nodes; node ids count from 1, the comm node comes last
_FORWARD = (
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1", 61.3),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl>", 7.9),
    (
        "flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, cutlass::bf16>>",
        88.4,
    ),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>", 3.2),
)
_BACKWARD = (
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_nt_n_tilesize128x256x64_warpgroupsize2x1x1", 122.6),
    ("flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd_kernel_traits<128>>", 171.0),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::GeluBackwardCUDAKernel>", 9.4),
)
LAUNCH_TO_START_NS = 6_500  # the first node starts this long after cudaGraphLaunch
NODE_GAP_NS = 1_100  # between two nodes of a replay (graphs keep the GPU busy)


def graph_replay_run(
    world_size: int = 1,
    steps: int = 3,
    replays_per_step: int = 2,
    graphs: int = 2,
    graph_links: str = "correlation",
    capture_step: bool = False,
    gzip: bool = False,
) -> RunSpec:
    """Each step: an eager input copy, then ``replays_per_step`` graph replays (graph ids
    ``1..graphs`` in turn: a forward and a backward graph, each ending in an AllReduce node), then
    an eager optimizer kernel. ``capture_step``: one more step first, which warms up eagerly and
    captures the graphs (its captured launches run nothing; the step is complete)."""
    ranks = tuple(
        RankSpec(
            rank=r,
            steps=tuple(_steps(r, steps, replays_per_step, graphs, capture_step)),
            cpu_calls=tuple(_capture_calls(capture_step, graphs)),
            graph_links=graph_links,
        )
        for r in range(world_size)
    )
    return RunSpec(world_size, ranks, gzip=gzip)


def graph_capture_run(world_size: int = 1, steps: int = 2, gzip: bool = False) -> RunSpec:
    """A trace of graph capture alone: every step's launches are made while a stream captures,
    so no kernel runs; nothing can be analyzed (the report says to profile the replay)."""
    ranks = []
    for r in range(world_size):
        out, calls = [], []
        for i in range(steps):
            start = (i + 1) * STEP_NS
            ops, window = _capture(start + 50 * _US, graphs=2)
            out.append(Step(FIRST_STEP + i, start, start + STEP_NS - 100 * _US, tuple(ops)))
            calls.extend(_capture_window_calls(*window))
        ranks.append(RankSpec(rank=r, steps=tuple(out), cpu_calls=tuple(calls)))
    return RunSpec(world_size, tuple(ranks), gzip=gzip)


def graph_nodes(graph: int) -> tuple[tuple[str, int], ...]:
    """(kernel name, ns) of graph ``graph``'s compute nodes, in node order."""
    table = _FORWARD if graph % 2 == 1 else _BACKWARD
    return tuple((name, round(us * _US)) for name, us in table)


def _steps(rank: int, steps: int, replays: int, graphs: int, capture_step: bool) -> list[Step]:
    out = []
    first = 0
    if capture_step:
        start = STEP_NS
        ops, _ = _capture(start + 300 * _US, graphs)
        warm = _eager_step_ops(start, rank)
        out.append(Step(FIRST_STEP, start, start + STEP_NS - 100 * _US, tuple(warm + ops)))
        first = 1
    for i in range(steps):
        start = (first + i + 1) * STEP_NS
        ops = _eager_step_ops(start, rank)
        t = start + 200 * _US
        gpu = t + LAUNCH_TO_START_NS
        for r in range(replays):
            graph = 1 + r % graphs
            replay, gpu = _replay(graph, t, max(gpu, t + LAUNCH_TO_START_NS), rank)
            ops.extend(replay)
            t += 37 * _US
        optimizer = max(gpu + 20 * _US, t + 30 * _US)
        ops.append(Op("compute", 7, optimizer, 33_100, t, name="multi_tensor_apply_kernel"))
        number = FIRST_STEP + first + i
        out.append(Step(number, start, start + STEP_NS - 100 * _US, tuple(ops)))
    return out


def _eager_step_ops(start: int, rank: int) -> list[Op]:
    """The step's input copy, launched eagerly at its start."""
    return [Op("memcpy", 7, start + 40 * _US + 173 * rank, 14_700, start + 25 * _US)]


def _replay(graph: int, launch_ns: int, gpu: int, rank: int) -> tuple[list[Op], int]:
    """One replay of ``graph``: its nodes back to back on stream 7, then its AllReduce on
    stream 20 overlapping the last node; returns the ops and when the GPU is free again."""
    ops = []
    node = 0
    for node, (name, dur) in enumerate(graph_nodes(graph), start=1):
        dur += 37 * rank  # ranks differ a little
        ops.append(Op("compute", 7, gpu, dur, launch_ns, name=name, graph=graph, node=node))
        gpu += dur + NODE_GAP_NS
    comm_start = gpu - NODE_GAP_NS - ops[-1].dur_ns // 2
    comm = Op(
        "comm",
        20,
        comm_start,
        91_300,
        launch_ns,
        coll="AllReduce",
        metadata=False,
        graph=graph,
        node=node + 1,
    )
    ops.append(comm)
    return ops, max(gpu, comm.end_ns)


def _capture(at: int, graphs: int) -> tuple[list[Op], tuple[int, int]]:
    """The launches of capturing ``graphs`` graphs (each node once), starting at ``at``; and
    the capture window (BeginCapture start, EndCapture end)."""
    ops = []
    t = at + 20 * _US
    for graph in range(1, graphs + 1):
        for name, dur in graph_nodes(graph):
            ops.append(Op("compute", 7, t, dur, t, name=name, recorded=False, captured=True))
            t += 9 * _US
        ops.append(
            Op(
                "comm",
                20,
                t,
                91_300,
                t,
                coll="AllReduce",
                metadata=False,
                recorded=False,
                captured=True,
            )
        )
        t += 9 * _US
    return ops, (at, t + 10 * _US)


def _capture_calls(capture_step: bool, graphs: int) -> list[CpuCall]:
    if not capture_step:
        return []
    _, window = _capture(STEP_NS + 300 * _US, graphs)
    return _capture_window_calls(*window)


def _capture_window_calls(begin: int, end: int) -> list[CpuCall]:
    return [
        CpuCall("cuda_runtime", "cudaStreamBeginCapture", "main", begin, begin + 4 * _US),
        CpuCall("cuda_runtime", "cudaStreamEndCapture", "main", end - 6 * _US, end),
        CpuCall("cuda_runtime", "cudaGraphInstantiate", "main", end + 2 * _US, end + 190 * _US),
    ]
