"""Hidden states saved for logging with x.detach() on every layer.

Upstream pattern (feature-extraction hooks and EMA code that clone tensors they only read;
PyTorch's warning text recommends `.clone().detach()` and users copy it where `.detach()`
would do). Pair: b.py uses .detach(). Expected root: the clone line.
"""

import torch
from torch import nn


def setup():
    torch.manual_seed(0)
    layers = nn.ModuleList(nn.Linear(1024, 1024) for _ in range(6)).eval()
    x = torch.randn(512, 1024)
    return layers, x


@torch.no_grad()
def main(layers, x):
    saved = []
    for layer in layers:
        x = torch.relu(layer(x))
        saved.append(x.detach())
    return x, saved
