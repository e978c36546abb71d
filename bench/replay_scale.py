"""The what-if by replay at scale (issue 19's target: 1,024 ranks x 2,000 instances in under
10 s): the chain build, the replay of the recorded work (the self-check), every candidate's
replay, the flag decision and the op-type split, on per-rank collective tables built directly
(what the per-rank parse hands over; crossrank_scale.py's data: one world group, one rank late
at every instance and computing more, two hosts with a clock offset).

    python bench/replay_scale.py --ranks 1024 --instances 2000
"""

from __future__ import annotations

import argparse
import platform
import resource
import time

import numpy as np
import polars as pl
from crossrank_scale import instance_tables  # run as a script: bench/ is on the path

from tracecomm.analysis.crossrank import cross_rank
from tracecomm.analysis.replay import WAIT_COLUMNS, build_chain
from tracecomm.analysis.whatif import Job, what_if

SLOW = 7  # the late rank of instance_tables


def windows_of(aligned: pl.DataFrame) -> pl.DataFrame:
    """Each step's window on every rank: its instances plus 1 ms either side."""
    return (
        aligned.group_by("rank", "step")
        .agg(pl.col("start_ns").min() - 1_000_000, pl.col("end_ns").max() + 1_000_000)
        .select(pl.col("rank", "step").cast(pl.Int64), "start_ns", "end_ns")
        .sort("rank", "step")
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=1024)
    parser.add_argument("--instances", type=int, default=2000)
    args = parser.parse_args()
    tables = instance_tables(args.ranks, args.instances)
    hosts = {r: f"node{r // (args.ranks // 2)}" for r in tables}
    cr = cross_rank(tables, hosts)
    windows = windows_of(cr.aligned)
    waits = cr.aligned.select(WAIT_COLUMNS)
    steps = sorted(windows["step"].unique().to_list())
    compute = {r: 11_000_000 if r == SLOW else 10_000_000 for r in tables}
    everyone = tuple(sorted(tables))
    started = time.perf_counter()
    chain = build_chain(waits, windows)
    assert chain is not None
    built_s = time.perf_counter() - started
    # the measured step: median over ranks of each rank's median window (what the report has)
    per_rank = windows.group_by("rank").agg((pl.col("end_ns") - pl.col("start_ns")).median())
    measured = round(float(np.median(per_rank["end_ns"].to_numpy())))
    job = Job(
        measured_step_ns=measured,
        peers=dict.fromkeys(everyone, everyone),
        compute=compute,
        compute_by_step={r: dict.fromkeys(steps, c) for r, c in compute.items()},
        first_order={r: 1_000_000 if r == SLOW else 0 for r in everyone},
    )
    found = what_if(chain, job)
    total_s = time.perf_counter() - started
    rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        f"machine: {platform.processor() or platform.machine()}, python {platform.python_version()}"
    )
    print(
        f"{args.ranks} ranks x {args.instances} instances: {chain.size:,} chain elements, "
        f"{len(chain.levels):,} levels, {chain.shared_waits:,} shared waits"
    )
    print(
        f"chain built in {built_s:.2f} s; what-if ({len(found.candidates)} candidates replayed, "
        f"self-check, flags, op-type split) {total_s:.2f} s in all; peak RSS {rss_mib:,.0f} MiB"
    )
    best = found.candidates[0] if found.candidates else None
    print(
        f"recorded work replays to {found.replayed_step_ns:,} ns; best candidate "
        f"{best.label if best else None} gains {best.gain_ns if best else 0:,} ns; "
        f"flagged ranks {list(found.flagged_ranks)}"
    )


if __name__ == "__main__":
    main()
