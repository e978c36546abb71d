"""Which rank this process is, and how the ranks agree on when to record (on demand)."""

from __future__ import annotations

import datetime as dt
import os
import socket
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class World:
    rank: int
    size: int
    local_rank: int
    host: str
    backend: str | None  # the default process group's, None without one
    initialized: bool  # a process group exists (the ranks can agree through it)

    @property
    def samples_power(self) -> bool:
        """One process per host samples its GPUs: local rank 0."""
        return self.local_rank == 0


def _env_int(name: str) -> int | None:
    value = os.environ.get(name, "")
    return int(value) if value.isdigit() else None


def this_world(dist: Any | None) -> World:
    """From ``torch.distributed`` when its process group is initialized, else the launcher's
    environment (torchrun: RANK, WORLD_SIZE, LOCAL_RANK), else one process."""
    host = socket.gethostname()
    local = _env_int("LOCAL_RANK")
    if dist is not None and dist.is_available() and dist.is_initialized():
        rank, size = dist.get_rank(), dist.get_world_size()
        backend = str(dist.get_backend())
        return World(rank, size, local if local is not None else rank, host, backend, True)
    rank, size = _env_int("RANK"), _env_int("WORLD_SIZE")
    rank = rank if rank is not None else 0
    return World(rank, size or 1, local if local is not None else rank, host, None, False)


# how long a rank waits for the others' votes: the ranks of a job run within a step of each
# other, and a rank that never votes has failed the job already
VOTE_TIMEOUT = dt.timedelta(minutes=10)


class Agreement:
    """The ranks' vote on whether anyone was asked to record: an all-reduce (max) of one flag,
    on a gloo group of its own (a CPU all-reduce: no GPU sync, nothing queued on the job's
    streams or groups). Every rank calls ``any_asked`` at the same steps."""

    def __init__(self, torch: Any, world: World) -> None:
        self._torch = torch
        self._group = None
        if world.initialized and world.size > 1:
            # a group of its own, gloo on any job: a vote never pairs with the job's own
            # collectives, even on a gloo job. new_group is itself collective: every rank
            # gets here at the same step (Recorder._poll)
            self._group = torch.distributed.new_group(backend="gloo", timeout=VOTE_TIMEOUT)
        self._alone = self._group is None

    def any_asked(self, asked: bool) -> bool:
        if self._alone:
            return asked
        flag = self._torch.tensor([1 if asked else 0], dtype=self._torch.int32)
        dist = self._torch.distributed
        dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=self._group)
        return bool(flag.item())
