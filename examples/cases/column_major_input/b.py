"""A tabular classifier (input LayerNorm, then an MLP) at inference on features read
column by column; setup() stacks the columns with `np.array(columns).T` and makes the
result row-major with `np.ascontiguousarray` before `torch.from_numpy`.

Pair: a.py keeps the transposed (column-major) view. See a.py for the expected diagnosis.
"""

import numpy as np
import torch
from torch import nn

BATCH, FEATURES, HIDDEN, CLASSES = 4096, 1024, 64, 10


def make_model() -> nn.Module:
    return nn.Sequential(
        nn.LayerNorm(FEATURES),
        nn.Linear(FEATURES, HIDDEN),
        nn.GELU(),
        nn.Linear(HIDDEN, CLASSES),
    )


def setup():
    torch.manual_seed(0)
    model = make_model().eval()
    rng = np.random.default_rng(0)
    columns = [rng.standard_normal(BATCH, dtype=np.float32) for _ in range(FEATURES)]
    features = np.array(columns).T  # (batch, features)
    features = np.ascontiguousarray(features)
    x = torch.from_numpy(features)
    return model, x


@torch.no_grad()
def main(model, x):
    return model(x).softmax(-1)
