"""PyTorch: per-row counts of non-zero activations, the mask summed as it is.

Pair: a.py does the same job in TensorFlow with `tf.math.count_nonzero`, which casts the
whole boolean mask to int64 before summing it. Here the boolean mask is summed directly:
`sum` accumulates a bool tensor in int64 without writing an int64 copy of the mask (the
same counts, the same dtype as a's result). Same seeded NumPy array on both sides,
converted in setup() (`torch.from_numpy` here, `tf.constant` there).
Expected: a (TensorFlow) is wasteful on the cast-and-sum region.
"""

import numpy as np
import torch

ROWS, COLS = 512, 4096


def setup():
    x = np.random.default_rng(0).standard_normal((ROWS, COLS), dtype=np.float32)
    return (torch.from_numpy(np.maximum(x, 0.0)),)


def main(x):
    return (x != 0).sum(dim=-1)
