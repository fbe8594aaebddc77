"""Train a deep MLP classifier with JAX and optax on synthetic data.

A standard JAX training script: parameters in a pytree, a `jax.jit`-compiled train step
(`value_and_grad` + `optax.adam`), loss printed every few steps and a held-out accuracy at
the end.

`--per-example-grads` computes the gradient of every example separately
(`jax.vmap(jax.grad(...))`, as DP-SGD code does before clipping each one) and averages
them; without it the step takes the gradient of the mean loss. The gradient is the same,
but the per-example version forms one weight gradient per example and per layer and then
reduces them, where the batched version does one matrix product per layer.
"""

import argparse

import jax
import jax.numpy as jnp
import numpy as np
import optax


def parse_args():
    p = argparse.ArgumentParser(description="JAX/optax MLP training")
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--features", type=int, default=256)
    p.add_argument("--width", type=int, default=512)
    p.add_argument("--depth", type=int, default=6)
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument(
        "--per-example-grads",
        action="store_true",
        help="compute per-example gradients (vmap) and average them",
    )
    p.add_argument("--log-every", type=int, default=4)
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args()


def init_params(rng, sizes):
    params = []
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:], strict=True):
        w = rng.standard_normal((fan_in, fan_out), dtype=np.float32) * np.sqrt(2.0 / fan_in)
        params.append({"w": jnp.asarray(w), "b": jnp.zeros(fan_out)})
    return params


def forward(params, x):
    for layer in params[:-1]:
        x = jax.nn.gelu(x @ layer["w"] + layer["b"])
    return x @ params[-1]["w"] + params[-1]["b"]


def make_batch(rng, n, features, proj):
    x = rng.standard_normal((n, features), dtype=np.float32)
    return jnp.asarray(x), jnp.asarray(np.argmax(x @ proj, axis=-1))


def main():
    args = parse_args()
    rng = np.random.default_rng(args.seed)
    sizes = [args.features] + [args.width] * args.depth + [args.classes]
    params = init_params(rng, sizes)
    proj = rng.standard_normal((args.features, args.classes), dtype=np.float32)
    optimizer = optax.adam(args.lr)
    opt_state = optimizer.init(params)

    def loss_fn(params, x, y):
        logits = forward(params, x)
        return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()

    def per_example_value_and_grad(params, x, y):
        def one(p, xi, yi):
            return loss_fn(p, xi[None], yi[None])

        losses, grads = jax.vmap(jax.value_and_grad(one), in_axes=(None, 0, 0))(params, x, y)
        return losses.mean(), jax.tree_util.tree_map(lambda g: g.mean(axis=0), grads)

    if args.per_example_grads:
        value_and_grad = per_example_value_and_grad
    else:
        value_and_grad = jax.value_and_grad(loss_fn)

    @jax.jit
    def train_step(params, opt_state, x, y):
        loss, grads = value_and_grad(params, x, y)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    @jax.jit
    def accuracy(params, x, y):
        return jnp.mean(jnp.argmax(forward(params, x), -1) == y)

    for step in range(1, args.steps + 1):
        x, y = make_batch(rng, args.batch_size, args.features, proj)
        params, opt_state, loss = train_step(params, opt_state, x, y)
        if step % args.log_every == 0:
            print(f"step {step}: loss {float(loss):.4f}")

    eval_x, eval_y = make_batch(rng, 512, args.features, proj)
    print(f"held-out acc {float(accuracy(params, eval_x, eval_y)):.3f}")


if __name__ == "__main__":
    main()
