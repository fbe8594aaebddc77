"""Negative control: .contiguous() on a tensor that is already contiguous (a no-op).

Pair: b.py omits the call. Nothing may be flagged.
"""

import torch
from torch import nn


def setup():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 512)).eval()
    x = torch.randn(256, 512)
    return model, x


@torch.no_grad()
def main(model, x):
    return model(x.contiguous())
