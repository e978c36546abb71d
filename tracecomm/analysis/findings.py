"""The bottom line: what costs the most, and what to try (metrics.md §14).

A finding names a problem (what), where it is (ranks, collective type, stage, group, host), how
much it costs per step (ns and % of the step time; the recoverable share when known), why (the
evidence, with the section of metrics.md that defines it) and what to try, specific to the
cause. Findings are ranked: a problem with the inputs first (it makes other figures wrong),
then by cost, then findings whose cost the traces cannot give (an NCCL socket fallback).
Notes and profiler artefacts (unlinked events, an excluded step) are not findings.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import polars as pl
from msgspec import structs

from tracecomm.analysis.advice import (
    HOST_BOUND_GENERIC,
    comm_advice,
    host_bound_advice,
    pipeline_advice,
)
from tracecomm.analysis.alltoall import TokenImbalance
from tracecomm.analysis.crossrank import whole_group
from tracecomm.analysis.finding import Finding, StepParts
from tracecomm.analysis.pipeline_view import heaviest_stage
from tracecomm.analysis.rank import RankReport
from tracecomm.analysis.report import Report
from tracecomm.analysis.stragglers import Stragglers, decides, on_mean_step
from tracecomm.analysis.whatif import Candidate
from tracecomm.engine.model import WindowFigures
from tracecomm.text import compact_ranges

# A costed finding must cost at least this share of the step: below it, it is noise.
MIN_COST_PCT = 2.0
SEVERITY_ORDER = {"input": 0, "cost": 1, "uncosted": 2}


@dataclass(frozen=True)
class StepBasis:
    """What a finding's share is a share of: the run's step time (metrics.md §8), or, without
    ProfilerStep spans, the median rank's analysis window (named so; costs are then over that
    window, not per step)."""

    step_ns: int
    name: str
    per_step: bool


def step_basis(report: Report) -> StepBasis | None:
    th = report.throughput
    if th is not None and th.step_time_ns:
        return StepBasis(th.step_time_ns, "the step time", per_step=True)
    median = next((r for r in report.ranks if r.rank == report.summary.median_rank), None)
    if median is not None and median.window is not None:
        window = median.window.figures.window_ns
        if window > 0:
            return StepBasis(window, f"rank {median.rank}'s analysis window", per_step=False)
    return None


def step_parts(report: Report) -> StepParts | None:
    basis = step_basis(report)
    if basis is None:
        return None
    ranks = report.ranks
    types = [t.coll_type for t in report.by_type]
    exposed_by_type = {t: _per_step(ranks, _of_type(t, exposed=True), basis)[0] for t in types}
    comm_by_type = {t: _per_step(ranks, _of_type(t, exposed=False), basis)[0] for t in types}
    compute, _ = _per_step(ranks, lambda w: w.figures.compute_ns, basis)
    exposed, _ = _per_step(ranks, lambda w: w.figures.exposed_comm_ns, basis)
    memory, _ = _per_step(ranks, lambda w: w.figures.exposed_memory_ns, basis)
    idle, _ = _per_step(ranks, lambda w: w.figures.idle_ns, basis)
    overlap, _ = _per_step(ranks, _type_overlap, basis)
    shown = [t for t in types if comm_by_type[t] > 0 or exposed_by_type[t] > 0]
    return StepParts(
        basis=basis.name,
        per_step=basis.per_step,
        step_ns=basis.step_ns,
        busy_pct=100.0 - _share(idle, basis),
        compute_ns=compute,
        compute_pct=_share(compute, basis),
        exposed_comm_ns=exposed,
        exposed_comm_pct=_share(exposed, basis),
        exposed_comm_by_type_ns={t: ns for t, ns in exposed_by_type.items() if ns > 0},
        exposed_comm_by_type_pct={
            t: _share(ns, basis) for t, ns in exposed_by_type.items() if ns > 0
        },
        types_overlap_ns=overlap,
        comm_by_type_ns={t: comm_by_type[t] for t in shown},
        comm_by_type_pct={t: _share(comm_by_type[t], basis) for t in shown},
        comm_by_type_over_compute={
            t: comm_by_type[t] / compute if compute > 0 else None for t in shown
        },
        exposed_memory_ns=memory,
        exposed_memory_pct=_share(memory, basis),
        idle_ns=idle,
        idle_pct=_share(idle, basis),
    )


def _type_overlap(w: WindowFigures) -> int:
    """The exposed time two or more collective types share (counted once per extra type):
    Σ exposed[t] − exposed_comm (metrics.md §3), never below 0."""
    return max(0, sum(t.exposed_comm_ns for t in w.by_type) - w.figures.exposed_comm_ns)


def findings(
    report: Report, parts: StepParts | None, aligned: pl.DataFrame | None = None
) -> tuple[Finding, ...]:
    """``aligned``: the matched instances (``analysis.crossrank.Matching``), which name each
    collective type's groups and whether a group has members without a trace."""
    found: list[Finding] = []
    found += _impossible_mfu(report)
    matched = aligned if aligned is not None and not aligned.is_empty() else None
    if parts is not None:
        basis = StepBasis(parts.step_ns, parts.basis, parts.per_step)
        stages = _stage_imbalance(report, basis)
        waits = straggler_waits(report, basis)
        found += stages + _exposed_comm(report, basis, parts, matched, waits)
        found += _pipeline_bubble(
            report, basis, parts, max((f.cost_ns or 0 for f in stages), default=0), waits
        )
        found += _stragglers(report, basis, matched)
        found += _idle_causes(report, basis, waits)
        for rule in _COSTED:
            found += rule(report, basis)
    found += _nccl(report)
    found = _fold_stage_stragglers(found)
    costed = [f for f in found if f.severity == "cost"]
    kept = [f for f in found if f.severity != "cost"]
    kept += [f for f in costed if (f.cost_pct or 0) >= MIN_COST_PCT]
    return tuple(
        sorted(
            kept,
            key=lambda f: (SEVERITY_ORDER[f.severity], -(f.cost_ns or 0), f.kind, f.ranks),
        )
    )


@dataclass
class _StragglerWaits:
    """What the flagged stragglers' fix frees of the others' waits, per step on the findings'
    basis (Replay.freed_kernel_wait_ns, freed_idle_ns): lost time counted once, in the
    straggler's finding; the findings below it cost what is left (metrics.md §6). Taken by
    the findings that cost the waits, as they use it."""

    kernel: dict[str, int]
    idle: int
    who: str  # the flagged candidates: "rank 0", "stage 1", "host node0"

    def take_kernel(self, coll: str, most: int) -> int:
        taken = min(max(0, most), self.kernel.get(coll, 0))
        self.kernel[coll] = self.kernel.get(coll, 0) - taken
        return taken

    def take_idle(self, most: int) -> int:
        taken = min(max(0, most), self.idle)
        self.idle -= taken
        return taken

    def line(self, ns: int, what: str) -> str:
        return (
            f"{_ms(ns)} of {what} per step is a wait for {self.who}: fixing {self.who} frees "
            f"it, so {self.who}'s finding counts it (metrics.md §6)"
        )


def straggler_waits(report: Report, basis: StepBasis) -> _StragglerWaits:
    st = report.stragglers
    replay = st.replay if st is not None else None
    if st is None or replay is None or not st.flagged or not decides(st):
        return _StragglerWaits({}, 0, "")
    scale = basis.step_ns / replay.measured_step_ns if replay.measured_step_ns else 1.0
    return _StragglerWaits(
        {t: math.floor(ns * scale + 0.5) for t, ns in replay.freed_kernel_wait_ns.items()},
        math.floor(replay.freed_idle_ns * scale + 0.5),
        ", ".join(c.label for c in st.candidates if c.flagged) or _where(st.flagged, report),
    )


def _fold_stage_stragglers(found: list[Finding]) -> list[Finding]:
    """Ranks flagged as stragglers because their pipeline stage holds more layers are one
    problem, not two: the stage finding stays and says so."""
    stage_ranks = {r for f in found if f.kind == "stage_imbalance" for r in f.ranks}
    folded = [
        f for f in found if f.kind == "straggler" and stage_ranks and set(f.ranks) <= stage_ranks
    ]
    if not folded:
        return found
    note = (
        f"the straggler analysis flags the same ranks ({compact_ranges(folded[0].ranks)}, "
        "metrics.md §6): they are late because their stage computes more"
    )
    return [
        structs.replace(f, evidence=(*f.evidence, note)) if f.kind == "stage_imbalance" else f
        for f in found
        if f not in folded
    ]


# --- the per-step figures findings are costed from ------------------------------------------


def _period_share(r: RankReport, value: Callable[[WindowFigures], int]) -> float | None:
    """The share of the rank's steps that ``value`` takes, the time between two steps counted
    with the steps: its analysis window holds n steps and the n − 1 gaps between them (step
    windows run from a step's first device work to its last, so a data loader stall before the
    first kernel falls in a gap), and one mean gap is added for the gap before the first step.
    Step windows that overlap (the GPU still busy with the last step) leave no gap. In [0, 1]."""
    whole = r.window
    if whole is None or whole.figures.window_ns <= 0:
        return None
    inside = [
        s.window
        for s in r.steps
        if s.window is not None
        and whole.start_ns <= s.window.start_ns
        and s.window.end_ns <= whole.end_ns
    ]
    gap_ns = gap = 0.0
    if len(inside) >= 2:
        gaps = len(inside) - 1
        gap_ns = max(
            0.0, (whole.figures.window_ns - sum(w.figures.window_ns for w in inside)) / gaps
        )
        gap = min(gap_ns, max(0.0, (value(whole) - sum(value(w) for w in inside)) / gaps))
    return min(1.0, max(0.0, (value(whole) + gap) / (whole.figures.window_ns + gap_ns)))


def _per_step(
    ranks: Sequence[RankReport], value: Callable[[WindowFigures], int], basis: StepBasis
) -> tuple[int, tuple[int, ...]]:
    """The mean over ranks of each rank's share (``_period_share``), as ns of the basis; and
    the ranks where it is not zero. The mean, not the median: means of parts add up to the
    mean of their whole (the types to the exposed total, the parts to the step), and the mean
    share is the share of the job's GPU time a part takes."""
    shares = {r.rank: share for r in ranks if (share := _period_share(r, value)) is not None}
    if not shares:
        return 0, ()
    mean = math.fsum(shares.values()) / len(shares)
    where = tuple(sorted(rank for rank, share in shares.items() if share > 0))
    return math.floor(mean * basis.step_ns + 0.5), where


def _share(ns: int, basis: StepBasis) -> float:
    return min(100.0, 100.0 * ns / basis.step_ns)


def _where(ranks: Sequence[int], report: Report) -> str:
    everyone = {r.rank for r in report.ranks}
    if set(ranks) == everyone and len(everyone) > 1:
        return "all ranks"
    return f"rank{'s' if len(ranks) != 1 else ''} {compact_ranges(ranks)}"


def _ms(ns: float) -> str:
    return f"{ns / 1e6:,.3f} ms"


# --- exposed communication, by collective type -------------------------------------------------

_COMM_ADVICE = {
    "AllGather": (
        "FSDP: prefetch the next AllGather while this layer computes (FSDP1 "
        "forward_prefetch=True, backward_prefetch=BACKWARD_PRE; FSDP2 "
        "set_modules_to_forward_prefetch / set_modules_to_backward_prefetch)",
        "let more AllGathers be in flight (FSDP1 limit_all_gathers=False) or keep parameters "
        "gathered between forward and backward (reshard_after_forward=False: more memory)",
        "wrap larger units (fewer, larger AllGathers overlap better than many small ones)",
    ),
    "ReduceScatter": (
        "FSDP: start each gradient ReduceScatter while backward continues "
        "(backward_prefetch=BACKWARD_PRE); wrap larger units so fewer, larger ones run",
        "reduce gradients in bf16 (MixedPrecision reduce_dtype=torch.bfloat16): half the bytes",
    ),
    "AllReduce": (
        "DDP: tune bucket_cap_mb (larger buckets: fewer AllReduces; smaller: the first one starts "
        "earlier in backward); gradient_as_bucket_view=True; static_graph=True",
        "check that the first buckets do not wait for the whole backward (unused parameters, "
        "find_unused_parameters=True)",
    ),
    "AllToAll": (
        "MoE: overlap one micro-batch's token dispatch / combine with another's compute "
        "(DualPipe-style, or Megatron's --overlap-moe-expert-parallel-comm), or with the "
        "shared experts; keep expert parallelism inside a node (NVLink) where it fits",
        "DLRM: an embedding sharding plan that keeps more tables data- or row-parallel "
        "(torchrec's planner) moves fewer rows through the all-to-all; pipeline the next "
        "batch's input distribution (TrainPipelineSparseDist)",
    ),
    "SendRecv": (
        "pipeline: more micro-batches per step, or an interleaved schedule (virtual stages), so "
        "each transfer hides behind another micro-batch's compute; balance the stages",
    ),
}
# the AllToAll advice that fits what the trace says the all-to-all is for (metrics.md §7a)
_ALL_TO_ALL_ADVICE = {
    "expert": (
        _COMM_ADVICE["AllToAll"][0],
        "for decode (small batches), DeepEP's low-latency kernels; fewer bytes per token "
        "(FP8 dispatch)",
    ),
    "embedding": (_COMM_ADVICE["AllToAll"][1],),
}
_P2P_ADVICE = (
    "point-to-point transfers outside a pipeline: find what issues them (tracecomm export "
    "shows them on the timeline) and overlap them with compute",
)
_OTHER_COMM_ADVICE = (
    "find what issues it (tracecomm export shows it on the timeline; NCCL_DEBUG=INFO "
    "NCCL_DEBUG_SUBSYS=COLL logs every call)",
)


def _exposed_comm(
    report: Report,
    basis: StepBasis,
    parts: StepParts,
    aligned: pl.DataFrame | None,
    waits: _StragglerWaits,
) -> list[Finding]:
    socket = _socket_fallback(report)
    out = []
    for coll, exposed in parts.exposed_comm_by_type_ns.items():
        if coll == "SendRecv" and report.pipelines:
            continue  # waits of pipeline stages: the pipeline bubble finding
        total = parts.comm_by_type_ns.get(coll, 0)  # the same mean the step parts took
        _, ranks = _per_step(report.ranks, _of_type(coll, exposed=True), basis)
        evidence = [
            f"{coll} runs {_ms(total)} per step (mean over ranks); {_ms(exposed)} of it with "
            "no compute kernel running beside it (exposed, metrics.md §3)"
        ]
        straggler = waits.take_kernel(coll, exposed)
        cost = exposed - straggler
        if straggler:
            evidence.append(waits.line(straggler, f"that exposed {coll}"))
        evidence += _bandwidth_evidence(report, coll)
        if coll == "AllToAll":
            evidence += _all_to_all_evidence(report)
        advice = list(_advice_for(report, coll))
        if socket:
            advice.insert(0, "NCCL runs inter-node traffic over TCP sockets: fix that first")
        out.append(
            Finding(
                kind="exposed_comm",
                severity="cost",
                title=f"{coll} exposed",
                cost_ns=cost,
                cost_pct=_share(cost, basis),
                recoverable_pct=None,
                ranks=ranks,
                coll_type=coll,
                stage=None,
                group=_group_of(aligned, coll),
                hosts=(),
                evidence=tuple(evidence),
                advice=tuple(advice),
                section="metrics.md §3",
            )
        )
    return out


def _advice_for(report: Report, coll: str) -> tuple[str, ...]:
    own = comm_advice(report.frameworks, coll)
    if own is not None:
        return own
    view = report.all_to_all
    if coll == "AllToAll" and view is not None and view.use is not None:
        return _ALL_TO_ALL_ADVICE[view.use]
    if coll == "SendRecv" and not report.pipelines:
        return _P2P_ADVICE
    return _COMM_ADVICE.get(coll, _OTHER_COMM_ADVICE)


def _all_to_all_evidence(report: Report) -> list[str]:
    """How much of the all-to-all hides, and how much of it is waiting (metrics.md §7a)."""
    view = report.all_to_all
    if view is None:
        return []
    out = []
    if view.hidden_pct is not None:
        by = f" ({', '.join(view.libraries)} kernels)" if view.libraries else ""
        out.append(
            f"{view.hidden_pct:.1f} % of the all-to-all time{by} hides behind compute "
            "(sum over ranks, metrics.md §7a)"
        )
    if view.wait_ns is not None and view.transfer_ns is not None:
        total = view.wait_ns + view.transfer_ns
        if total > 0:
            out.append(
                f"of the matched all-to-alls' kernel time, {100 * view.wait_ns / total:.0f} % "
                "is waiting for the group's last member and "
                f"{100 * view.transfer_ns / total:.0f} % transfer (metrics.md §6)"
            )
    return out


def _of_type(coll: str, exposed: bool) -> Callable[[WindowFigures], int]:
    def value(w: WindowFigures) -> int:
        return sum(
            t.exposed_comm_ns if exposed else t.comm_ns for t in w.by_type if t.coll_type == coll
        )

    return value


def _group_of(aligned: pl.DataFrame | None, coll: str) -> str | None:
    if aligned is None:
        return None
    groups = sorted(set(aligned.filter(aligned["coll_type"] == coll)["pg"].to_list()))
    return ", ".join(groups[:3]) + (" …" if len(groups) > 3 else "") if groups else None


def _bandwidth_evidence(report: Report, coll: str) -> list[str]:
    bw = report.bandwidth
    if bw is None:
        return []
    rows = [r for r in bw.rows if r.coll_type == coll]
    if not rows:
        return []
    largest = max(rows, key=lambda r: r.bytes_median)
    line = (
        f"bus bandwidth {largest.busbw_gbps:,.1f} GB/s at {largest.size_bucket} messages "
        "(metrics.md §7)"
    )
    if bw.link_gbps is not None and largest.below_link_pct is not None:
        line += f"; {largest.below_link_pct:.0f} % of them below the {bw.link_gbps:g} Gbit/s link"
    return [line]


def _socket_fallback(report: Report) -> bool:
    nccl = report.nccl
    return nccl is not None and any(
        d.rule == "transport_fallback" and d.severity == "error" for d in nccl.diagnostics
    )


# --- stragglers and stages -----------------------------------------------------------------------


def _stragglers(report: Report, basis: StepBasis, aligned: pl.DataFrame | None) -> list[Finding]:
    """The ranks or replicas whose fixing the what-if says shortens the step (metrics.md §6):
    every flagged one, or, with none flagged, the rank that would give most when that is 2 %
    of the step or more (a slow rank under §6's flag line still costs the step). Stage
    candidates are the stage findings' (``_stage_imbalance``)."""
    st = report.stragglers
    if st is None:
        return []
    if not decides(st):
        return _first_order_straggler(report, basis, aligned)
    shown = [c for c in st.candidates if c.flagged and c.kind != "stage"]
    if not shown:
        best = next((c for c in st.candidates if c.kind == "rank" and c.gain_ns > 0), None)
        shown = [best] if best is not None and best.recoverable_pct >= MIN_COST_PCT else []
    on_mean = on_mean_step(st)  # the what-if is the mean step's (metrics.md §6)
    return [
        _straggler(
            report,
            basis,
            c.ranks,
            c.label,
            c.total_recoverable_pct if on_mean else c.recoverable_pct,
            c.flagged,
            aligned,
            st,
            c,
        )
        for c in shown
    ]


def _flag_line(st: Stragglers, candidate: Candidate | None) -> str:
    """Why a candidate is not flagged, with the line it had to pass: the larger of 5 % of the
    step and 3× the median rank's gain (metrics.md §6), which on two ranks is 1.5× the one
    rank's own gain (so is never passed); or a group it is part of explains the gain."""
    line = st.threshold_ns
    step = st.replay.measured_step_ns if st.replay is not None else None
    if line is None or not step:
        return "under the flag line"
    if candidate is not None and candidate.gain_ns > line:
        return "another candidate it is part of explains the gain"
    return f"under the flag line ({100 * line / step:.1f} % of the step)"


def _first_order_straggler(
    report: Report, basis: StepBasis, aligned: pl.DataFrame | None
) -> list[Finding]:
    st = report.stragglers
    if st is None or not st.flagged or st.recoverable_pct is None:
        return []
    return [_straggler(report, basis, st.flagged, None, st.recoverable_pct, True, aligned, None)]


def _straggler(
    report: Report,
    basis: StepBasis,
    flagged: Sequence[int],
    label: str | None,
    recoverable_pct: float,
    is_flagged: bool,
    aligned: pl.DataFrame | None,
    w: Stragglers | None,
    candidate: Candidate | None = None,
) -> Finding:
    """``w``: the stragglers whose replay decides (None: the first-order figures do)."""
    st = report.stragglers
    assert st is not None
    recoverable = min(100.0, max(0.0, recoverable_pct))
    cost = math.floor(basis.step_ns * recoverable / 100 + 0.5)
    by_rank = {r.rank: r for r in st.ranks}
    hosts = {r.rank: r.host for r in report.ranks}
    evidence = []
    for rank in list(flagged)[:3]:
        r = by_rank.get(rank)
        if r is None:
            continue
        ratio = f" (compute ratio {r.compute_ratio:.3f})" if r.compute_ratio is not None else ""
        evidence.append(
            f"rank {rank} computes {_ms(r.compute_excess_ns)} more per step than its peers"
            f"{ratio} and holds the others {_ms(r.delay_caused_per_step_ns)} per step; it "
            f"arrived last at {r.times_last} collectives (metrics.md §6)"
        )
    if w is not None:
        which = "the mean step over its steps" if on_mean_step(w) else "the step"
        line = (
            f"the dependency replay with {'it' if len(flagged) == 1 else 'them'} on par gives "
            f"back {recoverable:.1f} % of {which} (metrics.md §6)"
        )
        if not is_flagged:
            line += f": {_flag_line(w, candidate)}, so not flagged"
        evidence.append(line)
        evidence += _hidden_evidence(w)
        median = candidate.recoverable_pct if candidate is not None else recoverable
        total = candidate.total_recoverable_pct if candidate is not None else 0.0
        if total > median + 1:  # slow in some steps: the median step hides it
            evidence.append(
                f"slow in some steps only: fixing {'it' if len(flagged) == 1 else 'them'} "
                f"gives back {total:.1f} % of the run's time over its steps (the mean step), "
                f"{median:.1f} % of the median step, the step time (metrics.md §6)"
            )
    where_hosts = tuple(sorted({h for rank in flagged if (h := hosts.get(rank)) is not None}))
    on = f" on {', '.join(where_hosts[:3])}" if where_hosts else ""
    first = flagged[0]
    evidence += _untraced_members(aligned, report.summary.world_size)
    imbalance = _token_imbalance(report, flagged)
    if imbalance is not None:
        evidence.append(
            f"rank {imbalance.busiest_rank} receives {imbalance.ratio:.2f}× the median rank's "
            f"{imbalance.unit} at the all-to-alls ({imbalance.instances} matched instances, "
            "metrics.md §7a): more tokens, more expert work, the others wait for it"
        )
    what = label if label is not None and not label.startswith("rank") else _where(flagged, report)
    if label is not None and label.startswith("host "):  # a slow node: its ranks, not "on"
        what, on = f"{label} ({_where(flagged, report)})", ""
    device_advice: tuple[str, ...] = (
        f"look at rank {first}'s GPU{on}: nvidia-smi -q -d CLOCK,PERFORMANCE,TEMPERATURE "
        "(clocks throttled for power or heat?), ECC errors, the PCIe / NVLink link width",
        f"compare rank {first}'s kernels with a peer's step by step (tracecomm report "
        f"--timeline-ranks {first},<peer>); different kernels mean different work "
        "(data skew, an uneven shard), the same kernels slower mean the device",
        "move the rank to another node for a run: a slowness that stays with the node is "
        "the hardware",
    )
    if report.summary.timelines == ("cpu",):  # a CPU timeline: no GPU, no kernels to look at
        device_advice = (
            f"look at what else runs on rank {first}'s host{on} (CPU threads pinned, other "
            "jobs) and at its data loading: on a CPU timeline the op times are the host's",
            *device_advice[2:],
        )
    advice: tuple[str, ...] = device_advice
    title = f"straggler: {what}{on}"
    if imbalance is not None:
        advice = (_IMBALANCE_ADVICE[report.all_to_all.use if report.all_to_all else None],)
        advice += device_advice[1:2]
        title += f" (token imbalance: {imbalance.ratio:.2f}× the median)"
    return Finding(
        kind="straggler",
        severity="cost",
        title=title,
        cost_ns=cost,
        cost_pct=_share(cost, basis),
        recoverable_pct=recoverable,
        ranks=tuple(sorted(flagged)),
        coll_type=None,
        stage=None,
        group=None,
        hosts=where_hosts,
        evidence=tuple(evidence),
        advice=advice,
        section="metrics.md §6",
    )


_IMBALANCE_ADVICE = {
    "expert": (
        "balance the experts' load: a stronger load-balancing (auxiliary) loss or an "
        "auxiliary-loss-free bias on the router, a capacity factor that drops or reroutes "
        "the overflow, or expert placement that spreads the popular experts (EPLB)"
    ),
    "embedding": (
        "balance the embedding shards: a sharding plan that splits the hot tables "
        "(row- or column-wise) so each rank serves a like share of the lookups"
    ),
    None: (
        "balance what each rank receives at the all-to-all: for MoE the router's load "
        "balancing (auxiliary loss, capacity factor), for embeddings the sharding plan"
    ),
}


def _hidden_evidence(st: Stragglers) -> list[str]:
    """The waits the replay inferred, and the figure with unexplained idle read as a wait."""
    w = st.replay
    if w is None:
        return []
    out = [f"{d.line} (metrics.md §6)" for d in w.inferred_waits[:2]]
    if w.recoverable_pct_idle_as_wait is not None and st.flagged:
        decides = ", ".join(f"rank {d.rank}" for d in w.idle_decides[:3])
        out.append(
            f"read as a wait rather than work, the idle that nothing explains gives "
            f"{w.recoverable_pct_idle_as_wait:.1f} % back"
            + (
                f" ({decides}: {'its' if len(w.idle_decides) == 1 else 'their'} idle decides)"
                if decides
                else ""
            )
        )
    return out


def _untraced_members(aligned: pl.DataFrame | None, world_size: int | None) -> tuple[str, ...]:
    """A caveat when the matched instances' groups have members without a trace: the rank the
    others waited for may be one of those (crossrank.whole_group)."""
    if aligned is None:
        return ()
    per = aligned.select("pg", "key", whole_group(world_size).alias("whole")).unique(["pg", "key"])
    partial = per.filter(~pl.col("whole")).height
    if partial == 0:
        return ()
    return (
        f"{partial} of {per.height} matched instances belong to groups with members that left "
        "no trace: the rank the others waited for may be one of those (metrics.md §4)",
    )


def _token_imbalance(report: Report, flagged: Sequence[int]) -> TokenImbalance | None:
    """The all-to-all's token imbalance when its busiest rank is the straggler found."""
    view = report.all_to_all
    imbalance = view.imbalance if view is not None else None
    if imbalance is None or not imbalance.imbalanced or imbalance.busiest_rank not in flagged:
        return None
    return imbalance


def _stage_imbalance(report: Report, basis: StepBasis) -> list[Finding]:
    """A stage computing more than the other stages of its pipeline: one finding per stage
    index over the job's pipelines (each data-parallel replica is a pipeline of its own).

    Its cost is what it adds to the step: in 1F1B every micro-batch but the first passes the
    slowest stage in turn, so a stage computing ``excess`` more per step than the others
    (``excess / m`` per micro-batch) holds the pipeline about ``(m − 1) / m · excess``."""
    excess_by_stage: dict[int, list[tuple[float, int, float, float, float]]] = {}
    for view in report.pipelines:
        stages = view.per_stage
        found = heaviest_stage(stages)
        # the stage the pipeline's verdict names (over 5 % more compute), and no other
        if found is not None and view.overloaded_stage == found[0].stage:
            heaviest, median = found
            m = view.microbatches
            held = (m - 1) / m if m else 1.0
            mean = statistics.mean(s.compute_ns for s in stages)
            excess_by_stage.setdefault(heaviest.stage, []).append(
                (heaviest.compute_ns - median, heaviest.rank, median, held, mean)
            )
    replayed = _stage_candidates(report)
    out = []
    for stage, rows in sorted(excess_by_stage.items()):
        excess = statistics.median(r[0] for r in rows)
        cost = math.floor(statistics.median(r[0] * r[3] for r in rows) + 0.5)
        recoverable = None
        how = "each micro-batch after the first waits for it in turn"
        candidate = replayed.get(stage)
        if candidate is not None:  # the replay's what-if, where it holds, over the estimate
            recoverable = min(100.0, candidate.recoverable_pct)
            cost = math.floor(basis.step_ns * recoverable / 100 + 0.5)
            how = (
                f"the dependency replay with it at the other stages' compute gives back "
                f"{recoverable:.1f} % of the step (metrics.md §6)"
            )
        others = statistics.median(r[2] for r in rows)
        # to balance, the stage keeps the pipelines' mean compute and hands on the rest
        move = statistics.median(1 - r[4] / (r[2] + r[0]) for r in rows)
        ranks = tuple(sorted({r[1] for r in rows}))
        out.append(
            Finding(
                kind="stage_imbalance",
                severity="cost",
                title=f"pipeline stage {stage} overloaded (+{100 * excess / others:.0f} % compute)",
                cost_ns=cost,
                cost_pct=_share(cost, basis),
                recoverable_pct=recoverable,
                ranks=ranks,
                coll_type=None,
                stage=stage,
                group=None,
                hosts=(),
                evidence=(
                    f"stage {stage} computes {_ms(others + excess)} per step, the other stages "
                    f"{_ms(others)} (medians over {len(rows)} pipeline(s), metrics.md §10); {how}",
                ),
                advice=(
                    f"move about {100 * move:.0f} % of stage {stage}'s layers to its neighbours "
                    "(an uneven split: Megatron "
                    "--decoder-first/last-pipeline-num-layers, torchtitan's pipeline split "
                    "points), counting the embedding and the loss with the first and last stage",
                ),
                section="metrics.md §10",
            )
        )
    return out


def _stage_candidates(report: Report) -> dict[int, Candidate]:
    """The what-if's stage candidates by stage, when the replay reproduces the run."""
    st = report.stragglers
    if st is None or not decides(st):
        return {}
    return {c.index: c for c in st.candidates if c.kind == "stage" and c.gain_ns > 0}


def _pipeline_bubble(
    report: Report, basis: StepBasis, parts: StepParts, imbalance_ns: int, waits: _StragglerWaits
) -> list[Finding]:
    """On pipeline stages a wait for the neighbour stage sits inside the receive kernel (it
    starts early and spins), so exposed SendRecv is mostly bubble, not transfer: the two are
    one finding with the stages' idle fill / drain / wait, less what an overloaded stage
    causes (its own finding)."""
    if not report.pipelines:
        return []
    stage_ranks = {s.rank for v in report.pipelines for s in v.per_stage}
    ranks = [r for r in report.ranks if r.rank in stage_ranks] or report.ranks
    recv, _ = _per_step(ranks, _of_type("SendRecv", exposed=True), basis)
    idle, _ = _per_step(ranks, _idle_of(_PIPELINE_IDLE), basis)
    bubble = max(0, recv + idle - imbalance_ns)
    straggler = waits.take_kernel("SendRecv", min(recv, bubble))
    cost = bubble - straggler
    if cost <= 0:
        return []
    evidence = [
        f"the stages wait {_ms(recv)} per step inside receives (exposed SendRecv, metrics.md "
        f"§3) and idle {_ms(idle)} (pipeline fill, drain and wait, metrics.md §10)"
        + (f", less {_ms(imbalance_ns)} an overloaded stage causes" if imbalance_ns else "")
    ]
    if straggler:
        evidence.append(waits.line(straggler, "those receives"))
    for view in report.pipelines[:2]:
        if view.textbook_bubble_pct is not None and view.per_stage:
            measured = statistics.median(s.bubble_pct for s in view.per_stage)
            evidence.append(
                f"pipeline {view.group}: {view.stages} stages, {view.microbatches} micro-batches"
                f": bubble {measured:.1f} % per stage, textbook 1F1B {view.textbook_bubble_pct:.1f}"
                " % (metrics.md §10)"
            )
    return [
        Finding(
            kind="pipeline_bubble",
            severity="cost",
            title="pipeline bubble: stages wait for each other",
            cost_ns=cost,
            cost_pct=_share(cost, basis),
            recoverable_pct=None,
            ranks=tuple(sorted(stage_ranks)),
            coll_type="SendRecv",
            stage=None,
            group=", ".join(v.group for v in report.pipelines[:3]),
            hosts=(),
            evidence=tuple(evidence),
            advice=pipeline_advice(report.frameworks),
            section="metrics.md §10",
        )
    ]


_PIPELINE_IDLE = ("pipeline_fill", "pipeline_drain", "pipeline_wait")


# --- idle time by cause, exposed memory ------------------------------------------------------

_IDLE = {
    "host_bound": (
        "the GPU waits for the CPU to launch kernels (host-bound)",
        HOST_BOUND_GENERIC,  # the framework's and the graphs' own: _idle_advice
    ),
    "dataloader": (
        "the GPU waits for the data loader",
        (
            "more DataLoader workers (num_workers), pin_memory=True, persistent_workers=True, "
            "a larger prefetch_factor",
            "move decoding and augmentation off the training process (pre-tokenize, a data "
            "service)",
        ),
    ),
    "sync": (
        "the GPU idles after synchronizing calls",
        (
            "remove the synchronizations from the step: .item(), .cpu(), "
            "torch.cuda.synchronize(), blocking copies (use non_blocking=True)",
        ),
    ),
}


def _idle_causes(report: Report, basis: StepBasis, waits: _StragglerWaits) -> list[Finding]:
    """Idle by cause; host-bound idle that was an inferred wait for the straggler (hidden.py:
    the host held by a rendezvous the trace does not record) is the straggler's."""
    out = []
    for cause, (what, advice) in _IDLE.items():
        names = (cause,)
        idle, ranks = _per_step(report.ranks, _idle_of(names), basis)
        straggler = waits.take_idle(idle) if cause == "host_bound" else 0
        cost = idle - straggler
        if cost <= 0:
            continue
        out.append(
            Finding(
                kind=cause,
                severity="cost",
                title=what,
                cost_ns=cost,
                cost_pct=_share(cost, basis),
                recoverable_pct=None,
                ranks=ranks,
                coll_type=None,
                stage=None,
                group=None,
                hosts=(),
                evidence=(
                    f"{_ms(idle)} of idle GPU time per step (mean over ranks) is "
                    f"'{', '.join(names)}', in its steps and between them (metrics.md §10)",
                    *([waits.line(straggler, "that idle")] if straggler else []),
                ),
                advice=_idle_advice(report, cause, advice),
                section="metrics.md §10",
            )
        )
    return out


def _idle_advice(report: Report, cause: str, generic: tuple[str, ...]) -> tuple[str, ...]:
    if cause == "host_bound":
        return host_bound_advice(report.frameworks, graphs_in(report))
    return generic


def graphs_in(report: Report) -> str | None:
    """ "replay" when a rank's steps replay CUDA / HIP graphs, "capture" when a rank records a
    capture and none replays one, None without graphs (metrics.md §16)."""
    stats = [
        r.kernels.graphs
        for r in report.ranks
        if r.kernels is not None and r.kernels.graphs is not None
    ]
    if any(g.graph_launches or g.replayed for g in stats):
        return "replay"
    if any(g.captures or g.captured_launches for g in stats):
        return "capture"
    return None


def _idle_of(causes: Sequence[str]) -> Callable[[WindowFigures], int]:
    return lambda w: sum((w.idle_by_cause or {}).get(c, 0) for c in causes)


def _exposed_memory(report: Report, basis: StepBasis) -> list[Finding]:
    cost, ranks = _per_step(report.ranks, lambda w: w.figures.exposed_memory_ns, basis)
    if cost <= 0:
        return []
    return [
        Finding(
            kind="exposed_memory",
            severity="cost",
            title="exposed memory copies",
            cost_ns=cost,
            cost_pct=_share(cost, basis),
            recoverable_pct=None,
            ranks=ranks,
            coll_type=None,
            stage=None,
            group=None,
            hosts=(),
            evidence=(
                f"{_ms(cost)} per step of memcpy / memset while no compute or communication "
                "ran (exposed memory, metrics.md §3)",
            ),
            advice=(
                "copy from pinned host memory with non_blocking=True, on a side stream, ahead "
                "of use; no .cpu() / .to('cpu') of large tensors inside the step",
            ),
            section="metrics.md §3",
        )
    ]


_COSTED = (_exposed_memory,)


# --- problems with the inputs, and what the traces cannot cost -------------------------------


def _impossible_mfu(report: Report) -> list[Finding]:
    th = report.throughput
    if th is None or th.mfu is None or th.mfu_possible is not False:
        return []
    low = [g for g in th.gaps if g.compute_pct < 100 * th.mfu]
    share = min((g.compute_pct for g in th.gaps), default=None)
    evidence = [
        f"MFU would be {100 * th.mfu:,.1f} %"
        + (f", but the GPUs compute only {share:.1f} % of the time" if share is not None else "")
        + " (metrics.md §8): the FLOPs are more than the work the GPUs did",
    ]
    if th.flops is not None:
        evidence.append(f"model FLOPs per step {th.flops.per_step:.4g}, from {th.flops.source}")
    return [
        Finding(
            kind="impossible_mfu",
            severity="input",
            title="the model FLOPs are too high for this run: MFU is impossible",
            cost_ns=None,
            cost_pct=None,
            recoverable_pct=None,
            ranks=tuple(r for g in low for r in g.ranks),
            coll_type=None,
            stage=None,
            group=None,
            hosts=(),
            evidence=tuple(evidence),
            advice=(
                "check the FLOPs input: --model-flops-per-step is per step for the whole job "
                "(all ranks), --tokens-per-step counts each token once, --global-batch is the "
                "sequences per step of all ranks, --seq-len the training sequence length",
            ),
            section="metrics.md §8",
        )
    ]


_NCCL_ADVICE = {
    "transport_fallback": (
        "make NCCL use InfiniBand / RoCE: check that libibverbs and the HCA driver are "
        "installed in the container (ibv_devinfo), NCCL_IB_HCA names the right devices, "
        "NCCL_IB_DISABLE is not set; NCCL_SOCKET_IFNAME only picks the bootstrap interface",
        "run with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET to see the choice, and "
        "NCCL_NET=IB to fail instead of falling back",
    ),
    "version_mismatch": ("run one NCCL version on every node (the same container image)",),
    "hang": (
        "the timed-out collective and the ranks that never joined are named: look at what "
        "those ranks did instead (their stack: py-spy dump, TORCH_NCCL_DUMP_ON_TIMEOUT=1 "
        "for a Flight Recorder dump)",
    ),
    "desync": (
        "ranks issued different collectives: a data-dependent branch, an uneven number of "
        "batches per rank, or a collective inside a condition",
    ),
}


def _nccl(report: Report) -> list[Finding]:
    nccl = report.nccl
    if nccl is None:
        return []
    out = []
    for d in nccl.diagnostics:
        if d.severity != "error":
            continue
        out.append(
            Finding(
                kind=f"nccl_{d.rule}",
                severity="uncosted",
                title=f"NCCL: {d.message}",
                cost_ns=None,
                cost_pct=None,
                recoverable_pct=None,
                ranks=tuple(d.ranks),
                coll_type=None,
                stage=None,
                group=d.pg,
                hosts=tuple(d.hosts),
                evidence=tuple(d.evidence[:3]),
                advice=_NCCL_ADVICE.get(d.rule, ("see the NCCL section below",)),
                section="metrics.md §12",
            )
        )
    return out
