"""Scaling a batch of decoded images to [-1, 1]. Decoders hand out height x width x channel
pixels; permuting them to N, C, H, W is a view whose memory order is channels-last. This
side calls `.contiguous()` "to be safe" before the scaling, which rewrites the
whole batch into the N, C, H, W memory order: a full, strided copy every call.

Pair: b.py makes the same call with `memory_format=torch.channels_last`, the order the
batch is already in, so `.contiguous` returns the batch as it is and copies nothing.
Expected diagnosis: the extra copy on a.py's `.contiguous()` line, and a patch that
carries b's argument over to that call.
"""

import torch

BATCH, SIZE = 16, 112


def setup():
    torch.manual_seed(0)
    pixels = torch.rand(BATCH, SIZE, SIZE, 3)  # as decoded: H, W, C
    return (pixels.permute(0, 3, 1, 2),)


def main(images):
    images = images.contiguous()
    return images * 2.0 - 1.0  # pixels to [-1, 1], as diffusion models take them
