"""The hidden-wait inference at scale (issue 45; analysis/hidden.py): a world collective per
element on every rank, a share of the rows with GPU idle before them, both readings timed.
The release search is by element and bounded per idle, so it grows with the waiting rows, not
with the ranks a collective holds.

    python bench/hidden_scale.py --ranks 2048 --elements 200 --idle-share 0.05
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from tracecomm.analysis.hidden import ChainRows, Reading, hidden_waits


def rows_of(ranks: int, elements: int, share: float) -> ChainRows:
    rng = np.random.default_rng(0)
    n = ranks * elements
    rank = np.repeat(np.arange(ranks), elements)
    inst = np.tile(np.arange(elements), ranks)
    arrival = inst * 1_000_000 + rng.integers(0, 500_000, n)
    end = (inst + 1) * 1_000_000 - 100_000 + rng.integers(0, 1_000, n)
    idle = np.where(rng.random(n) < share, 2_000_000, 0)
    return ChainRows(
        rank=rank,
        inst=inst,
        code=np.full(n, 2),
        label=np.stack([inst // 50, np.full(n, 2), inst % 50], axis=1),
        in_step=np.ones(n, dtype=bool),
        arrival=arrival,
        start=arrival.copy(),
        end=end,
        idle=idle,
        pred=np.zeros(n, dtype=np.int64),
        kind=("", "", "AllReduce ×N"),
        first_row=inst.copy(),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=2048)
    parser.add_argument("--elements", type=int, default=200)
    parser.add_argument("--idle-share", type=float, default=0.05)
    args = parser.parse_args()
    rows = rows_of(args.ranks, args.elements, args.idle_share)
    waiting = int((rows.idle > 0).sum())
    for reading in Reading:
        began = time.perf_counter()
        found = hidden_waits(rows, reading)
        took = time.perf_counter() - began
        print(
            f"{args.ranks} ranks × {args.elements} elements, {waiting} waiting rows, "
            f"{reading.value}: {found.row.size} waits in {took:.2f} s"
        )


if __name__ == "__main__":
    main()
