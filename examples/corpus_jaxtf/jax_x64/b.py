"""JAX: the default single precision: NumPy's float64 data becomes float32 (efficient side).

Upstream: jax-ml/jax#3832 ("float64 dot on cpu is slow", after
`jax.config.update("jax_enable_x64", True)`); jax-ml/jax#22688 (enabling x64 makes
arrays built from Python and NumPy values 64-bit "wasteful, especially if the procedure
involves neural networks"). Pair: a.py switches x64 on (the wasteful side).
"""

import jax

jax.config.update("jax_enable_x64", False)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

BATCH, D = 256, 384


def setup():
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.standard_normal((BATCH, D)))
    w1 = jnp.asarray(rng.standard_normal((D, D)) / np.sqrt(D))
    w2 = jnp.asarray(rng.standard_normal((D, D)) / np.sqrt(D))
    return x, w1, w2


@jax.jit
def main(x, w1, w2):
    return jnp.tanh(jnp.tanh(x @ w1) @ w2)
