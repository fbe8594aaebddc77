"""Grouped-query attention with K/V heads copied by repeat_interleave before SDPA.

Upstream pattern (transformers' `repeat_kv` in Llama/Mistral attention; vLLM and PyTorch
added `enable_gqa=True` so SDPA reads the shared heads without copies). Pair: b.py passes
enable_gqa=True. Expected root: the repeat_interleave line (work with no counterpart).
"""

import torch
import torch.nn.functional as F

HEADS, KV_HEADS = 16, 2


def setup():
    torch.manual_seed(0)
    q = torch.randn(2, HEADS, 512, 64)
    k, v = (torch.randn(2, KV_HEADS, 512, 64) for _ in range(2))
    return q, k, v


@torch.no_grad()
def main(q, k, v):
    k = k.repeat_interleave(HEADS // KV_HEADS, dim=1)
    v = v.repeat_interleave(HEADS // KV_HEADS, dim=1)
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)
