"""A training step with autograd anomaly detection switched on by a debug setting.

Upstream pattern (pytorch/pytorch and Lightning issues: `detect_anomaly` left enabled from
a debugging session makes every forward op record a traceback and every backward op check
for NaNs). Pair: b.py's DEBUG dict has it off. Expected root: the DEBUG line.
"""

import torch
from torch import nn

DEBUG = {"detect_anomaly": True}


def setup():
    torch.manual_seed(0)
    torch.autograd.set_detect_anomaly(DEBUG["detect_anomaly"])
    model = nn.Sequential(*(nn.Sequential(nn.Linear(128, 128), nn.Tanh()) for _ in range(12)))
    x = torch.randn(32, 128)
    return model, x


def main(model, x):
    loss = model(x).square().mean()
    loss.backward()
    model.zero_grad(set_to_none=True)
    return loss.detach()
