"""Train a deep MLP classifier with JAX and optax on synthetic data.

A standard JAX training script: parameters in a pytree, a `jax.jit`-compiled train step
(`value_and_grad` + `optax.adam`), loss printed every 5 steps, a held-out accuracy every 10
and a checkpoint (`np.savez` of the flattened parameters) every 15.

`--per-example-grads` computes the gradient of every example separately
(`jax.vmap(jax.grad(...))`, as DP-SGD code does before clipping each one) and averages them;
without it the step takes the gradient of the mean loss. Same gradient, but the per-example
version forms one weight gradient (an outer product) per example and per layer and then
reduces them, where the batched version does one matrix product per layer.
source: google/flax#306 (per-example gradients via jax.vmap(jax.grad) averaged back to the batch gradient)
"""

import argparse
import os

import jax
import jax.numpy as jnp
import numpy as np
import optax

try:
    import magneton

    step_done = magneton.step
except ImportError:
    step_done = lambda: None  # noqa: E731


def parse_args():
    p = argparse.ArgumentParser(description="JAX/optax MLP training")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--features", type=int, default=256)
    p.add_argument("--width", type=int, default=512)
    p.add_argument("--depth", type=int, default=20)
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument(
        "--per-example-grads",
        action="store_true",
        help="compute per-example gradients (vmap) and average them",
    )
    p.add_argument("--log-every", type=int, default=5)
    p.add_argument("--eval-every", type=int, default=10)
    p.add_argument("--save-every", type=int, default=15)
    p.add_argument("--out", default="checkpoints/jax_mlp")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args()


def init_params(key, sizes):
    params = []
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:], strict=False):
        key, sub = jax.random.split(key)
        w = jax.random.normal(sub, (fan_in, fan_out)) * jnp.sqrt(2.0 / fan_in)
        params.append({"w": w, "b": jnp.zeros(fan_out)})
    return params


def forward(params, x):
    for layer in params[:-1]:
        x = jax.nn.gelu(x @ layer["w"] + layer["b"])
    return x @ params[-1]["w"] + params[-1]["b"]


def make_batch(key, args, proj):
    x = jax.random.normal(key, (args.batch_size, args.features))
    return x, jnp.argmax(x @ proj, axis=-1)


def main():
    args = parse_args()
    key = jax.random.PRNGKey(args.seed)
    key, pkey, dkey, ekey = jax.random.split(key, 4)
    sizes = [args.features] + [args.width] * args.depth + [args.classes]
    params = init_params(pkey, sizes)
    proj = jax.random.normal(dkey, (args.features, args.classes))
    optimizer = optax.adam(args.lr)
    opt_state = optimizer.init(params)

    def loss_fn(params, x, y):
        logits = forward(params, x)
        return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()

    def per_example_value_and_grad(params, x, y):
        one = lambda p, xi, yi: loss_fn(p, xi[None], yi[None])  # noqa: E731
        losses, grads = jax.vmap(jax.value_and_grad(one), in_axes=(None, 0, 0))(params, x, y)
        return losses.mean(), jax.tree_util.tree_map(lambda g: g.mean(axis=0), grads)

    value_and_grad = (
        per_example_value_and_grad if args.per_example_grads else jax.value_and_grad(loss_fn)
    )

    @jax.jit
    def train_step(params, opt_state, x, y):
        loss, grads = value_and_grad(params, x, y)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    @jax.jit
    def accuracy(params, x, y):
        return jnp.mean(jnp.argmax(forward(params, x), -1) == y)

    eval_x, eval_y = make_batch(ekey, args, proj)
    for step in range(1, args.steps + 1):
        key, bkey = jax.random.split(key)
        x, y = make_batch(bkey, args, proj)
        params, opt_state, loss = train_step(params, opt_state, x, y)
        if step % args.log_every == 0:
            print(f"step {step}: loss {float(loss):.4f}")
        if step % args.eval_every == 0:
            print(f"step {step}: eval acc {float(accuracy(params, eval_x, eval_y)):.3f}")
        if step % args.save_every == 0:
            os.makedirs(args.out, exist_ok=True)
            leaves = jax.tree_util.tree_leaves(params)
            np.savez(os.path.join(args.out, f"step{step}.npz"), *[np.asarray(a) for a in leaves])
            print(f"saved {args.out}/step{step}.npz")
        step_done()


if __name__ == "__main__":
    main()
