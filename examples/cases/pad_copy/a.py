"""Depthwise 3x3 downsampling of a feature map (the stride-2 spatial step of a
MobileNet-style block), with the padding written by hand: F.pad builds a zero-padded
copy of the whole activation, then the convolution runs unpadded on the copy. With
stride 2 the convolution computes a quarter as many outputs as the copy writes
elements, so the copy is a large share of the step's work.

Pair: b.py makes the same F.conv2d call and passes `padding=1` instead, so the
convolution pads inside its kernel and no padded copy is written. Same result, bit for
bit. Expected diagnosis: the two sides' calls at the divergence differ only by their
arguments; the patch carries b's arguments over to a's call.
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
    return F.conv2d(F.pad(x, (1, 1, 1, 1)), weight, stride=2, groups=CHANNELS)
