"""nn.MultiheadAttention built with batch_first=False, inputs transposed around it.

Upstream pattern (pytorch/pytorch: the inference fast path of nn.MultiheadAttention /
TransformerEncoderLayer needs batch_first=True; with False every call takes the slow
composite path plus two transposes). Pair: b.py builds it with batch_first=True.
Expected root: the batch_first argument below.
"""

import torch
from torch import nn


def setup():
    torch.manual_seed(0)
    attn = nn.MultiheadAttention(512, 8, batch_first=True).eval()
    x = torch.randn(8, 512, 512)
    return attn, x


@torch.inference_mode()
def main(attn, x):
    out = x
    for _ in range(4):
        if attn.batch_first:
            out = attn(out, out, out, need_weights=False)[0]
        else:
            t = out.transpose(0, 1)
            out = attn(t, t, t, need_weights=False)[0].transpose(0, 1)
    return out
