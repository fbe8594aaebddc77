"""Keras (TensorFlow backend): an MLP rebuilt from a saved layer config whose dtype is
float64, so every product runs in double precision.

Upstream: theislab/batchglm#109 ("Do we need float64? ... float32 should be default":
layers built with dtype float64 by default, fixed by passing `dtype='float32'` to every
model and layer); tensorflow/recommenders#96 (a Keras layer's `dtype` constructor
argument decides its compute dtype and casts its inputs). The dtype reaches the layers
through the config dict they are rebuilt from (`Dense.from_config`, the `get_config()`
format). Pair: b.py's config says "float32". Expected root: the `"dtype": "float64"`
entry.
"""

import keras
import numpy as np
import tensorflow as tf

BATCH, D, H = 256, 256, 512
LAYER_CONFIG = {"units": H, "activation": "tanh", "dtype": "float64"}


def setup():
    rng = np.random.default_rng(0)
    hidden = keras.layers.Dense.from_config(LAYER_CONFIG)
    out = keras.layers.Dense.from_config({**LAYER_CONFIG, "units": D})
    hidden.build((None, D))
    out.build((None, H))
    hidden.set_weights([rng.standard_normal((D, H)) / np.sqrt(D), np.zeros(H)])
    out.set_weights([rng.standard_normal((H, D)) / np.sqrt(H), np.zeros(D)])
    x = tf.constant(rng.standard_normal((BATCH, D), dtype=np.float32))
    return keras.Sequential([hidden, out]), x


def main(model, x):
    return tf.cast(model(x), tf.float32)
