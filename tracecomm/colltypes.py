"""The collective types (metrics.md §1): one list for the engine that assigns them and for the
report document that carries them (the generator keeps its own, as its ground truth must)."""

from __future__ import annotations

from typing import Literal, get_args

CollType = Literal[
    "AllGather",
    "ReduceScatter",
    "AllReduce",
    "Broadcast",
    "Reduce",
    "AllToAll",
    "SendRecv",
    "Other",
]
COLL_TYPES: tuple[str, ...] = get_args(CollType)
