"""A small MLP classifier at inference, run in float64: a module-level `DTYPE` constant
(NumPy's default float type, kept when the code was ported from NumPy) that setup() uses
to convert both the model and the batch (`model.to(DTYPE)`, `x.to(DTYPE)`).

Pair: b.py sets `DTYPE = torch.float32`, PyTorch's default. Both sides call the same
operators the same way; only the operands' dtype differs, and every matmul does twice
the bytes. Expected diagnosis: a kernel-argument divergence naming the operand's dtype,
walked back through the recorded graph to a parameter (set before the measured region),
then through setup() to `DTYPE = torch.float64`; the patch changes that constant.
"""

import torch
from torch import nn

DTYPE = torch.float64
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
