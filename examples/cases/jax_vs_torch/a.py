"""The magnitude spectrum of signal frames in JAX, through an explicit DFT matrix product.

Pair: b.py does the same job in PyTorch with `torch.fft.rfft`. Inputs are identical
because both setup() functions build the same seeded NumPy arrays and convert them
(`jnp.asarray` here, `torch.from_numpy` there): matching is by values, so a diff across
frameworks needs the same input values on both sides. Expected: a finding, a (JAX)
wasteful, on the region from the frames to the magnitudes, naming the matrix product.
"""

import jax
import jax.numpy as jnp
import numpy as np

FRAMES, N = 256, 512


def frames() -> np.ndarray:
    return np.random.default_rng(0).standard_normal((FRAMES, N), dtype=np.float32)


def setup():
    k = np.arange(N // 2 + 1)
    angle = 2 * np.pi * np.outer(np.arange(N), k) / N
    cos_t = jnp.asarray(np.cos(angle).astype(np.float32))
    sin_t = jnp.asarray(np.sin(angle).astype(np.float32))
    return jnp.asarray(frames()), cos_t, sin_t


@jax.jit
def main(x, cos_t, sin_t):
    re = x @ cos_t
    im = x @ sin_t
    return jnp.sqrt(re * re + im * im)
