"""A DLRM-like step: model-parallel embedding tables, data-parallel dense MLPs (torchrec + DDP).

Forward: the embedding lookup (FBGEMM), the pooled-embedding all-to-all on the comm stream
(torchrec's ``## alltoall_fwd_single ##`` around it) with the bottom MLP running beside it,
then the interaction and top MLP GEMMs, which wait for the all-to-all. Backward: the top MLP
and interaction backward, each finished layer's gradients all-reduced by DDP in buckets on the
DDP stream (hidden behind the dense backward), the all-to-all backward (``## alltoall_bwd_single
##``) beside the bottom MLP backward, then the embedding backward, which waits for it.

All collectives run in the default group. The all-to-alls are legacy NCCL SendRecv kernels,
annotated without metadata (or, ``metadata=True``, with all_to_all metadata and split sizes);
the all-reduces carry metadata.
"""

from __future__ import annotations

from tracecomm.synth import names as kn
from tracecomm.synth.a2a import A2aProgram, routing, run_spec, simulate, transfer_factor
from tracecomm.synth.fsdp import (
    COMPUTE_STREAM,
    FIRST_STEP,
    JITTER,
    _Cpu,
    _Launch,
    _seq_base,
    _StepMark,
    _Sync,
    _Topology,
)
from tracecomm.synth.schedule import Naming, RunSpec

A2A_STREAM = 20
DDP_STREAM = 28
FWD_ANNOTATION = "## alltoall_fwd_single ##"
BWD_ANNOTATION = "## alltoall_bwd_single ##"
_A2A_US, _BUCKET_US, _BUCKET_NELEMS = 286.4, 212.7, 6_553_600
_TOP_FWD: tuple[tuple[str, float], ...] = (
    (kn.GEMM_SM90, 96.2),  # interaction (bmm)
    (kn.GEMM_SM90, 141.3),
    (kn.GELU, 11.6),
    (kn.GEMM_SM90, 138.9),
    (kn.GELU, 11.4),
    (kn.GEMM_CUTLASS, 42.7),
)
_BOTTOM_FWD: tuple[tuple[str, float], ...] = (
    (kn.GEMM_CUTLASS, 58.1),
    (kn.GELU, 9.8),
    (kn.GEMM_CUTLASS, 57.4),
)


class _DlrmProgram(A2aProgram):
    def __init__(self, rows: tuple[int, ...], metadata: bool, buckets: int) -> None:
        super().__init__(rows, metadata)
        self.buckets = buckets
        self.a2a_us = _A2A_US * transfer_factor(rows)

    def bucket(self, after: int) -> int:
        """One DDP gradient bucket all-reduced once `after` produced it."""
        launch = _Launch(
            self.next_key,
            "comm",
            DDP_STREAM,
            _BUCKET_US,
            "",
            "AllReduce",
            _BUCKET_NELEMS,
            "autograd",
            (after,),
            cost_us=31.0,
        )
        return self.add(launch)

    def forward(self) -> int:
        lookup = self.kernels(((kn.EMB_FWD, 402.6),), "main", (), heavy=True)
        # the hot shard holds wider tables: it sends imbalance× the rows to every member
        pooled = self.nccl_a2a(
            "combine", self.a2a_us, A2A_STREAM, "main", (lookup,), outer=FWD_ANNOTATION
        )
        self.kernels(_BOTTOM_FWD, "main", ())
        top = self.kernels(_TOP_FWD, "main", (pooled,))
        return self.kernels(((kn.ADD, 11.8),), "main", (top,))

    def backward(self, loss: int) -> int:
        last = loss
        per_bucket = max(1, len(_TOP_FWD) // self.buckets)
        reduced: list[int] = []
        for i, (name, dur) in enumerate(reversed(_TOP_FWD)):
            grads = self.kernels(((name, dur * 2.1),), "autograd", (last,) if i == 0 else ())
            last = grads
            if (i + 1) % per_bucket == 0 and len(reduced) < self.buckets - 1:
                reduced.append(self.bucket(grads))
        returned = self.nccl_a2a(
            "dispatch", self.a2a_us, A2A_STREAM, "autograd", (last,), outer=BWD_ANNOTATION
        )
        bottom = self.kernels(tuple((n, d * 2.1) for n, d in _BOTTOM_FWD), "autograd", ())
        reduced.append(self.bucket(bottom))
        self.kernels(((kn.EMB_BWD, 611.3),), "autograd", (returned,), heavy=True)
        return reduced[-1]

    def step(self, number: int) -> None:
        self.program += [_StepMark(number), _Cpu(183.4)]  # data loading
        self.add(_Launch(self.next_key, "memcpy", COMPUTE_STREAM, 61.3, cost_us=14.2))
        self.program.append(_Cpu(52.7))  # input_dist of the sparse features
        loss = self.forward()
        self.program.append(_Sync(41.2))  # loss.item() for logging
        reduced = self.backward(loss)
        self.kernels(((kn.ADAM, 45.3),), "main", (reduced,))
        self.add(_Launch(self.next_key, "memset", COMPUTE_STREAM, 8.9, cost_us=6.1))
        self.program.append(_Sync(96.5))  # end-of-step logging


def dlrm_run(
    ranks: int = 8,
    steps: int = 3,
    seed: int = 0,
    metadata: bool = False,
    imbalance: float = 1.0,
    hot_rank: int | None = None,
    batch: int = 2_048,
    buckets: int = 3,
    naming: Naming = "legacy",
    gzip: bool = True,
    jitter: float = JITTER,
) -> RunSpec:
    """A DLRM-like run of ``steps`` complete steps on ``ranks`` ranks; see the module docstring.

    Embedding shard imbalance: ``hot_rank`` (default ``(seed + 1) % ranks``) holds
    ``imbalance`` times the others' embedding work: its lookup and embedding backward take
    ``imbalance`` times as long, it sends ``round(imbalance * batch // ranks)`` rows to each
    member in the forward all-to-all (the others ``batch // ranks``) and receives as many back
    from each in the backward one. ``buckets``: DDP all-reduces per step.
    """
    if ranks < 2 or steps < 1 or buckets < 1:
        raise ValueError("ranks must be >= 2, steps and buckets >= 1")
    hot = (seed + 1) % ranks if hot_rank is None else hot_rank
    rows = routing(ranks, batch // ranks, imbalance, hot)
    built = _DlrmProgram(rows, metadata, buckets)
    for i in range(steps):
        built.step(FIRST_STEP + i)
    built.program.append(_StepMark(None))
    topo = _Topology({"": (("", tuple(range(ranks))),)}, _seq_base(built.program))
    sims = simulate(built, ranks, topo, hot, imbalance, seed, jitter)
    return run_spec(sims, naming, gzip)
