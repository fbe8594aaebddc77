"""Negative control: a biased projection with the fused torch.addmm(bias, x, w).

Pair: b.py computes bias + torch.mm(x, w). The shape keeps the GEMM dominant (a long
reduction dimension, a small 512x512 output), so the bias copy of addmm and the extra add
of b cost well under the 10% detection threshold; both run the same oneDNN/MKL GEMM.
(With a large output — the paper's 2048x1024 @ 1024x4096 — this CPU runs addmm about 30%
faster than mm + add, which would be a real finding, not a control.) Expected: no
finding. Paper case c10 is a GPU/large-batch effect; the knowledge rule exists, but a
rule never invents a finding without the measured difference.
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
    return torch.addmm(bias, x, w)
