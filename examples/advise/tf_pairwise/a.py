"""TensorFlow: nearest-centroid assignment with pairwise squared distances.

A k-means style assignment step: the squared distance from every point to every
centroid, then the index and distance of the closest. The switch is a module-level
literal: with `VECTORIZED = False` the distances come from nested `tf.map_fn` (one inner
map per point, a subtraction and a reduction per pair), with `VECTORIZED = True` from one
broadcast subtraction and reduction over all pairs at once.
"""

import numpy as np
import tensorflow as tf

VECTORIZED = False
POINTS, CENTROIDS, D = 96, 32, 128


def setup():
    rng = np.random.default_rng(0)
    points = tf.constant(rng.standard_normal((POINTS, D), dtype=np.float32))
    centroids = tf.constant(rng.standard_normal((CENTROIDS, D), dtype=np.float32))
    return points, centroids


def pairwise_sq_dist(a, b):
    if VECTORIZED:
        return tf.reduce_sum(tf.square(a[:, None, :] - b[None, :, :]), axis=-1)
    return tf.map_fn(lambda p: tf.map_fn(lambda q: tf.reduce_sum(tf.square(p - q)), b), a)


@tf.function
def assign(points, centroids):
    dist = pairwise_sq_dist(points, centroids)
    return tf.cast(tf.argmin(dist, axis=1), tf.float32), tf.reduce_min(dist, axis=1)


def main(points, centroids):
    index, dist = assign(points, centroids)
    return tf.stack([index, dist], axis=1)
