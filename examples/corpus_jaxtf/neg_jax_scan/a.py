"""Negative control (JAX): a recurrent cell run over time steps with `lax.scan`.

Pair: b.py writes the same scan with a named body function and a dict carry: the same
program. Nothing may be flagged.
"""

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

STEPS, BATCH, D = 24, 32, 128


def setup():
    rng = np.random.default_rng(0)
    xs = jnp.asarray(rng.standard_normal((STEPS, BATCH, D), dtype=np.float32))
    w = jnp.asarray(rng.standard_normal((D, D), dtype=np.float32) / np.sqrt(D))
    return xs, w


@jax.jit
def main(xs, w):
    def cell(h, x):
        h = jnp.tanh(h @ w + x)
        return h, h.sum(axis=-1)

    h, ys = lax.scan(cell, jnp.zeros((BATCH, D)), xs)
    return h, ys
