"""Causes traced through JAX's and TensorFlow's own indirections, end to end through the CLI.

Two pairs, each a loop against its vectorized form, switched by a module-level literal
that reaches the framework through its indirections, as a new user writes it:

* JAX: `PER_ROW` passed as a static argument of a `functools.partial(jax.jit,
  static_argnames=...)` function, whose `lax.scan` runs one matrix-vector product per
  row; the entry ends with `.block_until_ready()` (it used to fail the recording);
* TensorFlow: `PER_ROW` passed as a Python argument of a `tf.function`, whose `tf.map_fn`
  normalises one row at a time (its TensorLists used to fail the recording).

What a user sees: both sides record; the loop's operators carry the loop's cost (one
iteration each, every one charged energy, the run's energy their sum); `magneton diff`
finds the loop wasteful and its root cause is the `PER_ROW = True` line of the wasteful
script (not the efficient one), with a patch that changes the literal. The four
recordings are made once for the module, two processes at a time; the diff runs without
the key-variable re-run (`--no-rerun`): the root comes from the static slice of the
source, and the re-run would cost a warm worker's imports per pair.

Plus the differential slice's rule for optax-style builders (no recording: operators
with the user frames a recording gives them, as tests/test_diffslice.py builds them): a
difference inside a function both files define is the statement that differs, not the
`def` line.
"""

from __future__ import annotations

import json
import subprocess
import textwrap
from pathlib import Path

import pytest
import warm_cli

from magneton.diagnose.source.diffslice import program_difference
from magneton.graphdb import open_db
from magneton.model import FrameRecord, OpRecord, Profile, RunInfo

JAX_PAIR = """
    import functools

    import jax
    import jax.numpy as jnp
    import numpy as np

    PER_ROW = {value}


    def setup():
        x = np.random.default_rng(0).standard_normal((64, 256), dtype=np.float32)
        w = np.random.default_rng(1).standard_normal((256, 256), dtype=np.float32) / 16
        return jnp.asarray(x), jnp.asarray(w)


    @functools.partial(jax.jit, static_argnames="per_row")
    def project(x, w, per_row):
        if per_row:
            _, ys = jax.lax.scan(lambda c, r: (c, jnp.tanh(r @ w)), 0.0, x)
            return ys
        return jnp.tanh(x @ w)


    def main(x, w):
        return project(x, w, per_row=PER_ROW).sum(axis=0).block_until_ready()
    """

TF_PAIR = """
    import numpy as np
    import tensorflow as tf

    PER_ROW = {value}


    def setup():
        x = np.random.default_rng(0).standard_normal((64, 256), dtype=np.float32)
        return (tf.constant(x),)


    @tf.function
    def normalize(x, per_row):
        if per_row:
            return tf.map_fn(lambda r: r / tf.norm(r), x)
        return x / tf.norm(x, axis=1, keepdims=True)


    def main(x):
        return tf.reduce_sum(normalize(x, per_row=PER_ROW), axis=0)
    """

PAIRS = {"jax": (JAX_PAIR, "jax::scan_slice"), "tf": (TF_PAIR, "tf::TensorListGetItem")}


def magneton(*args: str) -> warm_cli.Forked | subprocess.Popen:
    return warm_cli.start(args)


def finish(proc: warm_cli.Forked | subprocess.Popen) -> str:
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-2000:]
    return out


@pytest.fixture(scope="module")
def pairs(tmp_path_factory) -> Path:
    pytest.importorskip("jax")
    pytest.importorskip("tensorflow")
    root = tmp_path_factory.mktemp("causes")
    for fw, (text, _) in PAIRS.items():
        (root / fw).mkdir()
        for side, value in (("a", "True"), ("b", "False")):
            (root / fw / f"{side}.py").write_text(textwrap.dedent(text.format(value=value)))
        procs = [
            magneton(
                "record",
                str(root / fw / f"{s}.py"),
                "--db",
                str(root / fw / "db"),
                "--run",
                s,
                "-q",
            )
            for s in "ab"
        ]
        for p in procs:
            finish(p)
    return root


@pytest.mark.parametrize("fw", ["jax", "tf"])
def test_loop_cost_in_place_and_the_switch_traced_to_the_literal(pairs, fw):
    db = pairs / fw / "db"
    loop_op = PAIRS[fw][1]
    with open_db(db, read_only=True) as h:
        p = h.load_profile("a")
    loop_ops = [op for op in p.ops if op.name == loop_op]
    assert len(loop_ops) == 64  # one per row: each iteration recorded
    assert all(op.energy_j > 0 for op in loop_ops)
    assert p.run.energy_j == pytest.approx(sum(op.energy_j for op in p.ops), rel=1e-6)

    # the root comes from the static slice of the source: no re-run of the scripts needed
    d = json.loads(finish(magneton("diff", "--db", str(db), "a", "b", "--json", "--no-rerun")))
    regions = [f for f in d["findings"] if f["kind"] == "region"]
    assert regions, d["message"]
    f = regions[0]
    assert f["wasteful"] == "a"
    rc = f["root_cause"]
    assert rc["file"].endswith(f"{fw}/a.py"), rc
    assert "PER_ROW = True" in rc["code"], rc
    assert rc["values"] == {"a": "True", "b": "False"}
    assert f["fix"]["patch"] and "-PER_ROW = True" in f["fix"]["patch"]
    assert "+PER_ROW = False" in f["fix"]["patch"]


OPTIMIZER = """
import optax

ACCUM_STEPS = 1


def make_optimizer():
    tx = optax.chain(optax.clip_by_global_norm(1.0), optax.adam(1e-3))
{tail}


def setup():
    tx = make_optimizer()
    return (tx,)


def main(tx):
    return tx.update(None, None)
"""
WRAPPED = "    return optax.MultiSteps(tx, every_k_schedule=ACCUM_STEPS)"
GUARDED = """    if ACCUM_STEPS > 1:
        tx = optax.MultiSteps(tx, every_k_schedule=ACCUM_STEPS)
    return tx"""


def _profile(script: Path, line: int) -> Profile:
    """A run of SCRIPT with one operator issued at LINE of main()."""
    frame = FrameRecord(0, str(script), line, "main")
    run = RunInfo(name=script.stem, script=str(script), entry="main", setup="setup")
    return Profile(run=run, ops=[OpRecord(idx=0, name="jax::add", frames=[0])], frames=[frame])


def test_a_difference_inside_a_shared_definition_is_the_statement_not_the_def(tmp_path):
    paths = {}
    for side, tail in (("a", WRAPPED), ("b", GUARDED)):
        paths[side] = tmp_path / f"{side}.py"
        paths[side].write_text(OPTIMIZER.format(tail=tail).lstrip())
    lines = {s: paths[s].read_text().splitlines() for s in "ab"}
    main_line = {s: lines[s].index("    return tx.update(None, None)") + 1 for s in "ab"}
    pa, pb = (_profile(paths[s], main_line[s]) for s in "ab")
    d = program_difference(pa, pb, [0], [0], {"a": {}, "b": {}})
    assert d is not None and d.kind == "code"
    assert d.origins["a"].line == lines["a"].index(WRAPPED) + 1
    assert "optax.MultiSteps" in (d.origins["a"].code or "")
