"""Encoder inference with autograd tracking chosen by a dataclass config field.

Upstream pattern (serving code with a `@dataclass` run config whose `track_grad` field
defaults to True: every forward records an autograd graph, and nn.TransformerEncoder's
inference fast path, which needs grad off, is never taken). Pair: b.py's default is False.
Expected root: the `track_grad` field default.
"""

from dataclasses import dataclass

import torch
from torch import nn


@dataclass
class RunConfig:
    width: int = 256
    depth: int = 4
    track_grad: bool = False


CFG = RunConfig()


def setup():
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(CFG.width, 8, 4 * CFG.width, batch_first=True)
    model = nn.TransformerEncoder(layer, CFG.depth, enable_nested_tensor=False).eval()
    x = torch.randn(16, 128, CFG.width)
    return model, x


def main(model, x):
    with torch.set_grad_enabled(CFG.track_grad):
        return model(x)
