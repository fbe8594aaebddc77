"""Negative control (TensorFlow): a row-wise normalisation with `tf.map_fn`.

Pair: b.py writes the same `tf.map_fn` with a named function and an explicit output
signature: the same graph. Nothing may be flagged.
"""

import numpy as np
import tensorflow as tf

ROWS, COLS = 48, 256


def setup():
    x = np.random.default_rng(0).standard_normal((ROWS, COLS), dtype=np.float32)
    return (tf.constant(x),)


@tf.function
def main(x):
    return tf.map_fn(lambda r: (r - tf.reduce_mean(r)) / tf.math.reduce_std(r), x)
