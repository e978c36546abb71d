"""Mixture of experts with expert parallelism over every rank (one EP process group).

Per layer and micro-batch, forward: attention and the router (compute), a **dispatch**
all-to-all sending each token to its experts, the expert GEMMs, a **combine** all-to-all
bringing the results back. Backward mirrors it: the combine's backward (an all-to-all in the
dispatch direction) before the expert backward, the dispatch's backward (combine direction)
after it, then the attention backward.

``overlap=False``: one micro-batch; each compute waits for the all-to-all before it (exposed).
``overlap=True`` (DualPipe-style): two micro-batches of half the tokens, interleaved so that
one's all-to-all on the comm stream runs beside the other's compute.

``comm="nccl"``: each all-to-all is one NCCL kernel (legacy naming: SendRecv), ``annotated``
(c10d op, record_param_comms without args, ``nccl:all_to_all``) or, with ``metadata=True``,
carrying all_to_all metadata and split sizes. ``comm="deepep"``: DeepEP kernels on stream 27
launched from DeepEP's own ops: ``get_dispatch_layout``, an fp8 cast (compute on that stream),
``notify_dispatch`` (``cached_notify`` in backward) and ``dispatch``; ``combine``.
"""

from __future__ import annotations

from typing import Literal

from tracecomm.synth import names as kn
from tracecomm.synth.a2a import (
    A2A_COST_US,
    A2aProgram,
    Direction,
    routing,
    run_spec,
    simulate,
    transfer_factor,
)
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
from tracecomm.synth.schedule import Naming, ProcessGroup, RunSpec

EP_GROUP = "1"
EP_DESC = "ep"
DEEPEP_STREAM = 27
NCCL_EP_STREAM = 20
REFERENCE_TOKENS = 4_096  # the durations below are for this many tokens per rank
EpComm = Literal["nccl", "deepep"]

_ATTN_FWD: tuple[tuple[str, float], ...] = (
    (kn.LAYER_NORM, 18.3),
    (kn.GEMM_SM90, 121.7),
    (kn.FLASH_FWD, 148.9),
    (kn.GEMM_CUTLASS, 61.2),
    (kn.ADD, 12.4),
    (kn.GEMM_CUTLASS, 14.8),  # router logits
    (kn.MOE_TOPK, 9.6),
)
_EXPERT_FWD: tuple[tuple[str, float], ...] = (
    (kn.GEMM_SM90, 201.5),
    (kn.GELU, 24.6),
    (kn.GEMM_SM90, 199.8),
)
_EXPERT_BWD: tuple[tuple[str, float], ...] = (
    (kn.GEMM_SM90, 210.4),
    (kn.GEMM_SM90, 205.3),
    (kn.GELU, 30.2),
    (kn.GEMM_SM90, 212.7),
    (kn.GEMM_SM90, 208.1),
)
_ATTN_BWD: tuple[tuple[str, float], ...] = (
    (kn.ADD, 12.1),
    (kn.GEMM_CUTLASS, 64.3),
    (kn.FLASH_BWD, 372.5),
    (kn.GEMM_SM90, 125.2),
    (kn.LAYER_NORM_BWD, 33.4),
)
_A2A_LATENCY_US, _A2A_US = 41.0, 352.0  # per all-to-all: fixed part, part for the full tokens
_LAYOUT_US, _NOTIFY_US, _CAST_US = 8.7, 23.9, 14.2


class _MoeProgram(A2aProgram):
    """The layers' launches, micro-batches interleaved."""

    def __init__(
        self, rows: tuple[int, ...], metadata: bool, comm: EpComm, micro: int, share: float
    ) -> None:
        super().__init__(rows, metadata)
        self.comm, self.micro, self.share = comm, micro, share
        self.a2a_us = (_A2A_LATENCY_US + _A2A_US * share) * transfer_factor(rows)

    def all_to_all(self, direction: Direction, thread: str, deps: tuple[int, ...]) -> int:
        """One dispatch or combine; the key the compute after it must wait for."""
        if self.comm == "nccl":
            return self.nccl_a2a(direction, self.a2a_us, NCCL_EP_STREAM, thread, deps, "ep")
        if direction == "combine":
            return self._deepep(kn.DEEPEP_COMBINE, self.a2a_us, thread, deps)
        first = self._deepep(kn.DEEPEP_LAYOUT, _LAYOUT_US, thread, deps)
        self.kernels(((kn.FP8_CAST, _CAST_US * self.share),), thread, (), stream=DEEPEP_STREAM)
        notify = kn.DEEPEP_NOTIFY if thread == "main" else kn.DEEPEP_CACHED_NOTIFY
        self._deepep(notify, _NOTIFY_US, thread, (first,))
        return self._deepep(kn.DEEPEP_DISPATCH, self.a2a_us, thread, ())

    def _deepep(self, name: str, dur_us: float, thread: str, deps: tuple[int, ...]) -> int:
        launch = _Launch(
            self.next_key,
            "comm",
            DEEPEP_STREAM,
            dur_us,
            name,
            "AllToAll",
            0,
            thread,
            deps,
            cost_us=A2A_COST_US,
            group="ep",
        )
        return self.add(launch, metadata=False)

    def forward_layer(self, wait: list[tuple[int, ...]]) -> list[tuple[int, ...]]:
        dispatched = []
        for m in range(self.micro):
            gate = self.kernels(_ATTN_FWD, "main", wait[m], self.share)
            dispatched.append(self.all_to_all("dispatch", "main", (gate,)))
        out: list[tuple[int, ...]] = []
        for m in range(self.micro):
            experts = self.kernels(_EXPERT_FWD, "main", (dispatched[m],), self.share, heavy=True)
            out.append((self.all_to_all("combine", "main", (experts,)),))
        return out

    def backward_layer(self, wait: list[tuple[int, ...]]) -> list[tuple[int, ...]]:
        grads = [self.all_to_all("dispatch", "autograd", wait[m]) for m in range(self.micro)]
        returned = []
        for m in range(self.micro):
            experts = self.kernels(_EXPERT_BWD, "autograd", (grads[m],), self.share, heavy=True)
            returned.append(self.all_to_all("combine", "autograd", (experts,)))
        return [
            (self.kernels(_ATTN_BWD, "autograd", (returned[m],), self.share),)
            for m in range(self.micro)
        ]

    def step(self, number: int, layers: int) -> None:
        self.program += [_StepMark(number), _Cpu(183.4)]  # data loading
        self.add(_Launch(self.next_key, "memcpy", COMPUTE_STREAM, 47.6, cost_us=14.2))
        self.program.append(_Cpu(71.9))
        wait: list[tuple[int, ...]] = [()] * self.micro
        for _ in range(layers):
            wait = self.forward_layer(wait)
        loss = self.kernels(((kn.GEMM_CUTLASS, 84.6), (kn.ADD, 11.8)), "main", sum(wait, ()))
        self.program.append(_Sync(93.1))  # loss.item() for logging
        wait = [(loss,)] * self.micro
        for _ in range(layers):
            wait = self.backward_layer(wait)
        self.kernels(((kn.NORM, 14.7),), "main", sum(wait, ()))
        self.kernels(((kn.ADAM, 33.1),) * layers, "main", ())
        self.add(_Launch(self.next_key, "memset", COMPUTE_STREAM, 8.9, cost_us=6.1))
        self.program.append(_Sync(118.6))  # end-of-step logging


def moe_run(
    ranks: int = 8,
    steps: int = 3,
    layers: int = 4,
    seed: int = 0,
    overlap: bool = False,
    comm: EpComm = "nccl",
    imbalance: float = 1.0,
    hot_rank: int | None = None,
    tokens: int = REFERENCE_TOKENS,
    metadata: bool = False,
    naming: Naming = "legacy",
    gzip: bool = True,
    jitter: float = JITTER,
) -> RunSpec:
    """An expert-parallel MoE run: ``steps`` complete steps of ``layers`` MoE layers on
    ``ranks`` ranks, all in one EP group (``"1"``, desc ``"ep"``); see the module docstring.

    Token imbalance: every rank routes ``tokens // micro // ranks`` rows per micro-batch to
    each member and ``round(imbalance * that)`` to ``hot_rank`` (default ``(seed + 1) %
    ranks``), which so receives ``imbalance`` times the others' tokens and computes its
    experts ``imbalance`` times as long; each all-to-all takes ``transfer_factor`` (the
    busiest rank's volume over the mean) times its balanced time. Split sizes are written only
    with ``metadata=True`` (NCCL); DeepEP kernels carry none.
    """
    if ranks < 2 or steps < 1 or layers < 1:
        raise ValueError("ranks must be >= 2, steps and layers >= 1")
    if comm not in ("nccl", "deepep"):
        raise ValueError(f"comm must be 'nccl' or 'deepep', got {comm!r}")
    if comm == "deepep" and metadata:
        raise ValueError("DeepEP launches carry no collective metadata: metadata=False")
    micro = 2 if overlap else 1
    hot = (seed + 1) % ranks if hot_rank is None else hot_rank
    rows = routing(ranks, tokens // micro // ranks, imbalance, hot)
    built = _MoeProgram(rows, metadata, comm, micro, tokens / REFERENCE_TOKENS / micro)
    for i in range(steps):
        built.step(FIRST_STEP + i, layers)
    built.program.append(_StepMark(None))
    members = tuple(range(ranks))
    bases = _seq_base(built.program)
    topo = _Topology({"ep": ((EP_GROUP, members),)}, {EP_GROUP: bases["ep"]})
    sims = simulate(built, ranks, topo, hot, imbalance, seed, jitter)
    return run_spec(sims, naming, gzip, (ProcessGroup(EP_GROUP, EP_DESC, members),))
