"""TensorFlow: token embeddings looked up as a one-hot matrix product, chosen by a flag
passed to the `tf.function`.

Upstream: google-research/bert#1065 (BERT's `embedding_lookup(...,
use_one_hot_embeddings)`: `tf.matmul(tf.one_hot(ids, vocab_size), table)` when the flag
is set, `tf.gather(table, ids)` otherwise; the one-hot form is for TPUs, on a CPU it
multiplies by a mostly-zero matrix). The flag is a module constant passed as a Python
argument of the `tf.function`. Pair: b.py sets `USE_ONE_HOT = False`. Expected root: the
`USE_ONE_HOT = True` line.
"""

import numpy as np
import tensorflow as tf

USE_ONE_HOT = True
VOCAB, DIM, TOKENS = 4096, 128, 512


def setup():
    rng = np.random.default_rng(0)
    ids = tf.constant(rng.integers(0, VOCAB, TOKENS), dtype=tf.int32)
    table = tf.constant(rng.standard_normal((VOCAB, DIM), dtype=np.float32))
    return ids, table


@tf.function
def embedding_lookup(ids, table, use_one_hot_embeddings):
    if use_one_hot_embeddings:
        return tf.matmul(tf.one_hot(ids, depth=VOCAB), table)
    return tf.gather(table, ids)


def main(ids, table):
    return tf.nn.l2_normalize(
        embedding_lookup(ids, table, use_one_hot_embeddings=USE_ONE_HOT), axis=-1
    )
