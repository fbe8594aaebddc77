"""TensorFlow: a per-call choice between an exact and a cheap normalisation made with
`tf.where` on a scalar flag, which computes both branches and keeps one.

Upstream: tensorflow/tensorflow#28687 ("Using tf.cond during training leads to reduced
throughput ... it will execute both branches") and mozilla/DeepSpeech#215 (both
branches' work always ran): only `tf.cond` with branch functions runs one branch.
Pair: b.py uses `tf.cond`. Expected root: the `tf.where` line.
"""

import numpy as np
import tensorflow as tf

ROWS, COLS = 256, 512


def setup():
    rng = np.random.default_rng(0)
    x = tf.constant(rng.standard_normal((ROWS, COLS), dtype=np.float32))
    w = tf.constant((rng.standard_normal((COLS, COLS)) / np.sqrt(COLS)).astype(np.float32))
    return x, w, tf.constant(False)


def whitened(x, w):
    h = x @ w
    return (h - tf.reduce_mean(h, axis=0)) @ tf.transpose(w)


@tf.function
def main(x, w, exact):
    return tf.where(exact, whitened(x, w), x - tf.reduce_mean(x, axis=0))
