"""Pipelines as chains of send/recv peers (metrics.md §10).

Pipeline jobs name their send/recv groups in many ways: one group per whole pipeline, or one
per adjacent stage pair and direction (Megatron, NDTimeline). Whatever the names, a pipeline is
the chain of ranks linked by send/recv peers: its ends are the first and the last stage, and
the first stage is the end whose first send/recv of the trace is a send (it runs the first
forward and hands its activations on). A component of the peer graph that is not a chain (a
ring, a tree) keeps its ranks in rank order. Everything here is ordered by rank numbers, never
by names or by hashing.
"""

from __future__ import annotations

import polars as pl


def pipeline_chains(p2p: pl.DataFrame, analyzed: list[int]) -> dict[str, tuple[int, ...]]:
    """``p2p``: send/recv kernels with rank, peer, direction, start_ns (one clock). Returns
    name -> ranks from the first stage to the last, ordered by the first stage's rank; the name
    spells the chain ("0→2→4→6")."""
    known = set(analyzed)
    links = (
        p2p.filter(pl.col("peer").is_not_null() & (pl.col("peer") != pl.col("rank")))
        .select(
            pl.min_horizontal("rank", "peer").alias("a"),
            pl.max_horizontal("rank", "peer").alias("b"),
        )
        .unique()
        .sort("a", "b")
    )
    neighbours: dict[int, list[int]] = {}
    for a, b in links.iter_rows():
        if a in known and b in known:
            neighbours.setdefault(a, []).append(b)
            neighbours.setdefault(b, []).append(a)
    first_is_send = _first_is_send(p2p)
    chains = [_ordered(c, neighbours, first_is_send) for c in _components(neighbours)]
    return {"→".join(map(str, c)): c for c in sorted(chains)}


def stage_of(chains: dict[str, tuple[int, ...]]) -> dict[int, int]:
    """Each pipeline rank's stage: its place in its chain (0 = first stage)."""
    return {rank: i for chain in chains.values() for i, rank in enumerate(chain)}


def chain_of(chains: dict[str, tuple[int, ...]]) -> dict[int, tuple[int, ...]]:
    """Each pipeline rank's chain (one chain per rank: chains are components)."""
    return {rank: chain for chain in chains.values() for rank in chain}


def _first_is_send(p2p: pl.DataFrame) -> dict[int, bool]:
    first = (
        p2p.filter(pl.col("direction").is_not_null())
        .sort("rank", "start_ns", "direction")
        .group_by("rank", maintain_order=True)
        .agg(pl.col("direction").first())
    )
    return {rank: d == "send" for rank, d in first.iter_rows()}


def _components(neighbours: dict[int, list[int]]) -> list[list[int]]:
    seen: set[int] = set()
    out = []
    for start in sorted(neighbours):
        if start in seen:
            continue
        component, todo = [], [start]
        seen.add(start)
        while todo:
            rank = todo.pop()
            component.append(rank)
            for other in sorted(neighbours[rank]):
                if other not in seen:
                    seen.add(other)
                    todo.append(other)
        out.append(sorted(component))
    return out


def _ordered(
    component: list[int], neighbours: dict[int, list[int]], first_is_send: dict[int, bool]
) -> tuple[int, ...]:
    degrees = [len(neighbours[r]) for r in component]
    ends = [r for r in component if len(neighbours[r]) == 1]
    is_chain = max(degrees) <= 2 and len(ends) == 2
    if not is_chain:
        return tuple(component)
    # the first stage is the end that sends first; with no direction known, the lower rank
    head = min(ends, key=lambda r: (not first_is_send.get(r, False), r))
    chain, previous = [head], -1
    while len(chain) < len(component):
        here = chain[-1]
        step = next(r for r in neighbours[here] if r != previous)
        previous = here
        chain.append(step)
    return tuple(chain)
