"""Negative control (JAX): the scan of a.py with a named body function (a pure refactor)."""

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


def step(weights, state, inputs):
    state = jnp.tanh(state @ weights + inputs)
    return state, state.sum(axis=-1)


@jax.jit
def main(xs, w):
    final, per_step = lax.scan(lambda s, x: step(w, s, x), jnp.zeros((BATCH, D)), xs)
    return final, per_step
