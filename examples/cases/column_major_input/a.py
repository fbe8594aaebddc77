"""A tabular classifier (input LayerNorm, then an MLP) at inference on features read
column by column, as a column store or a dict of per-feature arrays hands them over.
setup() stacks the columns with `np.array(columns).T` — a transposed view — and
`torch.from_numpy` keeps its column-major strides, so on every call the LayerNorm reads
each row with a stride of BATCH elements (and copies it to a contiguous buffer first).

Pair: b.py adds `features = np.ascontiguousarray(features)` after stacking, as NumPy's
docs suggest before handing an array to code that wants C order. Both sides call the
same operators on the same values; only the input's strides differ. Expected diagnosis:
an operand-property divergence naming the input's strides, walked back through the
recorded graph to the entry input, then through setup()'s statements side by side to the
statement a.py lacks; the patch inserts it.
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
    x = torch.from_numpy(features)
    return model, x


@torch.no_grad()
def main(model, x):
    return model(x).softmax(-1)
