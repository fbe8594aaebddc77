"""An MLP regressor evaluated without disabling autograd: the parameters require grad
(the default), so every forward operator records a backward node and keeps its inputs
alive for a backward pass that never comes — more memory traffic and allocation per
call, and the outputs carry `requires_grad=True`.

Pair: b.py runs the same forward under `@torch.inference_mode()` (PyTorch's
recommendation for inference; `torch.no_grad()` behaves alike here). Both sides call the
same operators the same way with the same tensors; what differs is the grad mode the
operators ran in. Expected diagnosis: a kernel-argument divergence naming the grad mode
(autograd recorded on one side only), traced to the efficient side's context manager and
to the wasteful side's entry that lacks it; the patch adds the decorator.
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


def main(model, x):
    return model(x)
