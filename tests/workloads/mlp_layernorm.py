"""Three Linear-GELU-LayerNorm blocks (functional, fixed seed): Python between the ops
(`F.gelu`, `F.layer_norm` wrappers) as well as kernels, for A/A tests."""

import torch


def setup():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 256, generator=g)
    ws = [torch.randn(256, 256, generator=g) / 16 for _ in range(3)]
    return x, ws


def main(x, ws):
    h = x
    for w in ws:
        h = torch.nn.functional.gelu(h @ w)
        h = torch.nn.functional.layer_norm(h, (256,))
    return h.softmax(-1)
