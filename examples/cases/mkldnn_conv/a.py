"""A two-convolution stack with oneDNN (MKLDNN) disabled at import time.

Pair: b.py leaves torch.backends.mkldnn.enabled = True.
Expected diagnosis: a native divergence at aten::_convolution (thnn_conv2d instead of
mkldnn_convolution); key variable torch.backends.mkldnn.enabled; origin the flag line below.
"""

import torch
from torch import nn

torch.backends.mkldnn.enabled = False


def setup():
    torch.manual_seed(0)
    # one intra-op thread on both sides: on a small shared CI machine a multi-threaded
    # oneDNN kernel waits at its barriers whenever a worker is descheduled, which buries
    # the thnn/oneDNN difference in noise; the same setting on both sides
    torch.set_num_threads(1)
    model = nn.Sequential(
        nn.Conv2d(32, 64, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(64, 64, 3, padding=1),
    ).eval()
    # 64x64 images: thnn's im2col buffers (5-9 MB per image) leave the cache, so thnn
    # costs 2.7x oneDNN (68 vs 25 ms, one thread, beside a memory-bound process on the
    # other core); at 32x32 it was 1.4x, and one fresh-clone CI run under two test
    # workers recorded the sides 1.1x apart and found nothing
    x = torch.randn(4, 32, 64, 64)
    return model, x


def main(model, x):
    with torch.no_grad():
        return model(x)
