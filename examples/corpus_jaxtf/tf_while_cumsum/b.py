"""TensorFlow: a running sum over time steps with `tf.cumsum` (the efficient side).

Upstream: tensorflow/tensorflow#40517. Pair: a.py loops over the steps inside
`tf.function` (the wasteful side).
"""

import numpy as np
import tensorflow as tf

STEPS, FEATURES = 256, 64


def setup():
    x = np.random.default_rng(0).standard_normal((STEPS, FEATURES), dtype=np.float32)
    return (tf.constant(x),)


@tf.function
def main(x):
    return tf.nn.relu(tf.cumsum(x, axis=0))
