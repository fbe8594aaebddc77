"""Negative control (JAX): a jitted two-layer block written inline.

Pair: b.py computes the same thing through a helper bound with `functools.partial` and
other names: the same jaxpr. Nothing may be flagged.
"""

import jax
import jax.numpy as jnp
import numpy as np

BATCH, D, H = 128, 256, 512


def setup():
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.standard_normal((BATCH, D), dtype=np.float32))
    w1 = jnp.asarray(rng.standard_normal((D, H), dtype=np.float32) / np.sqrt(D))
    w2 = jnp.asarray(rng.standard_normal((H, D), dtype=np.float32) / np.sqrt(H))
    return x, w1, w2


@jax.jit
def main(x, w1, w2):
    h = jax.nn.gelu(x @ w1)
    return h @ w2 + x
