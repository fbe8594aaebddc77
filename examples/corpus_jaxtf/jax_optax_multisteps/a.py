"""JAX + optax: a training step whose optimizer is wrapped in `optax.MultiSteps` with one
micro-step, i.e. no accumulation at all.

Upstream: google-deepmind/optax#472 ("optax.MultiSteps out of memory ... even when
every_k_schedule=1"; a maintainer: it "constructs a new array of 0s (even if
every_k_schedule=1)"); each update also runs a `lax.cond` over an accumulator, where the
chain alone does nothing extra. Pair: b.py builds the same chain without the wrapper.
Expected root: the `optax.MultiSteps` line.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax

BATCH, D, H = 64, 256, 512
ACCUM_STEPS = 1


def make_optimizer():
    tx = optax.chain(optax.clip_by_global_norm(1.0), optax.adam(1e-3))
    return optax.MultiSteps(tx, every_k_schedule=ACCUM_STEPS)


def setup():
    rng = np.random.default_rng(0)
    params = {
        "w1": jnp.asarray(rng.standard_normal((D, H), dtype=np.float32) / np.sqrt(D)),
        "w2": jnp.asarray(rng.standard_normal((H, D), dtype=np.float32) / np.sqrt(H)),
    }
    x = jnp.asarray(rng.standard_normal((BATCH, D), dtype=np.float32))
    tx = make_optimizer()
    return tx, params, tx.init(params), x


def loss_fn(params, x):
    return jnp.mean((jnp.tanh(x @ params["w1"]) @ params["w2"] - x) ** 2)


@functools.partial(jax.jit, static_argnums=0)
def main(tx, params, opt_state, x):
    grads = jax.grad(loss_fn)(params, x)
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state
