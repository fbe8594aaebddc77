"""SDPA restricted to the math backend by a context manager around the call.

Upstream pattern (pytorch/pytorch issues where `sdpa_kernel([SDPBackend.MATH])`, left
from debugging, disables the fused kernels): the state is set while the program runs,
not at import. Pair: b.py allows the fused backends too.
Expected root: the BACKENDS assignment.
"""

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

BACKENDS = [SDPBackend.FLASH_ATTENTION, SDPBackend.MATH]


def setup():
    torch.manual_seed(0)
    q, k, v = (torch.randn(4, 8, 256, 64) for _ in range(3))
    return q, k, v


@torch.no_grad()
def main(q, k, v):
    out = q
    with sdpa_kernel(BACKENDS):
        for _ in range(4):
            out = F.scaled_dot_product_attention(out, k, v, is_causal=True)
    return out
