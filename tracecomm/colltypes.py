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

# gloo's own ranges, on its worker threads, around the work of each collective: their "Input
# Dims" and "Input type" (record_shapes) are the message. gloo writes no record_param_comms,
# so a gloo trace has no "In msg nelems" (the names: PyTorch's ProcessGroupGloo).
GLOO_OPS = frozenset(
    {
        "gloo:all_gather",
        "gloo:all_reduce",
        "gloo:sparse_all_reduce",
        "gloo:all_to_all",
        "gloo:barrier",
        "gloo:broadcast",
        "gloo:gather",
        "gloo:reduce",
        "gloo:scatter",
        "gloo:send",
        "gloo:recv",
    }
)
