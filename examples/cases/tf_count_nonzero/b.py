"""TensorFlow: per-row counts of non-zero activations, summed over an int32 mask.

Pair: a.py calls `tf.math.count_nonzero`, whose int64 cast copies the whole mask. Here the
mask is cast to int32 and only the per-row counts are widened to int64 (the same values,
the same dtype as a's result). Expected: a is wasteful.
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
        mask = tf.cast(tf.not_equal(x, 0.0), tf.int32)
        return tf.cast(tf.reduce_sum(mask, axis=-1), tf.int64)
