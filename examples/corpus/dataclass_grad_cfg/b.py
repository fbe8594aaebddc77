"""Inference with autograd tracking chosen by a dataclass config field.

Upstream pattern (serving code with a `@dataclass` run config whose `track_grad` field
defaults to True, so every forward records an autograd graph and keeps activations).
Pair: b.py's default is False. Expected root: the `track_grad` field default.
"""

from dataclasses import dataclass

import torch
from torch import nn


@dataclass
class RunConfig:
    width: int = 1024
    depth: int = 6
    track_grad: bool = False


CFG = RunConfig()


def setup():
    torch.manual_seed(0)
    layers = []
    for _ in range(CFG.depth):
        layers += [nn.Linear(CFG.width, CFG.width), nn.GELU()]
    model = nn.Sequential(*layers).eval()
    x = torch.randn(64, CFG.width, requires_grad=True)
    return model, x


def main(model, x):
    with torch.set_grad_enabled(CFG.track_grad):
        return model(x).sum()
