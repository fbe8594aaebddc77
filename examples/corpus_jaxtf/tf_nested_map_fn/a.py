"""TensorFlow: pairwise squared distances between two point sets by nested `tf.map_fn`.

Upstream: DLPerf 59395593 ("Nested tf.map_fn with slow performance", not using an
efficient API) and 58906142 (pairwise Euclidean distances between all vectors): one
inner map per outer element, each running a subtraction and a reduction per pair, where
broadcasting computes every pair at once. Pair: b.py broadcasts. Expected root: the
nested `tf.map_fn` line.
"""

import numpy as np
import tensorflow as tf

N, M, D = 12, 16, 256


def setup():
    rng = np.random.default_rng(0)
    a = tf.constant(rng.standard_normal((N, D), dtype=np.float32))
    b = tf.constant(rng.standard_normal((M, D), dtype=np.float32))
    return a, b


@tf.function
def main(a, b):
    dist = tf.map_fn(lambda p: tf.map_fn(lambda q: tf.reduce_sum(tf.square(p - q)), b), a)
    return tf.reduce_min(dist, axis=1)
