"""Train a Keras MLP classifier with `model.fit` on synthetic data (TensorFlow backend).

The everyday Keras workflow: a `Sequential` model, `compile`, `fit` with validation data
and a small callback that prints the batch loss every few steps. Seeds are fixed with
`keras.utils.set_random_seed`.

`--run-eagerly` passes `run_eagerly=True` to `compile`: every train step then runs op by
op from Python instead of as one traced `tf.function` graph. Handy for stepping through a
custom layer in a debugger, and often left on afterwards.
"""

import argparse
import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402


class LossLogger(keras.callbacks.Callback):
    def __init__(self, every):
        super().__init__()
        self.every, self.step = every, 0

    def on_train_batch_end(self, batch, logs=None):
        self.step += 1
        if self.step % self.every == 0:
            print(f"step {self.step}: loss {logs['loss']:.4f}", flush=True)


def parse_args():
    p = argparse.ArgumentParser(description="Keras MLP on synthetic data")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--steps-per-epoch", type=int, default=16)
    p.add_argument("--batch-size", type=int, default=512)
    p.add_argument("--features", type=int, default=64)
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--depth", type=int, default=8)
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--run-eagerly", action="store_true", help="run train steps eagerly (debug)")
    p.add_argument("--log-every", type=int, default=4)
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args()


def main():
    args = parse_args()
    keras.utils.set_random_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    n = args.steps_per_epoch * args.batch_size
    x = rng.standard_normal((n + 256, args.features)).astype("float32")
    y = (x @ rng.standard_normal((args.features, args.classes))).argmax(-1)
    x_train, y_train, x_val, y_val = x[:n], y[:n], x[n:], y[n:]

    layers = [keras.Input((args.features,))]
    for _ in range(args.depth):
        layers.append(keras.layers.Dense(args.width, activation="relu"))
    layers.append(keras.layers.Dense(args.classes))
    model = keras.Sequential(layers)
    model.compile(
        optimizer=keras.optimizers.Adam(args.lr),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
        run_eagerly=args.run_eagerly,
    )
    history = model.fit(
        x_train,
        y_train,
        batch_size=args.batch_size,
        epochs=args.epochs,
        validation_data=(x_val, y_val),
        shuffle=False,
        callbacks=[LossLogger(args.log_every)],
        verbose=0,
    )
    print(
        f"val loss {history.history['val_loss'][-1]:.4f} "
        f"val acc {history.history['val_accuracy'][-1]:.3f}"
    )


if __name__ == "__main__":
    main()
