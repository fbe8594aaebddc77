"""An MLP regressor evaluated under `@torch.inference_mode()`, PyTorch's recommendation
for inference: no backward graph is recorded and no activation is kept for one.

Pair: a.py runs the same forward with autograd on. See a.py for the expected diagnosis.
"""

import torch
from torch import nn

BATCH, FEATURES, HIDDEN, LAYERS = 256, 256, 512, 6


def make_model() -> nn.Module:
    layers: list[nn.Module] = [nn.Linear(FEATURES, HIDDEN), nn.GELU()]
    for _ in range(LAYERS - 1):
        layers += [nn.Linear(HIDDEN, HIDDEN), nn.GELU()]
    return nn.Sequential(*layers, nn.Linear(HIDDEN, 1))


def setup():
    torch.manual_seed(0)
    model = make_model().eval()
    x = torch.randn(BATCH, FEATURES)
    return model, x


@torch.inference_mode()
def main(model, x):
    return model(x)
