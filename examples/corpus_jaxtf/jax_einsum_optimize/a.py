"""JAX: a chain of three products written as one `jnp.einsum` with path optimization off.

Upstream: jax-ml/jax#2583 ("Consider setting optimize=True as default for einsum") and
jax-ml/jax#21148 (`optimize=False` contracts the operands left to right): here that
order materialises a (batch x features) x (features x features) product before the
projection to a few outputs, where the optimal path projects first. The setting reaches
`jnp.einsum` through a module constant and `functools.partial`. Pair: b.py sets
`OPTIMIZE = "optimal"`. Expected root: the `OPTIMIZE = False` line.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np

OPTIMIZE = False
BATCH, D, OUT = 512, 512, 8

contract = functools.partial(jnp.einsum, optimize=OPTIMIZE)


def setup():
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.standard_normal((BATCH, D), dtype=np.float32))
    mix = jnp.asarray(rng.standard_normal((D, D), dtype=np.float32) / np.sqrt(D))
    head = jnp.asarray(rng.standard_normal((D, OUT), dtype=np.float32) / np.sqrt(D))
    return x, mix, head


@jax.jit
def main(x, mix, head):
    return contract("bi,ij,jk->bk", x, mix, head)
