"""Row statistics chosen by module settings, for `magneton advise`: `REDUCE` picks an
implementation from a table (`REDUCTIONS[REDUCE]`), `NORM` names its choices only in
its comment and is compared with one of them."""

import torch
import torch.nn.functional as F

REDUCE = "loop"
NORM = "manual"  # "manual" | "fused"


def _loop(x):
    return torch.stack([row.sum() for row in x])


def _vector(x):
    return x.sum(-1)


REDUCTIONS = {"loop": _loop, "vector": _vector}


def setup():
    torch.manual_seed(0)
    return (torch.randn(256, 512),)


def main(x):
    if NORM == "manual":
        mu = x.mean(-1, keepdim=True)
        y = (x - mu) / (x.var(-1, unbiased=False, keepdim=True) + 1e-5).sqrt()
    else:
        y = F.layer_norm(x, x.shape[-1:])
    return REDUCTIONS[REDUCE](y * y)
