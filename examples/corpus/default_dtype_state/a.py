"""A model built after torch.set_default_dtype(torch.float64) in setup().

Upstream pattern (pytorch/pytorch issues: a global default dtype set for a numerics check
makes every later nn.Linear float64; the float32 checkpoint loads into float64
parameters and every matmul moves twice the bytes): process state set while the program
runs. Pair: b.py keeps the default float32.
Expected root: the set_default_dtype line.
"""

import torch
from torch import nn

IN, HIDDEN = 512, 2048


def checkpoint() -> dict[str, torch.Tensor]:
    """Weights as a float32 checkpoint would hold them."""
    g = torch.Generator().manual_seed(0)
    shapes = {
        "0.weight": (HIDDEN, IN),
        "0.bias": (HIDDEN,),
        "2.weight": (IN, HIDDEN),
        "2.bias": (IN,),
    }
    return {k: torch.randn(s, generator=g, dtype=torch.float32) * 0.02 for k, s in shapes.items()}


def setup():
    torch.set_default_dtype(torch.float64)
    model = nn.Sequential(nn.Linear(IN, HIDDEN), nn.GELU(), nn.Linear(HIDDEN, IN)).eval()
    model.load_state_dict(checkpoint())
    x = torch.randn(256, IN, generator=torch.Generator().manual_seed(1), dtype=torch.float32)
    return model, x


@torch.no_grad()
def main(model, x):
    weight = model[0].weight
    return model(x.to(weight.dtype)).float()
