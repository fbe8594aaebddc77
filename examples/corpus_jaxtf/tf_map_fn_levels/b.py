"""TensorFlow: ordinal labels expanded to cumulative "levels" with one `tf.sequence_mask`
(the efficient side).

Upstream: ck37/coral-ordinal#14. Pair: a.py builds each row with `tf.map_fn` (the
wasteful side).
"""

import numpy as np
import tensorflow as tf

BATCH, CLASSES = 96, 32


def setup():
    rng = np.random.default_rng(0)
    labels = tf.constant(rng.integers(0, CLASSES, BATCH), dtype=tf.int32)
    logits = tf.constant(rng.standard_normal((BATCH, CLASSES - 1), dtype=np.float32))
    return labels, logits


@tf.function
def main(labels, logits):
    levels = tf.sequence_mask(labels, CLASSES - 1, dtype=tf.float32)
    return -tf.reduce_mean(
        levels * tf.math.log_sigmoid(logits) + (1.0 - levels) * tf.math.log_sigmoid(-logits)
    )
