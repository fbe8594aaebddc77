"""TensorFlow: ordinal labels expanded to cumulative "levels" one label at a time with
`tf.map_fn`.

Upstream: ck37/coral-ordinal#14 ("Vectorize ops (remove map_fn() calls) for up to 1000x
speedup in loss/metric/softmax calculations": `label_to_levels` built each row with
`tf.map_fn`, replaced by `tf.sequence_mask`); DLPerf 60586279 ("Tensorflow `map_fn`
takes long time to execute", not using an efficient API). Pair: b.py builds the same
levels with one `tf.sequence_mask`. Expected root: the `tf.map_fn` line.
"""

import numpy as np
import tensorflow as tf

BATCH, CLASSES = 96, 32


def setup():
    rng = np.random.default_rng(0)
    labels = tf.constant(rng.integers(0, CLASSES, BATCH), dtype=tf.int32)
    logits = tf.constant(rng.standard_normal((BATCH, CLASSES - 1), dtype=np.float32))
    return labels, logits


def label_to_levels(label):
    return tf.concat([tf.ones(label), tf.zeros(CLASSES - 1 - label)], axis=0)


@tf.function
def main(labels, logits):
    levels = tf.map_fn(label_to_levels, labels, fn_output_signature=tf.float32)
    return -tf.reduce_mean(
        levels * tf.math.log_sigmoid(logits) + (1.0 - levels) * tf.math.log_sigmoid(-logits)
    )
