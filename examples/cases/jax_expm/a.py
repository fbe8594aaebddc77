"""JAX: matrix exponentials of a batch of symmetric matrices with `jax.scipy.linalg.expm`.

Pair: b.py computes the same exponentials from an eigendecomposition (`jnp.linalg.eigh`:
exp(A) = V diag(exp(w)) V^T, exact for symmetric A). The paper's JAX expm case:
`expm` does work the input does not need: it picks a Padé degree by a norm test, solves a
linear system for it, and then runs a fixed 16-step squaring loop whose steps beyond the
needed count still run a branch each. Inputs: the same seeded NumPy batch on both sides.
Expected: a finding, a wasteful, region from the matrices to their exponentials.
"""

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.linalg import expm

BATCH, N = 8, 32


def matrices() -> np.ndarray:
    m = np.random.default_rng(0).standard_normal((BATCH, N, N)).astype(np.float32)
    return (m + m.transpose(0, 2, 1)) / (2 * np.sqrt(N))


def setup():
    return (jnp.asarray(matrices()),)


@jax.jit
def main(a):
    return expm(a)
