"""A two-convolution stack on CUDA with cuDNN enabled (the default, set explicitly).

Pair: a.py sets torch.backends.cudnn.enabled = False.
The efficient side of the pair; see a.py for the expected diagnosis.
"""

import torch
from torch import nn

torch.backends.cudnn.enabled = True
# full fp32 on both sides (see a.py)
torch.backends.cudnn.allow_tf32 = False


def setup():
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(32, 64, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(64, 64, 3, padding=1),
    ).eval()
    x = torch.randn(32, 32, 64, 64)
    model = model.to("cuda")
    x = x.to("cuda")
    return model, x


def main(model, x):
    with torch.no_grad():
        return model(x)
