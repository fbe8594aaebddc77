"""TensorFlow: the embedding layer of a BERT encoder, ported from the reference code.

BERT's `embedding_lookup(input_ids, embedding_table, use_one_hot_embeddings)` looks the
word vectors up either by `tf.gather` or, when `use_one_hot_embeddings=True` (the TPU
setting of the reference `run_classifier.py`), by multiplying a one-hot matrix of the
ids, (tokens x vocab), with the table. The embedding output then gets the position
embeddings and layer normalisation. The call below passes the TPU value as a literal on a
CPU, where it materialises and multiplies a 31M-entry mostly-zero matrix per batch.
"""

import numpy as np
import tensorflow as tf

VOCAB, HIDDEN, BATCH, SEQ = 30522, 128, 4, 256


def embedding_lookup(input_ids, embedding_table, use_one_hot_embeddings=False):
    flat_ids = tf.reshape(input_ids, [-1])
    if use_one_hot_embeddings:
        one_hot = tf.one_hot(flat_ids, depth=embedding_table.shape[0])
        output = tf.matmul(one_hot, embedding_table)
    else:
        output = tf.gather(embedding_table, flat_ids)
    return tf.reshape(output, input_ids.shape.as_list() + [embedding_table.shape[1]])


def setup():
    rng = np.random.default_rng(0)
    ids = tf.constant(rng.integers(0, VOCAB, (BATCH, SEQ)), dtype=tf.int32)
    word = tf.constant(0.02 * rng.standard_normal((VOCAB, HIDDEN), dtype=np.float32))
    position = tf.constant(0.02 * rng.standard_normal((512, HIDDEN), dtype=np.float32))
    return ids, word, position


@tf.function
def embeddings(ids, word, position):
    x = embedding_lookup(ids, word, use_one_hot_embeddings=True)
    x = x + position[None, : ids.shape[1]]
    mean, var = tf.nn.moments(x, axes=[-1], keepdims=True)
    return (x - mean) * tf.math.rsqrt(var + 1e-12)


def main(ids, word, position):
    return embeddings(ids, word, position)
