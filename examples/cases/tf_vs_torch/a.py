"""TensorFlow: per-row counts of non-zero activations with `tf.math.count_nonzero`.

Pair: b.py does the same job in PyTorch, summing the boolean mask (this file is
tf_count_nonzero's a.py). The paper's
TensorFlow case: `count_nonzero` makes an implicit copy, casting the whole boolean mask to
int64 before summing it (twice the bytes of an int32 count, for counts that fit in
int32). Inputs are the same seeded NumPy array on both sides, converted in setup().
Expected: a finding, a (TensorFlow) wasteful, on the cast-and-sum region.
"""

import numpy as np
import tensorflow as tf

ROWS, COLS = 512, 4096


def setup():
    x = np.random.default_rng(0).standard_normal((ROWS, COLS), dtype=np.float32)
    return (tf.constant(np.maximum(x, 0.0)),)


@tf.function
def main(x):
    with tf.name_scope("sparsity"):
        return tf.math.count_nonzero(x, axis=-1)
