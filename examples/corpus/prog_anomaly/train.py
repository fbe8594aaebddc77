"""An ordinary training script with a `--detect-anomaly` debugging flag.

Upstream pattern (pytorch/pytorch, Lightning `detect_anomaly=True`: a debugging switch left
on in a launch script; every forward op records a traceback, every backward op checks
its outputs).
"""

import argparse

import torch
from torch import nn


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--detect-anomaly", action="store_true")
    return p.parse_args()


def main():
    args = parse_args()
    torch.manual_seed(0)
    torch.autograd.set_detect_anomaly(args.detect_anomaly)
    model = nn.Sequential(*(nn.Sequential(nn.Linear(256, 256), nn.Tanh()) for _ in range(16)))
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    x = torch.randn(64, 256)
    for _ in range(args.steps):
        loss = model(x).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    print(f"loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
