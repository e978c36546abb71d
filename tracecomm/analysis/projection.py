"""What this job would do at other world sizes (metrics.md §11): an estimate, labelled as one.

1. Per collective type, fit ``t = alpha · hops(n) + bytes · f(n) / B`` to the matched instances'
   transfer times (least squares on the two terms; ring hops n − 1 for AllGather and
   ReduceScatter, 2(n − 1) for AllReduce, f as in §7).
2. Replay one typical step of the median rank with the durations of the target size: compute
   scaled by N / N' (strong scaling) or kept (weak), each fitted collective re-timed by the model
   at its new group size, everything else kept. Message sizes: nccl-tests' S (the whole layer
   for FSDP's AllGather and ReduceScatter) stays in both modes, so each rank's shard shrinks by
   N / N' as the same model is split over more ranks (metrics.md §11 says the sharded messages
   stay under weak scaling; with a model of fixed size they cannot). The replay keeps the step's
   structure: each event waits for the previous event on its stream, for the event on another
   stream whose end it started at (a dependency), or, when neither explains its start, for the
   CPU as long as it did after the GPU last went quiet. Overlap then follows from the new
   durations: compute that shrinks below the communication it hid exposes the excess.
3. Step time, exposed comm by type, MFU and throughput relative to the measured run, per N'.

Assumptions (printed with the table): no stragglers or waiting (the model gives pure transfer
times), groups as large as the world scale with it while smaller groups keep their size, the
CPU keeps up, one network model per collective type (no separate intra- and inter-node fit).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np
import polars as pl

from tracecomm.analysis.bandwidth import bus_factor_of, instance_transfers
from tracecomm.doc import Doc
from tracecomm.engine.intervals import coverage, measure

FITTED = ("AllGather", "ReduceScatter", "AllReduce")
_SMALL_BYTES = 1 << 20  # a lone message size below this is taken as pure latency
_TOLERANCE_NS = 1_000  # an event starting this close to another's end waited for it


class LinkFit(Doc, frozen=True):
    coll_type: str
    alpha_ns: float  # per ring hop
    bus_gbps: float | None  # GB/s; None when every instance is latency
    instances: int
    sizes: int  # distinct (bytes, n) points
    fit_error_pct: float  # RMS of the relative residuals
    note: str | None = None


class ProjectedSize(Doc, frozen=True):
    world_size: int
    step_ns: int
    compute_ns: int
    comm_ns: dict[str, int]  # per collective type, per step
    exposed_comm_ns: dict[str, int]
    exposed_comm_total_ns: int
    relative_throughput: float  # tokens/s against the measured run
    mfu: float | None


class Projection(Doc, frozen=True, kw_only=True):
    """metrics.md §11: the run replayed at other world sizes; or, with only ``reason`` set, why
    no projection could be made."""

    reason: str | None = None  # why there is none (every other field null)
    measured_world: int | None = None
    rank: int | None = None
    step: int | None = None
    scaling: Literal["strong", "weak"] | None = None
    fits: tuple[LinkFit, ...] | None = None
    # the measured size first, replayed (a check), then the targets
    sizes: tuple[ProjectedSize, ...] | None = None
    turning_point: int | None = None  # world size of the highest throughput, when not the largest
    assumptions: tuple[str, ...] | None = None
    notes: tuple[str, ...] | None = None


def no_projection(reason: str) -> Projection:
    return Projection(reason=reason)


class ReplayEvents(Doc, frozen=True):
    """One step's device events, column by column (entry i of each is event i, in start
    order): what the replay reads, on the rank's own clock."""

    start_ns: tuple[int, ...]
    end_ns: tuple[int, ...]
    cls: tuple[Literal["compute", "comm", "memory"], ...]
    coll_type: tuple[str | None, ...]
    device: tuple[int | None, ...]
    stream: tuple[int | None, ...]
    bytes: tuple[int | None, ...]  # a comm kernel's message size, where the trace gives it
    group_size: tuple[int | None, ...]

    def __post_init__(self) -> None:
        lengths = {len(getattr(self, name)) for name in self.__struct_fields__}
        if len(lengths) > 1:
            raise ValueError("the replay's columns differ in length")

    @classmethod
    def of(cls, work: pl.DataFrame) -> ReplayEvents:
        return cls(**{name: tuple(work[name].to_list()) for name in cls.__struct_fields__})

    def frame(self) -> pl.DataFrame:
        return pl.DataFrame(
            {name: list(getattr(self, name)) for name in self.__struct_fields__},
            schema=REPLAY_SCHEMA,
        )


REPLAY_SCHEMA = {
    "start_ns": pl.Int64,
    "end_ns": pl.Int64,
    "cls": pl.String,
    "coll_type": pl.String,
    "device": pl.Int64,
    "stream": pl.Int64,
    "bytes": pl.Int64,
    "group_size": pl.Int64,
}


class ProjectionBasis(Doc, frozen=True, kw_only=True):
    """What the projection replays (metrics.md §11): the median rank's typical step and the
    link model fitted on the run's matched collectives. Part of the Report, so that a saved
    document projects to any size as its run does; with only ``reason`` set, why nothing can
    be projected."""

    reason: str | None = None
    rank: int | None = None
    step: int | None = None
    fits: tuple[LinkFit, ...] | None = None
    events: ReplayEvents | None = None


def projection_basis(
    rank: int | None, step: int | None, work: pl.DataFrame | None, fits: Sequence[LinkFit]
) -> ProjectionBasis:
    """``work``: the median rank's typical step (``engine.views``); ``fits``: ``fit_links``."""
    if rank is None or step is None:
        return ProjectionBasis(reason="no analyzed step to replay")
    if not fits:
        return ProjectionBasis(
            reason="no collective to fit: the projection needs matched AllGather, ReduceScatter "
            "or AllReduce instances with message sizes (two or more ranks, PyTorch's collective "
            "metadata)"
        )
    if work is None:
        return ProjectionBasis(reason=f"rank {rank}'s device events of step {step} were not taken")
    return ProjectionBasis(rank=rank, step=step, fits=tuple(fits), events=ReplayEvents.of(work))


ASSUMPTIONS = (
    "an estimate from one run: per collective type t = alpha·hops(n) + bytes·f(n)/B, fitted on "
    "the matched instances' transfer times",
    "no stragglers and no waiting at collectives: the model's transfer times replace the "
    "measured kernel durations",
    "process groups as large as the world grow with it; smaller ones (tensor / pipeline "
    "parallel) keep their size",
    "the CPU keeps up; gaps the CPU caused stay as long as they were",
    "one network per collective type: intra- and inter-node links are not fitted apart",
)


def hops(coll_type: str, n: np.ndarray) -> np.ndarray:
    return np.where(coll_type == "AllReduce", 2 * (n - 1), n - 1).astype(np.float64)


def fit_links(aligned: pl.DataFrame) -> tuple[LinkFit, ...]:
    """Alpha and B per fitted collective type, from the matched instances with sizes."""
    if aligned.height == 0 or "bytes" not in aligned.columns:
        return ()
    per = instance_transfers(aligned).filter(
        pl.col("bytes").is_not_null()
        & (pl.col("transfer") > 0)
        & (pl.col("n") > 1)
        & pl.col("coll_type").is_in(FITTED)
    )
    fits = {t: _fit(t, per.filter(pl.col("coll_type") == t)) for t in FITTED}
    known_b = [f.bus_gbps for f in fits.values() if f is not None and f.note is None and f.bus_gbps]
    shared_b = float(np.median(known_b)) if known_b else None
    out = []
    for t in FITTED:
        fit = fits[t]
        if fit is not None and fit.note is not None:
            fit = _single_size(t, per.filter(pl.col("coll_type") == t), shared_b)
        if fit is not None:
            out.append(fit)
    return tuple(out)


def _fit(coll_type: str, rows: pl.DataFrame) -> LinkFit | None:
    if rows.height == 0:
        return None
    n = rows["n"].to_numpy()
    x = np.column_stack(
        [
            hops(coll_type, n),
            rows["bytes"].to_numpy().astype(np.float64) * bus_factor_of(coll_type, n),
        ]
    )
    t = rows["transfer"].to_numpy().astype(np.float64)
    sizes = len({(int(b), int(k)) for b, k in zip(rows["bytes"], rows["n"], strict=True)})
    if sizes < 2 or np.linalg.matrix_rank(x) < 2:
        return LinkFit(coll_type, 0.0, None, rows.height, sizes, 0.0, "one size")
    (alpha, inverse_b), *_ = np.linalg.lstsq(x, t, rcond=None)
    if inverse_b <= 0 or alpha < 0:
        # noise beyond what two terms explain: all bandwidth, or all latency
        return _single_size(coll_type, rows, None)
    return LinkFit(
        coll_type,
        float(alpha),
        float(1 / inverse_b),
        rows.height,
        sizes,
        _error(x, t, alpha, inverse_b),
    )


def _single_size(coll_type: str, rows: pl.DataFrame, shared_b: float | None) -> LinkFit:
    """One message size cannot tell latency from bandwidth: take B from the other types when
    they have one, else call small messages latency and large ones bandwidth."""
    n = rows["n"].to_numpy()
    nbytes = rows["bytes"].to_numpy().astype(np.float64)
    t = rows["transfer"].to_numpy().astype(np.float64)
    h, moved = hops(coll_type, n), nbytes * bus_factor_of(coll_type, n)
    sizes = len(set(zip(nbytes.tolist(), n.tolist(), strict=True)))
    if shared_b is not None:
        alpha = float(np.median(np.maximum(t - moved / shared_b, 0) / h))
        note = f"one message size: B taken from the other collectives ({shared_b:.1f} GB/s)"
        return LinkFit(
            coll_type,
            alpha,
            shared_b,
            rows.height,
            sizes,
            _error(np.column_stack([h, moved]), t, alpha, 1 / shared_b),
            note,
        )
    if float(np.median(nbytes)) < _SMALL_BYTES:
        alpha = float(np.median(t / h))
        return LinkFit(
            coll_type,
            alpha,
            None,
            rows.height,
            sizes,
            _error(np.column_stack([h, moved]), t, alpha, 0.0),
            "one small message size: taken as pure latency",
        )
    b = float(np.median(moved / t))
    return LinkFit(
        coll_type,
        0.0,
        b,
        rows.height,
        sizes,
        _error(np.column_stack([h, moved]), t, 0.0, 1 / b),
        "one large message size: taken as pure bandwidth",
    )


def _error(x: np.ndarray, t: np.ndarray, alpha: float, inverse_b: float) -> float:
    predicted = x @ np.array([alpha, inverse_b])
    return float(np.sqrt(np.mean(((predicted - t) / t) ** 2)) * 100)


def project(
    work: pl.DataFrame,
    fits: Sequence[LinkFit],
    measured_world: int,
    targets: Sequence[int],
    weak: bool,
    rank: int,
    step: int,
    mfu: float | None = None,
) -> Projection:
    """``work``: the step's device events on the measured run (``ProjectionBasis.events``)."""
    by_type = {f.coll_type: f for f in fits}
    sizes = [measured_world, *sorted(set(targets) - {measured_world})]
    rows = {size: _at_size(work, by_type, measured_world, size, weak) for size in sizes}
    base_step = rows[measured_world][0]
    out = [
        ProjectedSize(
            size,
            step_ns,
            compute_ns,
            comm,
            exposed,
            total,
            row_throughput(base_step, step_ns, measured_world, size, weak),
            _mfu(mfu, base_step, step_ns, measured_world, size, weak),
        )
        for size, (step_ns, compute_ns, comm, exposed, total) in rows.items()
    ]
    best = max(out, key=lambda p: (p.relative_throughput, -p.world_size))
    largest = max(p.world_size for p in out)
    notes = tuple(f"{f.coll_type}: {f.note}" for f in fits if f.note)
    missing = sorted(
        set(work.filter(pl.col("cls") == "comm")["coll_type"].drop_nulls()) - set(by_type)
    )
    if missing:
        notes += (f"not re-timed (no fit): {', '.join(missing)}",)
    return Projection(
        measured_world=measured_world,
        rank=rank,
        step=step,
        scaling="weak" if weak else "strong",
        fits=tuple(fits),
        sizes=tuple(out),
        turning_point=best.world_size if best.world_size < largest else None,
        assumptions=ASSUMPTIONS,
        notes=notes,
    )


def _mfu(
    mfu: float | None, base_step: int, step: int, world: int, target: int, weak: bool
) -> float | None:
    """Model FLOPs per step stay (strong) or grow with the world (weak), over N' devices."""
    if mfu is None or not step:
        return None
    return mfu * base_step / step * (1.0 if weak else world / target)


def row_throughput(base_step: int, step: int, world: int, target: int, weak: bool) -> float:
    """Tokens/s against the measured run: the global batch is fixed (strong) or grows with
    the world (weak)."""
    if not step:
        return 0.0
    return base_step / step * (target / world if weak else 1.0)


def _at_size(
    work: pl.DataFrame, fits: dict[str, LinkFit], world: int, target: int, weak: bool
) -> tuple[int, int, dict[str, int], dict[str, int], int]:
    durations = _durations(work, fits, world, target, weak)
    starts, ends = replay_step(work, durations)
    return _figures(work, starts, ends)


def _durations(
    work: pl.DataFrame, fits: dict[str, LinkFit], world: int, target: int, weak: bool
) -> np.ndarray:
    measured = (work["end_ns"] - work["start_ns"]).to_numpy().astype(np.float64)
    cls = work["cls"].to_numpy()
    out = np.where(cls == "compute", measured * (1.0 if weak else world / target), measured)
    types = work["coll_type"].fill_null("").to_numpy()
    n = work["group_size"].fill_null(0).to_numpy().astype(np.float64)
    nbytes = work["bytes"].fill_null(-1).to_numpy().astype(np.float64)
    grows = n == world
    n_new = np.where(grows, n * target / world, n)
    for t, fit in fits.items():
        rows = (cls == "comm") & (types == t) & (nbytes >= 0) & (n > 1)
        if not rows.any():
            continue
        moved = nbytes[rows]  # the model keeps its size: S stays, each rank's shard shrinks
        k = n_new[rows]
        bandwidth = 0.0 if fit.bus_gbps is None else 1.0 / fit.bus_gbps
        out[rows] = fit.alpha_ns * hops(t, k) + moved * bus_factor_of(t, k) * bandwidth
    return np.maximum(np.rint(out), 0).astype(np.int64)


def replay_step(work: pl.DataFrame, durations: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """New start and end of every event of the step (see the module docstring)."""
    start = work["start_ns"].to_numpy().astype(np.int64)
    end = work["end_ns"].to_numpy().astype(np.int64)
    lane = (
        work["device"].fill_null(-1).cast(pl.Int64) * 1_000_003
        + work["stream"].fill_null(-1).cast(pl.Int64)
    ).to_numpy()
    order = np.lexsort((end, start))
    by_end = np.argsort(end, kind="stable")
    sorted_ends = end[by_end]
    new_start = np.zeros_like(start)
    new_end = np.zeros_like(end)
    done = np.zeros(start.size, dtype=bool)
    last_on_lane: dict[int, int] = {}
    anchor = int(start[order[0]]) if start.size else 0
    for i in order:
        pred = last_on_lane.get(int(lane[i]))
        free = new_end[pred] if pred is not None else anchor
        begin = free
        slack = start[i] - (end[pred] if pred is not None else start[i])
        if pred is None or slack > _TOLERANCE_NS:
            # ended just before this start, elsewhere: the dependency it waited for
            upto = np.searchsorted(sorted_ends, start[i], side="right")
            lo = np.searchsorted(sorted_ends, start[i] - _TOLERANCE_NS, side="left")
            candidates = [j for j in by_end[lo:upto] if done[j] and lane[j] != lane[i]]
            if candidates:
                dep = max(candidates, key=lambda j: end[j])
                begin = max(free, new_end[dep])
            elif upto > 0 and done[by_end[:upto]].any():
                # waited for the CPU: as long after the GPU last went quiet as it did
                quiet = by_end[:upto][done[by_end[:upto]]]
                drained = end[quiet].max()
                begin = max(free, new_end[quiet].max() + (start[i] - drained))
            elif pred is None:
                begin = anchor + (start[i] - start[order[0]])
        new_start[i] = begin
        new_end[i] = begin + durations[i]
        done[i] = True
        last_on_lane[int(lane[i])] = i
    return new_start, new_end


def _figures(
    work: pl.DataFrame, starts: np.ndarray, ends: np.ndarray
) -> tuple[int, int, dict[str, int], dict[str, int], int]:
    cls = work["cls"].to_numpy()
    types = work["coll_type"].fill_null("").to_numpy()
    present = [t for t in dict.fromkeys(types[cls == "comm"].tolist()) if t]
    labels = np.full(starts.size, -1, dtype=np.int64)
    labels[cls == "compute"] = 0
    labels[cls == "comm"] = 1
    comm_rows = np.flatnonzero(cls == "comm")
    extra_s = starts[comm_rows]
    extra_e = ends[comm_rows]
    extra_l = np.array(
        [2 + present.index(t) if t in present else -1 for t in types[comm_rows]], dtype=np.int64
    )
    keep = labels >= 0
    all_s = np.concatenate([starts[keep], extra_s[extra_l >= 0]])
    all_e = np.concatenate([ends[keep], extra_e[extra_l >= 0]])
    all_l = np.concatenate([labels[keep], extra_l[extra_l >= 0]])
    if starts.size == 0:
        return 0, 0, {}, {}, 0
    lo, hi = np.array([starts.min()]), np.array([ends.max()])
    cov = coverage(all_s, all_e, all_l, 2 + len(present))
    c = cov.covered
    compute = c[:, 0]
    comm = {t: int(measure(cov, c[:, 2 + i], lo, hi)[0]) for i, t in enumerate(present)}
    exposed = {
        t: int(measure(cov, c[:, 2 + i] & ~compute, lo, hi)[0]) for i, t in enumerate(present)
    }
    total = int(measure(cov, c[:, 1] & ~compute, lo, hi)[0])
    return int(hi[0] - lo[0]), int(measure(cov, compute, lo, hi)[0]), comm, exposed, total
