"""What a document's figures must satisfy beyond their types (``analysis.report``): the
physical sense a saved analyze document is checked for before anything reads it
(``run.saved.load_saved_report``), and the part of it the compact baseline shares
(``check.figures``). Each check returns the problem in words, or None.

The types already hold every time to a whole, non-negative number of ns where the writer
does, every share to 0–100 and every name to the ones it can be; these checks relate figures to
each other: a window's parts add up to it, a median step holds its exposed communication and
idle time, MFU is a fraction of the peak.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from tracecomm.analysis.rank import RankReport as Rank
    from tracecomm.analysis.report import Report as ReportDocument


class Partition(Protocol):
    """A window's partition (metrics.md §3), as ``Figures`` and ``MedianFigures`` hold it."""

    @property
    def window_ns(self) -> int: ...
    @property
    def compute_ns(self) -> int: ...
    @property
    def comm_ns(self) -> int: ...
    @property
    def overlapped_comm_ns(self) -> int: ...
    @property
    def exposed_comm_ns(self) -> int: ...
    @property
    def exposed_memory_ns(self) -> int: ...
    @property
    def idle_ns(self) -> int: ...
    @property
    def overlap_pct(self) -> float | None: ...
    @property
    def busy_pct(self) -> float | None: ...


def partition_problem(f: Partition, idle_causes_ns: int | None = None) -> str | None:
    """A window's partition that cannot be: a negative time, parts that do not add up to the
    window (compute + exposed comm + exposed memory + idle; overlapped + exposed comm = comm),
    idle causes (their sum, when known) other than the idle time, a share outside 0–100. The
    one check of a saved document's windows and of a Report's (``analysis.invariants``)."""
    parts = (f.compute_ns, f.exposed_comm_ns, f.exposed_memory_ns, f.idle_ns)
    if min((f.window_ns, f.comm_ns, f.overlapped_comm_ns, *parts)) < 0:
        return "a negative time in a window"
    if sum(parts) != f.window_ns or f.overlapped_comm_ns + f.exposed_comm_ns != f.comm_ns:
        return "a window whose figures do not add up"
    if idle_causes_ns is not None and idle_causes_ns != f.idle_ns:
        return "idle causes that do not add up to the idle time"
    for name, value in (("overlap_pct", f.overlap_pct), ("busy_pct", f.busy_pct)):
        if value is not None and not number_in(value, 0.0, 100.0):
            return f"{name} {value!r} not in 0–100"
    return None


def document_problem(doc: ReportDocument) -> str | None:
    """The first impossible figure of an analyze document, in words; None when it makes sense."""
    world = world_problem(doc.summary.world_size)
    if world:
        return world
    for rank in doc.ranks:
        found = _rank_problem(rank)
        if found:
            return f"rank {rank.rank}: {found}"
    if doc.kernel_steps is not None:
        from tracecomm.analysis.kernels import kernel_steps_problem

        found = kernel_steps_problem(doc.kernel_steps)
        if found:
            return found
    return _throughput_problem(doc) or _projection_problem(doc) or _basis_problem(doc)


def median_problem(
    step_ns: int, exposed_comm_ns: int, idle_ns: int, overlap_pct: float | None
) -> str | None:
    """A rank's median step (the figures the gate compares, the baseline's too)."""
    if step_ns <= 0 or exposed_comm_ns > step_ns or idle_ns > step_ns:
        return (
            f"the median step time ({step_ns} ns) must be positive and hold its exposed "
            "communication and idle time"
        )
    if overlap_pct is not None and not number_in(overlap_pct, 0.0, 100.0):
        return f"overlap_pct {overlap_pct!r} not in 0–100"
    return None


def mfu_problem(mfu: float | None) -> str | None:
    """MFU is a fraction of the peak, not negative. Over 1 it is possible: analyze writes it
    (with a warning) when the model FLOPs given are too many, and reads its documents back."""
    if mfu is not None and not number_in(mfu, 0.0, math.inf):
        return f"mfu {mfu!r} is not a fraction of the peak"
    return None


def world_problem(world_size: int | None) -> str | None:
    if world_size is not None and (isinstance(world_size, bool) or world_size < 1):
        return f"world_size {world_size!r} is not a rank count"
    return None


def number_in(value: object, low: float, high: float) -> bool:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and low <= value <= high
    )


def _rank_problem(rank: Rank) -> str | None:
    windows = [w for w in (rank.window, *(s.window for s in rank.steps)) if w is not None]
    for w in windows:
        c = w.idle_by_cause
        causes = None if c is None else sum(c.values())
        found = partition_problem(w.figures, causes)
        if found:
            return found
    if any(s.cpu_span_ns is not None and s.cpu_span_ns < 0 for s in rank.steps):
        return "a negative step span"
    if rank.step_worst is not None:
        found = partition_problem(rank.step_worst.figures)
        if found:
            return found
    m = rank.step_median
    if m is not None:
        return median_problem(m.window_ns, m.exposed_comm_ns, m.idle_ns, m.overlap_pct)
    return None


def _throughput_problem(doc: ReportDocument) -> str | None:
    tp = doc.throughput
    if tp is None:
        return None
    if tp.step_time_ns is not None and tp.step_time_ns <= 0:
        return f"step_time_ns {tp.step_time_ns}"
    if tp.device_count < 1:
        return f"device_count {tp.device_count}"
    if not non_negative(tp.tokens_per_s):
        return f"tokens_per_s {tp.tokens_per_s!r}"
    found = mfu_problem(tp.mfu)
    if found:
        return found
    if tp.flops is not None and not (
        non_negative(tp.flops.per_step) and non_negative(tp.flops.per_token)
    ):
        return "negative model FLOPs"
    e = tp.energy
    if e is not None and not all(
        non_negative(v) for v in (e.energy_per_step_j, e.avg_power_w, e.tokens_per_j)
    ):
        return "negative energy figures"
    return None


def _projection_problem(doc: ReportDocument) -> str | None:
    p = doc.projection
    for size in (p.sizes or []) if p is not None else []:
        if min(size.world_size - 1, size.step_ns, size.exposed_comm_total_ns) < 0:
            return "a projected size with negative figures"
        if not non_negative(size.relative_throughput) or not non_negative(size.mfu):
            return "a projected size with a negative throughput or MFU"
    return None


# what a replayed step can hold (metrics.md §11): an event of at most 1,000 s, groups of at most
# 2^20 ranks, messages of at most 2^50 bytes, a hop's latency of at most 1 s, a link of 1 MB/s
# to 1 PB/s; past these the replay's int64 times would overflow into negative steps
_MAX_EVENT_NS = 10**12
_MAX_GROUP = 1 << 20
_MAX_BYTES = 1 << 50


def _basis_problem(doc: ReportDocument) -> str | None:
    """A projection basis a saved document may bring: events that end after they start and
    sizes and link models within what the replay can time."""
    b = doc.projection_basis
    if b is None:
        return None
    for fit in b.fits or ():
        bus = fit.bus_gbps
        if not number_in(fit.alpha_ns, 0, 1e9) or (
            bus is not None and not number_in(bus, 1e-3, 1e6)
        ):
            return f"projection basis: the {fit.coll_type[:40]!r} link model is not a link"
    e = b.events
    if e is None:
        return None
    lengths = [end - start for start, end in zip(e.start_ns, e.end_ns, strict=True)]
    if lengths and not 0 <= min(lengths) <= max(lengths) <= _MAX_EVENT_NS:
        return "projection basis: an event that ends before it starts, or lasts past 1,000 s"
    if any(n is not None and not 1 <= n <= _MAX_GROUP for n in e.group_size):
        return "projection basis: a group size that is not a rank count"
    if any(n is not None and not 0 <= n <= _MAX_BYTES for n in e.bytes):
        return "projection basis: a message size out of range"
    return None


def non_negative(value: float | None) -> bool:
    return value is None or (math.isfinite(value) and value >= 0)
