"""Convolutions run inside `torch.backends.mkldnn.flags(enabled=False)`.

Upstream pattern (pytorch/pytorch issues: a oneDNN workaround context left around the
model call sends CPU convolutions to the slow native path): state set during the call.
Pair: b.py has the flag on. Expected root: the USE_ONEDNN assignment.
"""

import torch
from torch import nn

USE_ONEDNN = True


def setup():
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.Conv2d(32, 32, 3, padding=1)
    ).eval()
    x = torch.randn(8, 16, 64, 64)
    return model, x


@torch.no_grad()
def main(model, x):
    with torch.backends.mkldnn.flags(enabled=USE_ONEDNN):
        return model(x)
