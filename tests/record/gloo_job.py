"""A 2-process data-parallel job on gloo (CPU) recorded through ``tracecomm.profile``: run by
the tests as ``python gloo_job.py OUT MODE PORT``. MODE ``steps`` records steps 3-5; MODE
``demand`` records on demand, asked by SIGUSR1 to rank 1 alone before step 4; ``stopped`` is
``demand`` with rank 1 unable to write its folder (it still votes); ``late`` enters the
recorder before init_process_group."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import tracecomm

# Linear(256, 512) + Linear(512, 256): 262,912 parameters, one DDP bucket (25 MiB), so one
# AllReduce of 262,912 float32 per step
PARAMETERS = 256 * 512 + 512 + 512 * 256 + 256
BATCH, WIDTH = 64, 256
FLOPS_PER_STEP = 6 * PARAMETERS * BATCH  # forward + backward, 2 FLOPs per multiply-add
STEPS = 14


def main(rank: int, out: str, mode: str, port: str) -> None:
    import torch.distributed as dist  # here: the tests import the figures without torch

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
    if mode == "late":  # the recorder first (the README's order for NCCL's variables)
        with tracecomm.profile(out, steps=range(3, 6)) as prof:
            dist.init_process_group("gloo", rank=rank, world_size=2)
            train(rank, prof, mode)
        dist.destroy_process_group()
        return
    dist.init_process_group("gloo", rank=rank, world_size=2)
    if mode == "stopped" and rank == 1:  # a folder rank 1 cannot write: it records nothing
        Path(out).mkdir(parents=True, exist_ok=True)
        (Path(out) / "file").write_text("")
        out = str(Path(out) / "file" / "run")
    when = (
        {"on_demand": True, "record_steps": 3, "poll_every": 2}
        if mode in ("demand", "stopped")
        else {"steps": range(3, 6)}
    )
    with tracecomm.profile(
        out, model_flops_per_step=FLOPS_PER_STEP, tokens_per_step=BATCH, **when
    ) as prof:
        train(rank, prof, mode)
    dist.destroy_process_group()


def train(rank: int, prof: tracecomm.record.Recorder, mode: str) -> None:
    import torch
    import torch.distributed as dist

    torch.manual_seed(rank)
    model = torch.nn.Sequential(
        torch.nn.Linear(WIDTH, 512), torch.nn.ReLU(), torch.nn.Linear(512, WIDTH)
    )
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.01)
    for step in range(STEPS):
        if mode in ("demand", "stopped") and rank == 1 and step == 4:
            os.kill(os.getpid(), signal.SIGUSR1)
        ddp(torch.randn(BATCH, WIDTH)).sum().backward()
        optimizer.step()
        optimizer.zero_grad()
        if mode == "stopped":  # the job's collectives stay its own: no vote pairs with them
            check = torch.ones(1)
            dist.all_reduce(check)
            assert check.item() == 2.0, f"rank {rank} step {step}: all_reduce gave {check.item()}"
        prof.step()


if __name__ == "__main__":
    import torch.multiprocessing as mp

    mp.spawn(main, args=tuple(sys.argv[1:4]), nprocs=2)
