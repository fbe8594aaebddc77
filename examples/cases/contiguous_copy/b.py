"""Scaling a batch of decoded images to [-1, 1], kept in the memory order the decoder produced:
`.contiguous(memory_format=torch.channels_last)` is a no-op on the permuted batch.

Pair: a.py calls `.contiguous()` and copies the batch. See a.py for the expected diagnosis.
"""

import torch

BATCH, SIZE = 16, 112


def setup():
    torch.manual_seed(0)
    pixels = torch.rand(BATCH, SIZE, SIZE, 3)  # as decoded: H, W, C
    return (pixels.permute(0, 3, 1, 2),)


def main(images):
    images = images.contiguous(memory_format=torch.channels_last)
    return images * 2.0 - 1.0  # pixels to [-1, 1], as diffusion models take them
