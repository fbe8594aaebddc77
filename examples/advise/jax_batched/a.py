"""JAX: score a batch of feature vectors with a per-example MLP, one example at a time.

A model written for one example (`predict(params, x)` takes a feature vector) and
applied to a batch from an un-jitted entry point. The switch is a module-level literal:
with `BATCHED = False` the entry loops over the batch in a Python list comprehension, one
jitted call (and one row slice) per example; with `BATCHED = True` it maps the same
function over the batch with `jax.vmap`, one call for the whole batch.
"""

import jax
import jax.numpy as jnp
import numpy as np

BATCHED = False
BATCH, D, H, CLASSES = 512, 64, 256, 10


def setup():
    rng = np.random.default_rng(0)
    params = {
        "w1": jnp.asarray(rng.standard_normal((D, H), dtype=np.float32) / np.sqrt(D)),
        "b1": jnp.zeros(H),
        "w2": jnp.asarray(rng.standard_normal((H, H), dtype=np.float32) / np.sqrt(H)),
        "b2": jnp.zeros(H),
        "w3": jnp.asarray(rng.standard_normal((H, CLASSES), dtype=np.float32) / np.sqrt(H)),
    }
    x = jnp.asarray(rng.standard_normal((BATCH, D), dtype=np.float32))
    return params, x


@jax.jit
def predict(params, x):
    h = jnp.tanh(x @ params["w1"] + params["b1"])
    h = jnp.tanh(h @ params["w2"] + params["b2"])
    return jax.nn.log_softmax(h @ params["w3"])


def main(params, x):
    if BATCHED:
        out = jax.vmap(predict, in_axes=(None, 0))(params, x)
    else:
        out = jnp.stack([predict(params, row) for row in x])
    return out.block_until_ready()
