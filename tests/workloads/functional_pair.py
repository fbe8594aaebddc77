"""Two functional variants of one computation, picked by MAGNETON_TEST_VARIANT."""

import os

import torch
import torch.nn.functional as F

VARIANT = os.environ.get("MAGNETON_TEST_VARIANT", "fused")


def setup():
    torch.manual_seed(0)
    return torch.randn(64, 128), torch.randn(128, 256), torch.randn(256)


def main(x, w, b):
    if VARIANT == "fused":
        h = torch.addmm(b, x, w)
    else:
        h = torch.mm(x, w) + b
    return F.softmax(h, dim=-1)
