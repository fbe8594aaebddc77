"""TensorFlow: pairwise squared distances between two point sets by broadcasting (the
efficient side).

Upstream: DLPerf 59395593. Pair: a.py nests two `tf.map_fn` (the wasteful side).
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
    dist = tf.reduce_sum(tf.square(a[:, None, :] - b[None, :, :]), axis=-1)
    return tf.reduce_min(dist, axis=1)
