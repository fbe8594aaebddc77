"""Two projections packed with torch.cat and split again on every call.

Upstream pattern (fused-QKV refactors in vLLM/transformers where weights are concatenated
per forward instead of once: `torch.cat([w_q, w_k]) ... .split()`): the concat and the
split are redundant round trips. Pair: b.py runs the two projections directly.
Expected root: the torch.cat line below (work with no counterpart on b).
"""

import torch
import torch.nn.functional as F


def setup():
    torch.manual_seed(0)
    x = torch.randn(8, 1024)  # a decode step: few tokens, the weights dominate
    w_q, w_k = torch.randn(1024, 1024), torch.randn(1024, 1024)
    return x, w_q, w_k


@torch.no_grad()
def main(x, w_q, w_k):
    q, k = F.linear(x, w_q), F.linear(x, w_k)
    return q.sum() + k.sum()
