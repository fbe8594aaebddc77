"""Depthwise 3x3 downsampling of a feature map (the stride-2 spatial step of a
MobileNet-style block): the convolution pads inside its kernel (`padding=1`), so no
padded copy of the activation is written.

Pair: a.py pads with F.pad first. See a.py for the expected diagnosis.
"""

import torch
import torch.nn.functional as F

BATCH, CHANNELS, SIZE = 8, 64, 56


def setup():
    torch.manual_seed(0)
    x = torch.randn(BATCH, CHANNELS, SIZE, SIZE)
    weight = torch.randn(CHANNELS, 1, 3, 3)
    return x, weight


@torch.no_grad()
def main(x, weight):
    return F.conv2d(x, weight, stride=2, padding=1, groups=CHANNELS)
