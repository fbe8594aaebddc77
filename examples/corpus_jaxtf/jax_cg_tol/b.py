"""JAX: a symmetric positive definite system solved by conjugate gradients to a tolerance
float32 can reach (the efficient side).

Upstream: `jax.scipy.sparse.linalg.cg` (jax-ml/jax#2566) stops on a relative residual
`tol`; cupy/cupy#7512 reports the float32 side of it: below single precision's
resolution the test is met late or never, and each solve pays up to `maxiter` matrix-
vector products for an answer `tol=1e-5` already gives. The tolerance reaches the solver
through a module constant and `functools.partial`. Pair: a.py sets `TOL = 1e-12` (the
wasteful side).
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.sparse.linalg import cg

TOL = 1e-5
N, MAXITER = 192, 120

solve = functools.partial(cg, tol=TOL, maxiter=MAXITER)


def setup():
    rng = np.random.default_rng(0)
    m = rng.standard_normal((N, N)).astype(np.float32) / np.sqrt(N)
    a = jnp.asarray(m @ m.T + 4.0 * np.eye(N, dtype=np.float32))
    b = jnp.asarray(rng.standard_normal(N, dtype=np.float32))
    return a, b


@jax.jit
def main(a, b):
    x, _ = solve(lambda v: a @ v, b)
    return x
