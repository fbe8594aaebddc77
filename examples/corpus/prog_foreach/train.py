"""An ordinary training script: an MLP regressor trained with AdamW, optimizer options on
the command line (`--foreach 0|1`, as many training repos expose it).

Upstream pattern (pytorch/pytorch: the per-parameter for-loop AdamW vs the `_foreach_*`
implementation; training scripts that pass `foreach=` from a flag).
"""

import argparse

import torch
from torch import nn


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--foreach", type=int, default=1, help="1: the _foreach_ AdamW kernels")
    return p.parse_args()


def main():
    args = parse_args()
    torch.manual_seed(0)
    model = nn.Sequential(*(nn.Sequential(nn.Linear(64, 64), nn.ReLU()) for _ in range(24)))
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, foreach=bool(args.foreach))
    x, y = torch.randn(16, 64), torch.randn(16, 64)
    for _ in range(args.steps):
        loss = (model(x) - y).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    print(f"loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
