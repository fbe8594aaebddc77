"""JAX: a magnitude spectrum of signal frames through an explicit DFT matrix product.

Pair: b.py computes the same spectrum with `jnp.fft.rfft`. The paper's JAX STFT case: an
implementation built on low-level APIs (two dense matrix products against a cosine and a
sine table, O(n^2) per frame) where the FFT API does the job in O(n log n). Both sides get
the same frames (NumPy, seeded) converted with `jnp.asarray` in setup(). Expected: a
finding, a wasteful, on the region from the frames to the magnitudes.
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
