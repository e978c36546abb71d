"""All-to-all and expert parallelism (metrics.md §7a): how much of the all-to-all time hides
behind compute, which part of it is waiting for the last member and which is transfer, and
whether the tokens are spread evenly over the ranks.

Every figure comes from what the engine and the matching already computed: the per-rank
partition by type (§3), the clock-aligned matched instances and their arrivals (§4–§6), the
straggler what-if (§6) for what balancing would give back. Nothing is measured twice.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Annotated, Literal, cast

import polars as pl
from msgspec import Meta

from tracecomm.analysis.crossrank import Matching, whole_group
from tracecomm.analysis.rank import RankReport
from tracecomm.analysis.whatif import WhatIf
from tracecomm.doc import Doc, NonNegative, Percent
from tracecomm.engine.model import RankBreakdown

ALL_TO_ALL = "AllToAll"
# A busiest rank receiving this much over the median is called imbalanced (the straggler
# threshold's 5 %, in volume): below it, routing noise.
IMBALANCE_FLAG_RATIO = 1.05


class AllToAllRank(Doc, frozen=True):
    """One rank's all-to-all time over its analysis window."""

    rank: int
    kernels: NonNegative
    comm_ns: Annotated[int, Meta(ge=0, description="|U(AllToAll kernels)| in the window (§3)")]
    exposed_ns: Annotated[int, Meta(ge=0, description="of it, with no compute kernel beside it")]
    hidden_pct: Annotated[
        Percent | None, Meta(description="100 · (comm − exposed) / comm: hidden behind compute")
    ]
    matched_ns: Annotated[
        int | None,
        Meta(description="kernel time of its instances matched across ranks (§4); null: none"),
    ]
    wait_ns: Annotated[
        int | None, Meta(description="of that, waiting for the group's last member (§6)")
    ]
    transfer_ns: Annotated[
        int | None, Meta(description="and moving data: last arrival → the earliest end (§6)")
    ]
    received: Annotated[
        int | None, Meta(description="tokens (or elements, see imbalance.unit) received over them")
    ]


ImbalanceUnit = Literal["tokens", "elements"]


class TokenImbalance(Doc, frozen=True):
    """Received volume per rank over the all-to-all instances every member recorded."""

    unit: ImbalanceUnit  # "tokens" (rows, from split sizes) or "elements" (Out msg nelems)
    instances: NonNegative
    busiest_rank: int
    busiest_received: NonNegative
    median_received: Annotated[float, Meta(ge=0)]
    ratio: Annotated[float, Meta(ge=1, description="busiest / median received")]
    worst_instance_ratio: Annotated[
        float, Meta(ge=1, description="the most uneven instance's busiest / median")
    ]
    imbalanced: Annotated[bool, Meta(description="ratio at or above 1.05")]
    # what balancing gives back: the straggler what-if's gain for the busiest rank (its extra
    # work at its peers' median), when the replay holds; else None with the reason
    gain_ns: Annotated[
        int | None,
        Meta(
            description=(
                "what balancing gives back per step: the straggler replay's gain for the "
                "busiest rank on par with its peers (§6); null with gain_reason"
            )
        ),
    ]
    gain_pct: Percent | None
    gain_reason: str | None


class AllToAllView(Doc, frozen=True):
    use: Annotated[
        str | None,
        Meta(
            description=(
                "what the all-to-all is for, from the trace's names: MoE token dispatch / "
                "combine, or a DLRM embedding exchange; null when the names do not say"
            )
        ),
    ]
    libraries: tuple[str, ...]  # whose kernels carried it: "NCCL", "DeepEP", …
    kernels: NonNegative
    comm_ns: NonNegative  # sums over ranks of the windows' figures
    exposed_ns: NonNegative
    hidden_pct: Percent | None
    wait_ns: int | None  # sums over ranks of their matched instances (None: none matched)
    transfer_ns: int | None
    wait_reason: str | None  # why there is no wait / transfer split
    ranks: tuple[AllToAllRank, ...]
    imbalance: TokenImbalance | None
    imbalance_reason: str | None  # why there is no imbalance figure


def all_to_all_view(
    ranks: Sequence[RankReport],
    breakdowns: Mapping[int, RankBreakdown],
    cross_rank: Matching | None,
    what_if: WhatIf | None,
    world_size: int | None = None,
    step_ns: int | None = None,
) -> AllToAllView | None:
    """The view, or None when no rank ran an all-to-all. ``world_size``: the members of the
    default group, when the traces say; ``step_ns``: the step time (metrics.md §8) the
    straggler finding prices its share in, so both give one figure."""
    rows = [_rank_figures(r) for r in ranks]
    present = [(r, row) for r, row in zip(ranks, rows, strict=True) if row is not None]
    if not present:
        return None
    matched = _all_to_all_rows(cross_rank)
    aligned = _whole_groups(matched, world_size)
    split = _wait_transfer(aligned)
    received = _received(aligned)
    out: list[AllToAllRank] = []
    for report, (kernels, comm, exposed) in present:
        got = split.get(report.rank)
        out.append(
            AllToAllRank(
                rank=report.rank,
                kernels=kernels,
                comm_ns=comm,
                exposed_ns=exposed,
                hidden_pct=_hidden(comm, exposed),
                matched_ns=got[0] if got else None,
                wait_ns=got[1] if got else None,
                transfer_ns=got[2] if got else None,
                received=received[1].get(report.rank) if received else None,
            )
        )
    comm = sum(r.comm_ns for r in out)
    exposed = sum(r.exposed_ns for r in out)
    waits = [r.wait_ns for r in out if r.wait_ns is not None]
    transfers = [r.transfer_ns for r in out if r.transfer_ns is not None]
    imbalance, why_not = _imbalance(received, what_if, step_ns)
    return AllToAllView(
        use=_one_use([breakdowns[r.rank].all_to_all_use for r in ranks]),
        libraries=tuple(
            sorted(
                {lib for r, _ in present for lib in breakdowns[r.rank].comm_libraries},
                key=lambda lib: (lib != "NCCL", lib),
            )
        ),
        kernels=sum(r.kernels for r in out),
        comm_ns=comm,
        exposed_ns=exposed,
        hidden_pct=_hidden(comm, exposed),
        wait_ns=sum(waits) if waits else None,
        transfer_ns=sum(transfers) if transfers else None,
        wait_reason=None if waits else _no_wait_reason(len(ranks), matched, world_size),
        ranks=tuple(out),
        imbalance=imbalance,
        imbalance_reason=why_not,
    )


def _rank_figures(report: RankReport) -> tuple[int, int, int] | None:
    window = report.window
    if window is None:
        return None
    row = next((t for t in window.by_type if t.coll_type == ALL_TO_ALL), None)
    if row is None or row.kernels == 0:
        return None
    return row.kernels, row.comm_ns, row.exposed_comm_ns


def _hidden(comm: int, exposed: int) -> float | None:
    return 100.0 * (comm - exposed) / comm if comm > 0 else None


def _all_to_all_rows(cross_rank: Matching | None) -> pl.DataFrame:
    """Matched, synchronized all-to-all kernels in included steps, on the aligned clock."""
    if cross_rank is None or cross_rank.aligned.is_empty():
        return pl.DataFrame()
    a = cross_rank.aligned
    keep = (pl.col("coll_type") == ALL_TO_ALL) & pl.col("step").is_not_null()
    if "synchronized" in a.columns:
        keep &= pl.col("synchronized")
    return a.filter(keep)


def _whole_groups(rows: pl.DataFrame, world_size: int | None) -> pl.DataFrame:
    """The instances every member of whose group was traced (crossrank.whole_group)."""
    return rows if rows.is_empty() else rows.filter(whole_group(world_size))


def _wait_transfer(rows: pl.DataFrame) -> dict[int, tuple[int, int, int]]:
    """rank -> (kernel time, wait, transfer) over its matched instances (metrics.md §6:
    transfer = the group's last arrival → its earliest end, the rest of a kernel is wait)."""
    if rows.is_empty():
        return {}
    duration = pl.col("end_ns") - pl.col("start_ns")
    moving = (pl.col("end_ns").min() - pl.col("arrival_ns").max()).over("pg", "key")
    per = rows.with_columns(
        duration.alias("d"), pl.min_horizontal(pl.max_horizontal(moving, 0), duration).alias("t")
    )
    totals = per.group_by("rank").agg(pl.col("d").sum(), pl.col("t").sum()).sort("rank")
    return {r: (d, d - t, t) for r, d, t in totals.iter_rows()}


def _received(rows: pl.DataFrame) -> tuple[str, dict[int, int], int, float] | None:
    """(unit, rank -> volume received, instances, the most uneven instance's busiest /
    median) over the instances every member recorded in one unit: rows when all have split
    sizes, else elements when all have Out msg nelems."""
    if rows.is_empty() or "recv_rows" not in rows.columns:
        return None  # frames saved before the volumes existed
    for unit, column in (("tokens", "recv_rows"), ("elements", "recv_nelems")):
        complete = rows.group_by("pg", "key").agg(
            pl.col(column).is_not_null().all().alias("ok"), pl.len().alias("n")
        )
        keys = complete.filter(pl.col("ok") & (pl.col("n") >= 2)).select("pg", "key")
        if keys.height:
            got = rows.join(keys, on=["pg", "key"])
            per = got.group_by("rank").agg(pl.col(column).sum()).sort("rank")
            uneven = got.group_by("pg", "key").agg(
                (pl.col(column).max() / pl.col(column).median()).alias("r")
            )
            worst = uneven.filter(pl.col("r").is_finite())["r"].max()
            return (
                unit,
                dict(per.iter_rows()),
                keys.height,
                (worst if isinstance(worst, float) else 1.0),
            )
    return None


def _imbalance(
    received: tuple[str, dict[int, int], int, float] | None,
    what_if: WhatIf | None,
    step_ns: int | None,
) -> tuple[TokenImbalance | None, str | None]:
    if received is None:
        return None, (
            "needs all-to-alls matched across every member of their group (two or more "
            "traced ranks) that record split sizes (In / Out split size) or Out msg nelems"
        )
    unit, volumes, instances, worst = received
    median = statistics.median(volumes.values())
    busiest = max(sorted(volumes), key=lambda r: volumes[r])
    if median <= 0:
        return None, f"the ranks' median received {unit} is 0"
    ratio = volumes[busiest] / median
    gain, pct, reason = _balancing_gain(busiest, what_if, step_ns)
    return (
        TokenImbalance(
            unit=cast(ImbalanceUnit, unit),
            instances=instances,
            busiest_rank=busiest,
            busiest_received=volumes[busiest],
            median_received=median,
            ratio=ratio,
            worst_instance_ratio=max(worst, ratio),
            imbalanced=ratio >= IMBALANCE_FLAG_RATIO,
            gain_ns=gain,
            gain_pct=pct,
            gain_reason=reason,
        ),
        None,
    )


def _balancing_gain(
    busiest: int, w: WhatIf | None, step_ns: int | None
) -> tuple[int | None, float | None, str | None]:
    """The replay's gain for the busiest rank on par with its peers: what giving it the
    median rank's tokens would give back, as far as its extra work is the extra tokens. The
    share is the one the straggler finding takes (the mean step's when the what-if is), in
    ns of the step time as the finding prices it."""
    if w is None or not w.reproduces:
        reason = w.reason if w is not None and w.reason else "the straggler replay does not hold"
        return None, None, reason
    for c in w.candidates:
        if c.kind == "rank" and c.ranks == (busiest,):
            pct = c.total_recoverable_pct if w.step_basis == "mean" else c.recoverable_pct
            pct = min(100.0, max(0.0, pct))
            gain = math.floor(step_ns * pct / 100 + 0.5) if step_ns else c.gain_ns
            return gain, pct, None
    if busiest in w.considered:
        return 0, 0.0, None  # weighed and found to give nothing
    return None, None, f"the replay did not weigh rank {busiest} (no straggler candidate)"


def _one_use(uses: Sequence[str | None]) -> str | None:
    found = {u for u in uses if u is not None}
    return found.pop() if len(found) == 1 else None


def _no_wait_reason(ranks: int, matched: pl.DataFrame, world_size: int | None) -> str:
    if ranks < 2:
        return "one rank: waiting and transfer need the group's other members' traces"
    if matched.is_empty():
        return "no all-to-all matched across ranks in an included step (metrics.md §4)"
    members = matched.group_by("pg", "key").len()["len"].max()
    size = matched["group_size"].max()
    of = size if isinstance(size, int) else world_size
    return (
        f"the all-to-alls' groups were not all traced ({members!s} of {of} members): "
        "the last arrival may be a rank without a trace"
    )
