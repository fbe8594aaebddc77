"""Grouped-query attention with K/V heads copied by repeat_interleave before SDPA.

Upstream pattern (transformers' `repeat_kv` in Llama/Mistral attention; vLLM and PyTorch
added `enable_gqa=True` so SDPA reads the shared heads without copies). Pair: b.py passes
enable_gqa=True. Expected root: the repeat_interleave line (work with no counterpart).

Shaped as one decode step over a 4k-token cache (Llama-3-8B's 32/8 heads of 128), the
regime of the upstream reports: repeat_kv copies the whole cache at every generated
token. At prefill shapes (512 queries over 512 keys) the copies are 6-17% of the call on
a CPU, beside the quadratic attention.
"""

import torch
import torch.nn.functional as F

HEADS, KV_HEADS, CACHE = 32, 8, 4096


def setup():
    torch.manual_seed(0)
    q = torch.randn(1, HEADS, 1, 128)  # one decode step's query
    k, v = (torch.randn(1, KV_HEADS, CACHE, 128) for _ in range(2))  # the KV cache
    return q, k, v


@torch.no_grad()
def main(q, k, v):
    k = k.repeat_interleave(HEADS // KV_HEADS, dim=1)
    v = v.repeat_interleave(HEADS // KV_HEADS, dim=1)
    return F.scaled_dot_product_attention(q, k, v, is_causal=False)
