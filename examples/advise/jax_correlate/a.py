"""JAX: find a chirp template in noisy recordings by matched filtering.

A detection step of a sonar pipeline: each of eight 16384-sample recordings is
cross-correlated with a 2048-sample chirp template (`jax.scipy.signal.correlate`, mode
"valid"), and the peak of the normalised score is the detection. The method is a literal
argument of the call: `method="direct"` slides the template over the recording as a
convolution (N*K multiply-adds), `method="fft"` multiplies in the frequency domain; the
scores agree to float32 rounding.
"""

import jax
import jax.numpy as jnp
import jax.scipy.signal as jss
import numpy as np

RECORDINGS, N, K = 8, 16384, 2048


def setup():
    rng = np.random.default_rng(1)
    t = np.arange(K, dtype=np.float32) / K
    chirp = np.sin(2 * np.pi * (20 + 180 * t) * t).astype(np.float32)
    x = rng.standard_normal((RECORDINGS, N), dtype=np.float32)
    at = rng.integers(0, N - K, RECORDINGS)
    for i, a in enumerate(at):
        x[i, a : a + K] += 0.5 * chirp
    return jnp.asarray(x), jnp.asarray(chirp / np.linalg.norm(chirp))


@jax.jit
def scores(x, template):
    score = jax.vmap(lambda row: jss.correlate(row, template, mode="valid", method="direct"))
    s = score(x)
    return s / jnp.std(s, axis=-1, keepdims=True)


def main(x, template):
    s = scores(x, template).block_until_ready()
    return s, jnp.argmax(s, axis=-1)
