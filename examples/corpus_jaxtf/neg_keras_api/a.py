"""Negative control (Keras): a two-layer MLP built with `keras.Sequential`.

Pair: b.py builds the same layers with the functional API and the same weights: the same
operations. Nothing may be flagged.
"""

import keras
import numpy as np
import tensorflow as tf

BATCH, D, H = 128, 256, 512


def weights():
    rng = np.random.default_rng(0)
    w1 = (rng.standard_normal((D, H)) / np.sqrt(D)).astype(np.float32)
    w2 = (rng.standard_normal((H, D)) / np.sqrt(H)).astype(np.float32)
    x = rng.standard_normal((BATCH, D), dtype=np.float32)
    return w1, w2, x


def setup():
    w1, w2, x = weights()
    model = keras.Sequential(
        [keras.Input((D,)), keras.layers.Dense(H, activation="relu"), keras.layers.Dense(D)]
    )
    model.set_weights([w1, np.zeros(H, np.float32), w2, np.zeros(D, np.float32)])
    return model, tf.constant(x)


@tf.function
def main(model, x):
    return model(x)
