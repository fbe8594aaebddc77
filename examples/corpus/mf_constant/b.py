"""Channels-last activations made contiguous in the default format before each conv.

Upstream pattern (pytorch/pytorch#92542-style reports: "contiguous() after permute undoes
channels_last"): the memory format is a module-level constant; both sides run the same
statement `y.contiguous(memory_format=MEMORY_FORMAT)`. Pair: b.py sets MEMORY_FORMAT to
torch.channels_last, so the call is a no-op on channels-last activations.
Expected root: the MEMORY_FORMAT assignment at the top of this file.
"""

import torch
from torch import nn

MEMORY_FORMAT = torch.channels_last


def setup():
    torch.manual_seed(0)
    convs = nn.ModuleList(nn.Conv2d(32, 32, 3, padding=1) for _ in range(3)).eval()
    convs = convs.to(memory_format=torch.channels_last)
    x = torch.randn(8, 32, 48, 48).to(memory_format=torch.channels_last)
    return convs, x


@torch.no_grad()
def main(convs, x):
    y = x
    for conv in convs:
        y = y.contiguous(memory_format=MEMORY_FORMAT)
        y = torch.relu(conv(y))
    return y
