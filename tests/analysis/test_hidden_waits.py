"""Hidden waits (metrics.md §6, analysis/hidden.py) on chains built by hand: idle that resumes
a steady lag after another rank's element, step after step, is a wait on it; idle that ends
when the rank's own host work does is not; releases of tensor-parallel peers that end
together are one release whichever ends last."""

from __future__ import annotations

import numpy as np

from tracecomm.analysis.hidden import ChainRows, Reading, hidden_waits

MS = 1_000_000
KINDS = ("", "", "AllReduce ×2", "SendRecv send 1")


def chain(release_ends: list[list[int]], resumes: list[int], idle: list[int]) -> ChainRows:
    """Per step: the ranks before the waiter each end a send (code 3) at release_ends[s][r];
    the waiter (the last rank) resumes with an all-reduce (code 2) at resumes[s] after
    idle[s] of idle."""
    rows: list[
        tuple[int, int, int, int, int, int, int]
    ] = []  # rank, inst, code, step, arr, end, idle
    inst = 0
    for s, (ends, t, gap) in enumerate(zip(release_ends, resumes, idle, strict=True)):
        for r, e in enumerate(ends):
            rows.append((r, inst, 3, s, e - MS, e, 0))
        inst += 1
        rows.append((len(ends), inst, 2, s, t, t + MS, gap))
        inst += 1
    a = np.array(rows, dtype=np.int64)
    order = np.lexsort((a[:, 1], a[:, 0]))  # grouped by rank, in chain order
    a = a[order]
    first = {int(i): n for n, i in reversed(list(enumerate(a[:, 1])))}
    return ChainRows(
        rank=a[:, 0],
        inst=a[:, 1],
        code=a[:, 2],
        label=np.stack([a[:, 3], a[:, 2], np.zeros(len(a), dtype=np.int64)], axis=1),
        in_step=np.ones(len(a), dtype=bool),
        arrival=a[:, 4],
        start=a[:, 4],
        end=a[:, 5],
        idle=a[:, 6],
        pred=np.zeros(len(a), dtype=np.int64),
        kind=KINDS,
        first_row=np.array([first[int(i)] for i in a[:, 1]], dtype=np.int64),
    )


def test_a_steady_lag_after_another_ranks_element_is_a_wait() -> None:
    base = [100 * MS, 200 * MS, 300 * MS]
    ends = [[b + 40 * MS] for b in base]  # the release comes at 40 ms into each idle window…
    idle_starts = [b - d for b, d in zip(base, (5 * MS, 20 * MS, 35 * MS), strict=True)]
    resumes = [e[0] + 2 * MS + k * 100_000 for k, e in enumerate(ends)]  # … resume 2.0–2.2 ms later
    got = hidden_waits(
        chain(ends, resumes, [t - s for t, s in zip(resumes, idle_starts, strict=True)]),
        Reading.INFERRED,
    )
    (found,) = got.inferred
    assert (found.waiters, found.source_rank, found.steps, found.of_steps) == ((1,), 0, 3, 3)
    assert (found.lag_min_ns, found.lag_max_ns) == (2 * MS, 2 * MS + 200_000)
    assert got.row.size == 3 and np.all(got.lag >= 2 * MS)


def test_idle_that_ends_with_its_own_host_work_is_no_wait() -> None:
    # the waiter resumes 30 ms after its idle begins every step, whenever the other rank ends
    base = [100 * MS, 200 * MS, 300 * MS]
    ends = [[b + d] for b, d in zip(base, (5 * MS, 15 * MS, 25 * MS), strict=True)]
    resumes = [b + 30 * MS for b in base]
    got = hidden_waits(chain(ends, resumes, [30 * MS] * 3), Reading.INFERRED)
    assert got.inferred == () and got.row.size == 0
    assert got.idle_rows.size == 3  # unexplained: the other reading takes them as waits
    other = hidden_waits(chain(ends, resumes, [30 * MS] * 3), Reading.IDLE_AS_WAIT)
    assert other.row.size == 3


def test_peers_that_end_together_are_one_release() -> None:
    # four tensor-parallel ranks end their sends within 3 µs; which ends last varies by step
    base = [100 * MS, 200 * MS, 300 * MS]
    jitter = [(0, 1_000, 2_000, 3_000), (3_000, 0, 1_000, 2_000), (2_000, 3_000, 0, 1_000)]
    idle_starts = [b - d for b, d in zip(base, (5 * MS, 20 * MS, 35 * MS), strict=True)]
    ends = [[b + 40 * MS + j for j in js] for b, js in zip(base, jitter, strict=True)]
    resumes = [max(e) + 2 * MS for e in ends]
    got = hidden_waits(
        chain(ends, resumes, [t - s for t, s in zip(resumes, idle_starts, strict=True)]),
        Reading.INFERRED,
    )
    (found,) = got.inferred
    assert found.waiters == (4,) and found.steps == 3


def test_nothing_to_wait_for_is_nothing() -> None:
    got = hidden_waits(chain([[10 * MS]], [20 * MS], [0]), Reading.INFERRED)
    assert got.row.size == 0 and got.inferred == () and got.idle_rows.size == 0
