"""Train a Keras MLP classifier with `model.fit` on synthetic data (TensorFlow backend).

The everyday Keras workflow: a `Sequential` model, `compile`, `fit` with validation data,
a `ModelCheckpoint` callback every epoch and a small callback that prints the batch loss
every 5 steps. Seeds are fixed with `keras.utils.set_random_seed`.

`--floatx float64` makes Keras build every weight and compute in double precision
(`keras.config.set_floatx`), as models ported from scientific code often leave it: the
same training, twice the bytes and slower float64 arithmetic. `--run-eagerly` passes
`run_eagerly=True` to `compile` (op by op in Python; handy for debugging).
source: theislab/batchglm#109 ("Do we need float64?": a TF2 model trained in float64 by
default, moved to float32)
"""

import argparse
import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402

try:
    import magneton

    step_done = magneton.step
except ImportError:
    step_done = lambda: None  # noqa: E731


class LossLogger(keras.callbacks.Callback):
    def __init__(self, every):
        super().__init__()
        self.every, self.step = every, 0

    def on_train_batch_end(self, batch, logs=None):
        self.step += 1
        if self.step % self.every == 0:
            print(f"step {self.step}: loss {logs['loss']:.4f}", flush=True)
        step_done()


def parse_args():
    p = argparse.ArgumentParser(description="Keras MLP on synthetic data")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--steps-per-epoch", type=int, default=10)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--features", type=int, default=128)
    p.add_argument("--width", type=int, default=512)
    p.add_argument("--depth", type=int, default=12)
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--run-eagerly", action="store_true", help="run train steps eagerly (debug)")
    p.add_argument("--floatx", default="float32", choices=["float32", "float64"])
    p.add_argument("--log-every", type=int, default=5)
    p.add_argument("--out", default="checkpoints/keras_mlp")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args()


def main():
    args = parse_args()
    keras.config.set_floatx(args.floatx)
    keras.utils.set_random_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    n = args.steps_per_epoch * args.batch_size
    x = rng.standard_normal((n + 512, args.features)).astype(args.floatx)
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
        jit_compile=False,
    )

    os.makedirs(args.out, exist_ok=True)
    callbacks = [
        LossLogger(args.log_every),
        keras.callbacks.ModelCheckpoint(
            os.path.join(args.out, "epoch{epoch}.weights.h5"), save_weights_only=True
        ),
    ]
    history = model.fit(
        x_train,
        y_train,
        batch_size=args.batch_size,
        epochs=args.epochs,
        validation_data=(x_val, y_val),
        shuffle=False,
        callbacks=callbacks,
        verbose=2,
    )
    print(
        f"final val loss {history.history['val_loss'][-1]:.4f} "
        f"val acc {history.history['val_accuracy'][-1]:.3f}"
    )


if __name__ == "__main__":
    main()
