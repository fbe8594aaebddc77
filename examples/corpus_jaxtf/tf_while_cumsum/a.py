"""TensorFlow: a running sum over time steps in a loop inside `tf.function` (autograph
turns it into a `tf.while_loop` writing a `TensorArray`).

Upstream: tensorflow/tensorflow#40517 (a `for` loop inside `tf.function` that becomes a
`while_loop`, step by step, far slower than the vectorized form) and DLPerf 62770704
("Does the raw Python 'for' loop reduce training performance of TensorFlow"). Pair: b.py
calls `tf.cumsum`. Expected root: the loop.
"""

import numpy as np
import tensorflow as tf

STEPS, FEATURES = 256, 64


def setup():
    x = np.random.default_rng(0).standard_normal((STEPS, FEATURES), dtype=np.float32)
    return (tf.constant(x),)


@tf.function
def main(x):
    acc = tf.zeros([FEATURES])
    out = tf.TensorArray(tf.float32, size=STEPS)
    for t in tf.range(STEPS):
        acc = acc + x[t]
        out = out.write(t, acc)
    return tf.nn.relu(out.stack())
