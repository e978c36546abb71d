"""Cross-rank matching and straggler figures at scale (issue 3's performance target).

Builds the per-rank collective-instance tables directly (what the per-rank parse hands over),
N ranks x M instances with jittered arrivals, one slow rank and two hosts with a clock offset,
then times ``cross_rank`` + ``stragglers`` and reports peak RSS (the what-if replay on the
same data: replay_scale.py).

    python bench/crossrank_scale.py --ranks 1024 --instances 2000
"""

from __future__ import annotations

import argparse
import platform
import resource
import time

import numpy as np
import polars as pl

from tracecomm.analysis.crossrank import cross_rank
from tracecomm.analysis.stragglers import stragglers
from tracecomm.engine.collectives import INSTANCE_SCHEMA


def instance_tables(ranks: int, instances: int, seed: int = 0) -> dict[int, pl.DataFrame]:
    rng = np.random.default_rng(seed)
    per_instance_start = np.cumsum(rng.integers(200_000, 400_000, instances))
    tables = {}
    for rank in range(ranks):
        late = 50_000 if rank == 7 else 0
        offset = 41_000_000 if rank >= ranks // 2 else 0
        starts = per_instance_start + rng.integers(0, 5_000, instances) + late + offset
        ends = per_instance_start + 100_000 + late + offset
        tables[rank] = pl.DataFrame(
            {
                "pg": ["0"] * instances,
                "seq": np.arange(instances),
                "coll_type": ["AllGather"] * instances,
                "ordinal": np.arange(instances),
                "start_ns": starts,
                "end_ns": np.maximum(ends, starts + 1),
                "nelems": np.full(instances, 1 << 20),
                "pg_ranks": [None] * instances,
                "step": np.arange(instances) // 100,
                "direction": [None] * instances,
                "peer": [None] * instances,
                "p2p_ordinal": [None] * instances,
                "bytes": np.full(instances, 2 << 20),
                "group_size": np.full(instances, ranks),
                "idle_before_ns": np.zeros(instances, dtype=np.int64),
                "work_since_ns": starts,
                # launched after compute that ended 20 µs before the start, on one stream:
                # the replay's queue constraints run on every instance
                "ready_ns": starts - 20_000,
                "stream": np.full(instances, 13),
            }
        ).cast(INSTANCE_SCHEMA)  # type: ignore[arg-type]
    return tables


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=1024)
    parser.add_argument("--instances", type=int, default=2000)
    args = parser.parse_args()
    tables = instance_tables(args.ranks, args.instances)
    hosts = {r: f"node{r // (args.ranks // 2)}" for r in tables}
    steps = frozenset(range(args.instances // 100))
    started = time.perf_counter()
    cr = cross_rank(tables, hosts)
    matched_s = time.perf_counter() - started
    st = stragglers(
        cr.aligned,
        compute_per_step=dict.fromkeys(tables, 10_000_000),
        step_time=dict.fromkeys(tables, 40_000_000),
        included_steps=dict.fromkeys(tables, steps),
    )
    straggled_s = time.perf_counter() - started
    rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        f"machine: {platform.processor() or platform.machine()}, python {platform.python_version()}"
    )
    print(f"{args.ranks} ranks x {args.instances} instances = {args.ranks * args.instances:,} rows")
    print(f"matching + clocks: {matched_s:.2f} s; + stragglers: {straggled_s:.2f} s total")
    print(
        f"matched {cr.matched}/{cr.instances}; flagged {list(st.flagged)}; "
        f"host offsets {[c.offset_ns for c in cr.clocks]}; peak RSS {rss_mib:,.0f} MiB"
    )


if __name__ == "__main__":
    main()
