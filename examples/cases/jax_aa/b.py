"""JAX A/A control: a small jitted MLP block (matmul, bias, gelu, layer norm).

b.py is the same program; a diff of the two must flag nothing. The weights come from a
seeded NumPy generator, converted in setup().
"""

import jax
import jax.numpy as jnp
import numpy as np

B, D, H = 64, 128, 256


def setup():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((B, D), dtype=np.float32)
    w1 = rng.standard_normal((D, H), dtype=np.float32) / np.sqrt(D)
    w2 = rng.standard_normal((H, D), dtype=np.float32) / np.sqrt(H)
    return jnp.asarray(x), jnp.asarray(w1), jnp.asarray(w2)


@jax.jit
def main(x, w1, w2):
    with jax.named_scope("mlp"):
        h = jax.nn.gelu(x @ w1)
        y = h @ w2
    with jax.named_scope("norm"):
        mu = y.mean(-1, keepdims=True)
        var = ((y - mu) ** 2).mean(-1, keepdims=True)
        return (y - mu) / jnp.sqrt(var + 1e-5)
