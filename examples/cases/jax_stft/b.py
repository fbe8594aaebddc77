"""JAX: the magnitude spectrum of signal frames with `jnp.fft.rfft` (the efficient side).

Pair: a.py multiplies by DFT matrices. Expected: a is wasteful.
"""

import jax
import jax.numpy as jnp
import numpy as np

FRAMES, N = 256, 512


def frames() -> np.ndarray:
    return np.random.default_rng(0).standard_normal((FRAMES, N), dtype=np.float32)


def setup():
    return (jnp.asarray(frames()),)


@jax.jit
def main(x):
    return jnp.abs(jnp.fft.rfft(x, axis=-1))
