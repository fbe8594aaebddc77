"""TensorFlow A/A control: a small dense block in a tf.function (matmul, bias, relu,
softmax); b.py is the same program, and a diff of the two must flag nothing. The weights
are a tf.Variable (a captured resource) and the inputs a seeded NumPy array.
"""

import numpy as np
import tensorflow as tf

B, D, H = 64, 128, 256


def setup():
    rng = np.random.default_rng(0)
    x = tf.constant(rng.standard_normal((B, D), dtype=np.float32))
    w = tf.Variable((rng.standard_normal((D, H)) / np.sqrt(D)).astype(np.float32))
    b = tf.constant(np.zeros(H, np.float32))
    return x, w, b


@tf.function
def main(x, w, b):
    with tf.name_scope("dense"):
        h = tf.nn.relu(tf.matmul(x, w) + b)
    with tf.name_scope("head"):
        return tf.nn.softmax(h, axis=-1)
