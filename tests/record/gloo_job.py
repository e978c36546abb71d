"""A 2-process data-parallel job on gloo (CPU) recorded through ``tracecomm.profile``: run by
the tests as ``python gloo_job.py OUT MODE PORT``. MODE ``steps`` records steps 3-5; MODE
``demand`` records on demand, asked by SIGUSR1 to rank 1 alone before step 4."""

from __future__ import annotations

import os
import signal
import sys

import tracecomm

# Linear(256, 512) + Linear(512, 256): 262,912 parameters, one DDP bucket (25 MiB), so one
# AllReduce of 262,912 float32 per step
PARAMETERS = 256 * 512 + 512 + 512 * 256 + 256
BATCH, WIDTH = 64, 256
FLOPS_PER_STEP = 6 * PARAMETERS * BATCH  # forward + backward, 2 FLOPs per multiply-add
STEPS = 14


def main(rank: int, out: str, mode: str, port: str) -> None:
    import torch  # here: the tests import this module's figures without torch
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    torch.manual_seed(rank)
    model = torch.nn.Sequential(
        torch.nn.Linear(WIDTH, 512), torch.nn.ReLU(), torch.nn.Linear(512, WIDTH)
    )
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.01)
    when = (
        {"on_demand": True, "record_steps": 3, "poll_every": 2}
        if mode == "demand"
        else {"steps": range(3, 6)}
    )
    with tracecomm.profile(
        out, model_flops_per_step=FLOPS_PER_STEP, tokens_per_step=BATCH, **when
    ) as prof:
        for step in range(STEPS):
            if mode == "demand" and rank == 1 and step == 4:
                os.kill(os.getpid(), signal.SIGUSR1)
            ddp(torch.randn(BATCH, WIDTH)).sum().backward()
            optimizer.step()
            optimizer.zero_grad()
            prof.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    import torch.multiprocessing as mp

    mp.spawn(main, args=tuple(sys.argv[1:4]), nprocs=2)
