"""Layer norm over the channels of an NCHW tensor via a layout round trip:
permute to NHWC, F.layer_norm over the last dim, permute back, .contiguous().

Pair: b.py computes the same normalization along dim 1 with mean/var (ConvNeXt's
channels_first LayerNorm). Expected diagnosis: a finding on the norm region on whichever
side costs more, naming the layout round trip (paper case c12, pytorch-76012).
"""

import torch
import torch.nn.functional as F

N, C, H, W = 8, 64, 32, 32
EPS = 1e-6


def setup():
    torch.manual_seed(0)
    x = torch.randn(N, C, H, W)
    weight = torch.rand(C) + 0.5
    bias = torch.randn(C)
    return x, weight, bias


def main(x, weight, bias):
    y = x.permute(0, 2, 3, 1)
    y = F.layer_norm(y, (C,), weight, bias, EPS)
    return y.permute(0, 3, 1, 2).contiguous()
