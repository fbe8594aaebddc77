"""Case c9, the efficient side: uneven inputs under DDP with a hand-written early exit.

Same model, data and ranks as join.py (rank 0: 10 batches, the others 13). All ranks first
run the batches every rank has in lock-step through DDP (gradients all-reduced as usual);
a rank with batches left then finishes them on the local module (`model.module`: no DDP
hooks armed, no collectives), while a finished rank simply returns and can go idle. The
extra steps scale the loss by 1/world_size, the same gradient scaling Join applies
(`divide_by_initial_world_size=True`: the finished rank contributes zeros), so the ranks
that keep training follow exactly the same updates as under join.py.

    magneton record examples/ddp_join/manual.py --nproc 2 --db prof --run manual
"""

from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

BATCH_SIZE, DIM, HIDDEN = 128, 64, 256
EARLY_BATCHES, BATCHES = 10, 13  # rank 0 runs out of data first


def setup():
    if not dist.is_initialized():
        dist.init_process_group("gloo", timeout=timedelta(seconds=60))
    rank = dist.get_rank()
    torch.manual_seed(0)
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
    # agree once, outside the measured entry, on how many batches every rank has
    common = torch.tensor(len(data))
    dist.all_reduce(common, op=dist.ReduceOp.MIN)
    return model, opt, data, int(common)


def main(model, opt, data, common):
    for x, y in data[:common]:  # in step with every rank: DDP all-reduces the gradients
        opt.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        opt.step()
    for x, y in data[common:]:  # only this rank has data left: local steps, no collectives
        opt.zero_grad()
        loss = F.mse_loss(model.module(x), y) / dist.get_world_size()
        loss.backward()
        opt.step()
    return loss.detach()
