"""Attention chosen through a settings dict: a hand-written softmax attention.

Upstream pattern (model zoos that pick the attention function from a config dict, e.g.
timm/open_clip `attn_impl` settings): both sides call `SETTINGS["attention"](q, k, v)`.
Pair: b.py maps "attention" to F.scaled_dot_product_attention.
Expected root: the SETTINGS line's "attention" entry.
"""

import math

import torch
import torch.nn.functional as F  # noqa: F401  (b.py maps "attention" to it)


def naive_attention(q, k, v):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    return torch.softmax(scores, dim=-1) @ v


SETTINGS = {"attention": naive_attention, "heads": 8}


def setup():
    torch.manual_seed(0)
    q, k, v = (torch.randn(4, SETTINGS["heads"], 256, 64) for _ in range(3))
    return q, k, v


@torch.no_grad()
def main(q, k, v):
    out = q
    for _ in range(4):
        out = SETTINGS["attention"](out, k, v)
    return out
