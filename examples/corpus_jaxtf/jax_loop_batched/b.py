"""JAX: an MLP applied to the whole batch in one jitted call (the efficient side).

Upstream: jax-ml/jax#15339 ("vmap slower than a for loop"; the answer links the comparison
of vmap, scan and a Python loop: a loop of jitted per-example calls pays a dispatch and a
matrix-vector product per example where the batched call runs one matrix product). The
switch is a module-level literal, as a new user writes it; the entry ends with
`.block_until_ready()`. Pair: a.py sets `BATCHED = False` (the wasteful side).
"""

import jax
import jax.numpy as jnp
import numpy as np

BATCHED = True
BATCH, D, H = 64, 128, 256


def setup():
    rng = np.random.default_rng(0)
    params = {
        "w1": jnp.asarray(rng.standard_normal((D, H), dtype=np.float32) / np.sqrt(D)),
        "w2": jnp.asarray(rng.standard_normal((H, D), dtype=np.float32) / np.sqrt(H)),
    }
    return params, jnp.asarray(rng.standard_normal((BATCH, D), dtype=np.float32))


@jax.jit
def mlp(params, x):
    return jnp.tanh(x @ params["w1"]) @ params["w2"]


def main(params, x):
    if BATCHED:
        out = mlp(params, x)
    else:
        out = jnp.stack([mlp(params, x[i]) for i in range(x.shape[0])])
    return out.block_until_ready()
