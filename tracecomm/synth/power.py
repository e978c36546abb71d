"""Generated GPU power logs for a run, in nvidia-smi's ``--query-gpu`` CSV format."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

from tracecomm.synth.schedule import RunSpec

GPUS_PER_HOST = 8


def power_log(
    spec: RunSpec,
    host: str,
    watts: Callable[[int, int], float],
    period_ns: int = 100_000_000,
    margin_ns: int = 1_000_000_000,
) -> str:
    """``timestamp, index, power.draw [W]`` rows every ``period_ns`` over the host's ranks'
    traces (plus ``margin_ns`` either side), on the host's clock as the traces are.
    ``watts(gpu, t_ns)`` is the draw of GPU ``gpu`` from sample time ``t_ns`` to the next."""
    if period_ns % 1_000_000:
        raise ValueError("nvidia-smi timestamps have ms resolution: period_ns must be whole ms")
    ranks = [r for r in spec.ranks if r.host == host]
    times = [t for r in ranks for op in r.all_ops() for t in (op.start_ns, op.end_ns)]
    start = (min(times) - margin_ns) // period_ns * period_ns
    end = max(times) + margin_ns
    lines = ["timestamp, index, power.draw [W]"]
    for t in range(start, end + period_ns, period_ns):
        stamp = dt.datetime.fromtimestamp(t // 10**9, dt.timezone.utc).replace(
            microsecond=(t % 10**9) // 1000
        )
        text = stamp.strftime("%Y/%m/%d %H:%M:%S.") + f"{stamp.microsecond // 1000:03d}"
        lines.extend(
            f"{text}, {r.rank % GPUS_PER_HOST}, {watts(r.rank % GPUS_PER_HOST, t):.2f} W"
            for r in ranks
        )
    return "\n".join(lines) + "\n"
