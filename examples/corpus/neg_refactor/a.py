"""Negative control: an MLP block written inline.

Pair: b.py computes the same thing through a helper function and other names (a pure
refactor). Nothing may be flagged.
"""

import torch
from torch import nn


def setup():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(512, 2048), nn.GELU(), nn.Linear(2048, 512)).eval()
    x = torch.randn(128, 512)
    return model, x


@torch.no_grad()
def main(model, x):
    h = model[1](model[0](x))
    return model[2](h) + x
