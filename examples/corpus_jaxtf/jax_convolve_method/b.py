"""JAX: a long signal smoothed by `jax.scipy.signal.convolve` with the FFT method (efficient side).

Upstream: jax-ml/jax#5227 ("Jax convolution significantly slower than scipy": JAX's
convolve ran the direct O(N·K) method where SciPy picks FFT for large kernels);
jax-ml/jax#15522 added `method='fft'`. The method reaches the library through a module
constant, a `functools.partial` and a static argument of `jax.jit`. Pair: a.py uses
`METHOD = "direct"` (the wasteful side).
"""

import functools

import jax
import jax.numpy as jnp
import jax.scipy.signal as jsp_signal
import numpy as np

METHOD = "fft"
SIGNALS, N, K = 8, 4096, 512


def setup():
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.standard_normal((SIGNALS, N), dtype=np.float32))
    kernel = jnp.asarray(np.hanning(K).astype(np.float32) / K)
    return x, kernel


@functools.partial(jax.jit, static_argnames="method")
def smooth(x, kernel, method):
    return jnp.stack(
        [jsp_signal.convolve(x[i], kernel, mode="same", method=method) for i in range(x.shape[0])]
    )


def main(x, kernel):
    return smooth(x, kernel, method=METHOD)
