"""A small convolutional classifier at inference, model in the default (NCHW,
contiguous) memory format.

Pair: b.py is the same model converted in setup() with
`model.to(memory_format=torch.channels_last)`, as PyTorch's channels-last tutorial
recommends for convolutions. Both sides call the same operators the same way; only the
weights' strides differ. Expected diagnosis: a kernel-argument divergence naming the
operand's strides, followed back to the parameter and from there to the `memory_format=`
keyword in setup().
"""

import torch
from torch import nn

BATCH, CHANNELS, SIZE = 8, 64, 64


def make_model() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, CHANNELS, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(CHANNELS, CHANNELS, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(CHANNELS, CHANNELS, 3, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(CHANNELS, 10),
    )


def setup():
    torch.manual_seed(0)
    model = make_model().eval()
    x = torch.randn(BATCH, 3, SIZE, SIZE)
    return model, x


@torch.no_grad()
def main(model, x):
    return model(x)
