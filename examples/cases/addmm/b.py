"""Negative control: the same biased projection as bias + torch.mm(x, w).

Pair: a.py uses torch.addmm(bias, x, w). Expected: no finding.
"""

import torch

M, K, N = 512, 4096, 512


def setup():
    torch.manual_seed(0)
    x = torch.randn(M, K)
    w = torch.randn(K, N) / K**0.5
    bias = torch.randn(N)
    return x, w, bias


def main(x, w, bias):
    return bias + torch.mm(x, w)
