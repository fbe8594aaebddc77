"""JAX: smooth a batch of long signals with a wide window by `jax.scipy.signal.convolve`.

A preprocessing step of a signal pipeline: each row is convolved with a 1024-tap Hann
window (mode "same") inside a jitted function, then the envelope is taken. The
convolution method is a literal argument of the call: `method="direct"` computes the
O(N*K) sliding dot products, `method="fft"` multiplies in the frequency domain
(O(N log N)); the results agree to float32 rounding.
"""

import jax
import jax.numpy as jnp
import jax.scipy.signal as jsp_signal
import numpy as np

SIGNALS, N, K = 8, 8192, 1024


def setup():
    rng = np.random.default_rng(0)
    t = np.arange(N, dtype=np.float32) / N
    x = np.sin(2 * np.pi * 40 * t) + rng.standard_normal((SIGNALS, N), dtype=np.float32)
    kernel = np.hanning(K).astype(np.float32)
    return jnp.asarray(x, dtype=jnp.float32), jnp.asarray(kernel / kernel.sum())


@jax.jit
def envelope(x, kernel):
    smooth = jax.vmap(lambda row: jsp_signal.convolve(row, kernel, mode="same", method="direct"))
    return jnp.abs(smooth(x))


def main(x, kernel):
    return envelope(x, kernel).block_until_ready()
