"""A small convolutional classifier at inference, converted to channels-last in setup()
(`model.to(memory_format=torch.channels_last)`, PyTorch's channels-last tutorial).

Pair: a.py keeps the default NCHW-contiguous format. See a.py for the expected diagnosis.
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
    model = model.to(memory_format=torch.channels_last)
    x = torch.randn(BATCH, 3, SIZE, SIZE)
    return model, x


@torch.no_grad()
def main(model, x):
    return model(x)
