"""Case c9 (PyTorch discussion 181115; paper §2.1 case 2): uneven inputs under DDP, handled
by `torch.distributed.algorithms.join.Join`.

Two gloo ranks train the same small MLP; rank 0 has 10 batches, the others 13 (1.3:1).
Join lets rank 0 leave its loop early: its context manager then *shadows* every collective
the other ranks still run (one all-reduce to count the ranks still training, one to agree
on gradient sync, one per gradient bucket), so the finished rank keeps communicating, on a
GPU keeping the device busy, instead of going idle. Join also adds two all-reduces to every
forward pass on every rank, and a final model broadcast.

Pair: manual.py does the same training with a hand-written early exit. Expected diagnosis
(`magneton diff --db DIR join manual`): the shadow collectives on rank 0 are redundant,
caused by the `with Join([model])` line below.

    magneton record examples/ddp_join/join.py --nproc 2 --db prof --run join
"""

from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.algorithms.join import Join
from torch.nn.parallel import DistributedDataParallel as DDP

BATCH_SIZE, DIM, HIDDEN = 128, 64, 256
EARLY_BATCHES, BATCHES = 10, 13  # rank 0 runs out of data first


def setup():
    if not dist.is_initialized():
        dist.init_process_group("gloo", timeout=timedelta(seconds=60))
    rank = dist.get_rank()
    torch.manual_seed(0)  # same initial weights everywhere (DDP broadcasts rank 0's anyway)
    net = torch.nn.Sequential(
        torch.nn.Linear(DIM, HIDDEN), torch.nn.ReLU(), torch.nn.Linear(HIDDEN, 1)
    )
    model = DDP(net)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(100 + rank)
    n = EARLY_BATCHES if rank == 0 else BATCHES
    data = [
        (torch.randn(BATCH_SIZE, DIM, generator=g), torch.randn(BATCH_SIZE, 1, generator=g))
        for _ in range(n)
    ]
    return model, opt, data


def main(model, opt, data):
    with Join([model]):
        for x, y in data:
            opt.zero_grad()
            loss = F.mse_loss(model(x), y)
            loss.backward()
            opt.step()
    return loss.detach()
