"""Layer norm over the channels of an NCHW tensor computed in place along dim 1
(mean and biased variance over channels, as ConvNeXt's channels_first LayerNorm does).

Pair: a.py uses permute -> F.layer_norm -> permute -> .contiguous().
See a.py for the expected diagnosis.
"""

import torch

N, C, H, W = 8, 64, 32, 32
EPS = 1e-6


def setup():
    torch.manual_seed(0)
    x = torch.randn(N, C, H, W)
    weight = torch.rand(C) + 0.5
    bias = torch.randn(C)
    return x, weight, bias


def main(x, weight, bias):
    mean = x.mean(1, keepdim=True)
    var = (x - mean).pow(2).mean(1, keepdim=True)
    y = (x - mean) / torch.sqrt(var + EPS)
    return weight[:, None, None] * y + bias[:, None, None]
