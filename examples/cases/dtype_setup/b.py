"""A small MLP classifier at inference in float32 (`DTYPE = torch.float32`, PyTorch's
default), the constant setup() converts the model and the batch with.

Pair: a.py sets `DTYPE = torch.float64`. See a.py for the expected diagnosis.
"""

import torch
from torch import nn

DTYPE = torch.float32
BATCH, FEATURES, HIDDEN, CLASSES = 256, 512, 1024, 10


def make_model() -> nn.Module:
    return nn.Sequential(
        nn.Linear(FEATURES, HIDDEN),
        nn.ReLU(),
        nn.Linear(HIDDEN, HIDDEN),
        nn.ReLU(),
        nn.Linear(HIDDEN, CLASSES),
    )


def setup():
    torch.manual_seed(0)
    model = make_model().eval().to(DTYPE)
    x = torch.randn(BATCH, FEATURES).to(DTYPE)
    return model, x


@torch.no_grad()
def main(model, x):
    return model(x).softmax(-1)
