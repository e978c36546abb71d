"""The straggler family: jobs with one known cause of slowness, each with its counterfactual.

Each member is a job whose collectives and send/recv wait inside their kernels, as NCCL's do
(a kernel launched on an early rank spins until the last member arrives), and the same job —
same seed, same jitter draws — with the cause removed. The counterfactual's measured step is
the truth a what-if is judged by: ``100 · (step − counterfactual step) / step`` is what fixing
the cause gives back, measured rather than modelled.

Members (``python -m tracecomm.synth OUT --family NAME --ranks N --counterfactual CF``):

- ``slow-worker``: one GPU of one data-parallel replica computes slower (replica 0, stage 0;
  Megatron's naming: a send/recv group per stage pair and direction, the embedding
  all-reduce, no Src/Dst Rank), 1.2× to 2.5× (``slowdown`` 0.2–1.5);
- ``overloaded-stage``: the last pipeline stage holds more layers in every replica;
- ``slow-node``: every GPU of one host computes slower, the host holding two adjacent stages of
  one replica (all its tensor-parallel ranks);
- ``slow-tp-peer``: one tensor-parallel rank of a DP × TP job;
- ``intermittent``: a pipeline GPU that is slow in every third step only;
- ``fsdp`` and ``ddp``: one slow rank in a job without pipelines;
- ``hidden-rendezvous``: the slow worker, and a wait no event records: before the embedding
  all-reduce the last stage's first tensor-parallel rank of every replica but replica 0 idles
  until replica 0's ends its last backward send, plus a lag (a CPU barrier; the held-out
  job's ranks 52, 56 and 60 on rank 48); the job without the slow worker keeps it;
- ``coarse-clock``: the slow worker with coarse clocks: each compute kernel that waited for a
  send/recv is recorded as starting up to 130 µs before that send/recv's end (the
  counterfactual has the same draws).

Sizes: 8, 64 and 512 ranks (``SIZES``); other sizes where the layout divides them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tracecomm.synth.dptp import dp_tp_run
from tracecomm.synth.fsdp import FIRST_STEP, fsdp_run
from tracecomm.synth.pp import dp_pp_run
from tracecomm.synth.pp_layout import PipelineLayout
from tracecomm.synth.schedule import RunSpec

SIZES = (8, 64, 512)
DEFAULT_SLOWDOWN = 1.2  # 2.2× the peers' compute, the held-out Megatron job's straggler
STEPS = 3
INTERMITTENT_STEPS = 6


@dataclass(frozen=True)
class Member:
    """One family member: the job, the job without the cause, and the cause."""

    name: str
    job: RunSpec
    counterfactual: RunSpec
    cause: tuple[int, ...]  # the ranks whose fix removes the cause
    kind: str  # what the cause is: "rank", "stage", "host"
    note: str  # one line: the layout and the cause


@dataclass(frozen=True)
class _Pp:
    dp: int
    pp: int
    tp: int
    micro: int


# layouts per size: DP × PP × TP with enough micro-batches for 1F1B to reach steady state
_PP = {8: _Pp(2, 4, 1, 8), 64: _Pp(4, 4, 4, 8), 512: _Pp(8, 8, 8, 8)}
_DP_TP = {8: (2, 4), 64: (8, 8), 512: (64, 8)}


def names() -> tuple[str, ...]:
    return tuple(_MEMBERS)


def member(name: str, ranks: int, seed: int = 0, slowdown: float = DEFAULT_SLOWDOWN) -> Member:
    """The family member ``name`` at ``ranks`` ranks (a size of SIZES, or one its layout
    divides); ``slowdown`` is how much slower the slow part computes (1.2 = 2.2×)."""
    if name not in _MEMBERS:
        raise ValueError(f"no family member {name!r}; one of {', '.join(_MEMBERS)}")
    if not 0 < slowdown <= 10:
        raise ValueError(f"slowdown {slowdown} is not in (0, 10]")
    return _MEMBERS[name](ranks, seed, slowdown)


def _pp_layout(ranks: int) -> _Pp:
    if ranks in _PP:
        return _PP[ranks]
    for tp in (8, 4, 2, 1):
        for pp in (8, 4, 2):
            if ranks % (tp * pp) == 0 and ranks // (tp * pp) >= 2:
                return _Pp(ranks // (tp * pp), pp, tp, max(8, pp))
    raise ValueError(f"{ranks} ranks: no DP × PP × TP layout with dp >= 2, pp >= 2")


def _megatron(lay: _Pp, seed: int, **kw: object) -> RunSpec:
    return dp_pp_run(
        dp=lay.dp,
        pp=lay.pp,
        tp=lay.tp,
        microbatches=lay.micro,
        steps=kw.pop("steps", STEPS),  # type: ignore[arg-type]
        seed=seed,
        p2p_groups="pair",
        embedding_allreduce=True,
        peer_ranks=False,
        **kw,  # type: ignore[arg-type]
    )


def _slow_worker(ranks: int, seed: int, slowdown: float) -> Member:
    lay = _pp_layout(ranks)
    job = _megatron(lay, seed, slow_ranks={0: slowdown})
    twin = _megatron(lay, seed)
    note = f"DP{lay.dp} × PP{lay.pp} × TP{lay.tp}: rank 0 (replica 0, stage 0) {1 + slowdown:g}×"
    return Member("slow-worker", job, twin, (0,), "rank", note)


RENDEZVOUS_US = (250.0, 350.0)  # the lag after the release, drawn per step
COARSE_CLOCK_US = 130.0  # the held-out conversions put compute up to ~131 µs early


def _hidden_rendezvous(ranks: int, seed: int, slowdown: float) -> Member:
    lay = _pp_layout(ranks)
    job = _megatron(lay, seed, slow_ranks={0: slowdown}, rendezvous_us=RENDEZVOUS_US)
    twin = _megatron(lay, seed, rendezvous_us=RENDEZVOUS_US)
    place = PipelineLayout(lay.dp, lay.pp, lay.tp).rank
    waiters = ", ".join(str(place(lay.pp - 1, d)) for d in range(1, lay.dp))
    note = (
        f"DP{lay.dp} × PP{lay.pp} × TP{lay.tp}: rank 0 {1 + slowdown:g}×; ranks {waiters} "
        f"wait unrecorded for rank {place(lay.pp - 1, 0)}"
    )
    return Member("hidden-rendezvous", job, twin, (0,), "rank", note)


def _coarse_clock(ranks: int, seed: int, slowdown: float) -> Member:
    lay = _pp_layout(ranks)
    job = _megatron(lay, seed, slow_ranks={0: slowdown}, coarse_clock_us=COARSE_CLOCK_US)
    twin = _megatron(lay, seed, coarse_clock_us=COARSE_CLOCK_US)
    note = (
        f"DP{lay.dp} × PP{lay.pp} × TP{lay.tp}: rank 0 {1 + slowdown:g}×; compute after a "
        f"send/recv recorded up to {COARSE_CLOCK_US:g} µs before its end"
    )
    return Member("coarse-clock", job, twin, (0,), "rank", note)


def _overloaded_stage(ranks: int, seed: int, slowdown: float) -> Member:
    lay = _pp_layout(ranks)
    layers = [4] * lay.pp
    heavy = [*layers[:-1], round(4 * (1 + slowdown))]
    job = _megatron(lay, seed, layers_per_stage=heavy)
    twin = _megatron(lay, seed, layers_per_stage=layers)
    stage = PipelineLayout(lay.dp, lay.pp, lay.tp)
    cause = tuple(r for r in range(ranks) if stage.place(r)[0] == lay.pp - 1)
    note = (
        f"DP{lay.dp} × PP{lay.pp} × TP{lay.tp}: stage {lay.pp - 1} holds {heavy[-1]} layers, "
        "the others 4"
    )
    return Member("overloaded-stage", job, twin, cause, "stage", note)


def _slow_node(ranks: int, seed: int, slowdown: float) -> Member:
    lay = _pp_layout(ranks)
    place = PipelineLayout(lay.dp, lay.pp, lay.tp).place
    # eight GPUs a host: two adjacent stages of one replica where their TP ranks fit
    stages_per_host = min(2, lay.pp) if lay.tp <= 4 else 1

    def host(rank: int) -> str:
        stage, d, _ = place(rank)
        return f"node{d * (lay.pp // stages_per_host) + stage // stages_per_host}"

    cause = tuple(r for r in range(ranks) if host(r) == "node0")
    hosts = len({host(r) for r in range(ranks)})
    common = {"hosts": host, "host_offsets_ns": [0] * max(hosts, (ranks + 7) // 8)}
    job = _megatron(lay, seed, slow_ranks=dict.fromkeys(cause, slowdown), **common)
    twin = _megatron(lay, seed, **common)
    note = f"DP{lay.dp} × PP{lay.pp} × TP{lay.tp}: node0's {len(cause)} GPUs {1 + slowdown:g}×"
    return Member("slow-node", job, twin, cause, "host", note)


def _slow_tp_peer(ranks: int, seed: int, slowdown: float) -> Member:
    dp, tp = _DP_TP.get(ranks, (ranks // 8, 8) if ranks % 8 == 0 else (ranks // 2, 2))
    if dp * tp != ranks or dp < 2:
        raise ValueError(f"{ranks} ranks: no DP × TP layout with dp >= 2")
    slow = 1
    job = dp_tp_run(dp, tp, steps=STEPS, seed=seed, slow_ranks={slow: slowdown})
    twin = dp_tp_run(dp, tp, steps=STEPS, seed=seed, slow_ranks={})
    note = f"DP{dp} × TP{tp}: rank {slow} {1 + slowdown:g}×"
    return Member("slow-tp-peer", job, twin, (slow,), "rank", note)


def _intermittent(ranks: int, seed: int, slowdown: float) -> Member:
    lay = _pp_layout(ranks)
    every_third = range(FIRST_STEP, FIRST_STEP + INTERMITTENT_STEPS, 3)
    kw = {"steps": INTERMITTENT_STEPS}
    job = _megatron(lay, seed, slow_ranks={0: slowdown}, slow_steps=every_third, **kw)
    twin = _megatron(lay, seed, **kw)
    note = f"DP{lay.dp} × PP{lay.pp} × TP{lay.tp}: rank 0 {1 + slowdown:g}× in steps " + ", ".join(
        map(str, every_third)
    )
    return Member("intermittent", job, twin, (0,), "rank", note)


def _fsdp(ranks: int, seed: int, slowdown: float) -> Member:
    slow = ranks // 2 + 1
    kw = {"world_size": ranks, "steps": STEPS, "seed": seed, "partial_last_step": False}
    job = fsdp_run(**kw, slow_ranks={slow: slowdown})  # type: ignore[arg-type]
    twin = fsdp_run(**kw, slow_ranks={})  # type: ignore[arg-type]
    return Member(
        "fsdp", job, twin, (slow,), "rank", f"FSDP {ranks}: rank {slow} {1 + slowdown:g}×"
    )


def _ddp(ranks: int, seed: int, slowdown: float) -> Member:
    slow = ranks - 1
    job = dp_tp_run(ranks, 1, steps=STEPS, seed=seed, slow_ranks={slow: slowdown})
    twin = dp_tp_run(ranks, 1, steps=STEPS, seed=seed, slow_ranks={})
    return Member("ddp", job, twin, (slow,), "rank", f"DDP {ranks}: rank {slow} {1 + slowdown:g}×")


_MEMBERS: dict[str, Callable[[int, int, float], Member]] = {
    "slow-worker": _slow_worker,
    "overloaded-stage": _overloaded_stage,
    "slow-node": _slow_node,
    "slow-tp-peer": _slow_tp_peer,
    "intermittent": _intermittent,
    "fsdp": _fsdp,
    "ddp": _ddp,
    "hidden-rendezvous": _hidden_rendezvous,
    "coarse-clock": _coarse_clock,
}


# ---- what the counterfactual says about a report -------------------------------------------

WHATIF_POINTS = 3.0  # the what-if lands within this many points of the counterfactual's
FINDING_POINTS = 1.0  # the finding costs what the what-if gives, within this many points
CHECKS = ("flagged_ok", "whatif_ok", "finding_ok", "named_ok", "superset_ok", "heat_ok")


def judge(m: Member, job: dict[str, Any], twin: dict[str, Any]) -> dict[str, Any]:
    """The report of ``m.job`` (``job``, its JSON document) against the counterfactual's
    (``twin``): whether it flags the cause and nothing else, gives back what the counterfactual
    measures, costs its finding at that, names the finding for what the cause is (a stage
    finding for an overloaded stage, a straggler finding for a slow GPU or node), never gives
    a set less than a member, and paints a cause darkest on the root-delay heat map. Each
    check in CHECKS is a bool in the result, beside the figures it rests on."""
    s = job["stragglers"]
    if s.get("recoverable_basis") == "replay (mean step)":  # like with like: the mean step
        step, fixed = s["replay"]["mean_step_ns"], twin["stragglers"]["replay"]["mean_step_ns"]
    else:
        step, fixed = s["median_step_ns"], twin["stragglers"]["median_step_ns"]
    truth = 100.0 * (step - fixed) / step
    named = [f for f in job["findings"] if f["kind"] in ("straggler", "stage_imbalance")]
    want = "stage_imbalance" if m.kind == "stage" else "straggler"
    cands = s.get("candidates") or []
    worse = [
        (big["kind"], big["index"], small["kind"], small["index"])
        for big in cands
        for small in cands
        if set(small["ranks"]) < set(big["ranks"]) and big["gain_ns"] < small["gain_ns"]
    ]
    darkest = _darkest(s.get("delay_by_step") or [])
    whatif = s["recoverable_pct"]
    first = named[0] if named else None
    return {
        "member": m.name,
        "ranks": len(job["ranks"]),
        "note": m.note,
        "cause": list(m.cause),
        "flagged": s["flagged"],
        "whatif_pct": whatif,
        "basis": s.get("recoverable_basis"),
        "truth_pct": truth,
        "first_order_pct": s.get("first_order_recoverable_pct"),
        "finding": first["title"] if first else None,
        "finding_pct": first["cost_pct"] if first else None,
        "superset_worse": worse[:3],
        "darkest": darkest,
        "flagged_ok": sorted(s["flagged"]) == sorted(m.cause),
        "whatif_ok": whatif is not None and abs(whatif - truth) <= WHATIF_POINTS,
        "finding_ok": first is not None
        and whatif is not None
        and abs(first["cost_pct"] - whatif) <= FINDING_POINTS,
        "named_ok": [f["kind"] for f in named] == [want],
        "superset_ok": not worse,
        "heat_ok": darkest in m.cause,
    }


def _darkest(cells: list[dict[str, Any]]) -> int | None:
    """The rank with the most root delay over the steps (the heat map's darkest row)."""
    total: dict[int, int] = {}
    for c in cells:
        total[c["rank"]] = total.get(c["rank"], 0) + (c.get("root_delay_ns") or 0)
    return max(sorted(total), key=lambda r: total[r]) if total else None
