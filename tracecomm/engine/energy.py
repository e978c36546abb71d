"""Energy per window from a GPU's power samples, split by what the GPU was doing."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tracecomm.engine.intervals import BoolArray, Coverage, weighted_measure
from tracecomm.engine.model import EnergyFigures
from tracecomm.ingest.power import PowerSeries


def window_energy(
    cov: Coverage,
    classes: tuple[BoolArray, BoolArray, BoolArray],
    spans: Sequence[tuple[int, int]],
    power: PowerSeries,
) -> EnergyFigures | None:
    """``classes``: the sweep's compute, comm and memory columns. None when the samples do not
    cover the window (the GPU's draw there is unknown)."""
    if not spans or not covers(power, spans[0][0], spans[-1][1]):
        return None
    lo = np.array([s for s, _ in spans], dtype=np.int64)
    hi = np.array([e for _, e in spans], dtype=np.int64)
    compute, comm, memory = classes

    def joules(mask: np.ndarray) -> float:
        return float(weighted_measure(cov, mask, lo, hi, power.energy_at).sum())

    total = float((power.energy_at(hi) - power.energy_at(lo)).sum())
    on_compute = joules(compute)
    on_comm = joules(comm & ~compute)
    on_memory = joules(memory & ~(compute | comm))
    return EnergyFigures(
        joules=total,
        compute_j=on_compute,
        exposed_comm_j=on_comm,
        exposed_memory_j=on_memory,
        idle_j=total - on_compute - on_comm - on_memory,
    )


def covers(power: PowerSeries, start: int, end: int) -> bool:
    """Samples from before the start to within one sampling period of the end."""
    if power.t_ns.size < 2:
        return False
    period = int(np.median(np.diff(power.t_ns)))
    first, last = power.span
    return first <= start and end <= last + period
