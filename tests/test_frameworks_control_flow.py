"""Control flow in JAX and TensorFlow programs is recorded, never a failed recording.

The recorders walk the framework's own graph (tracer/frameworks/jax_program.py,
tf_program.py). What a user sees, checked here:

* the entry as written records: a JAX entry ending in `.block_until_ready()`, a Python
  loop over jitted calls, a host round trip (`float(x)` in the entry), static arguments
  of `jax.jit` (an optax transformation as an argument);
* loops are regions with their costs: `lax.scan`, `lax.while_loop`, the solver loop of
  `jax.scipy.sparse.linalg.cg`, `tf.map_fn`, `tf.while_loop`, autograph loops with a
  `TensorArray`: each iteration's operators under the loop's module path, and a loop too
  long to unroll records its first iterations one by one and the rest as one operator
  (the same values either way);
* branches run the taken branch (`lax.cond`, `tf.cond`), `jax.checkpoint`'s
  recomputation is visible, a TensorList (variant) tensor is recorded without a summary;
* the structure pass and the unfused replay run the same operator sequence (the energy
  attribution relies on it).

These run in this process on programs a few operators wide (seconds); a `tf.map_fn` and a
`lax.scan` program recorded and diffed through the CLI are in
tests/test_frameworks_causes.py, whose pairs also carry the switch that causes the loop.
"""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from magneton.tracer.frameworks import jax_program, tf_program
from magneton.tracer.frameworks.jax_program import JaxProgram
from magneton.tracer.frameworks.tf_program import TfProgram

# imported by the tests that use them (the fixtures below), not here: every xdist worker
# collects this file, and importing both frameworks took each of them 3 s before the
# first test could start; only the worker that runs these tests needs them
if not all(importlib.util.find_spec(m) for m in ("jax", "tensorflow")):
    pytest.skip("needs jax and tensorflow", allow_module_level=True)


@pytest.fixture(scope="module")
def jax():
    import jax

    return jax


@pytest.fixture(scope="module")
def tf():
    import tensorflow as tf

    return tf


RNG = np.random.default_rng(0)
X = RNG.standard_normal((6, 8), dtype=np.float32)
W = (RNG.standard_normal((8, 8)) / 3).astype(np.float32)


def recorded(program) -> tuple[list[str], object]:
    """The structure pass's operator names, checked against one unfused replay's."""
    st = program.structure()
    names = [op.name for op in st.ops]
    assert names == [w[0] for w in program.replay()]
    return names, st


# --------------------------------------------------------------------------------------
# JAX
# --------------------------------------------------------------------------------------


def jx(jnp) -> tuple:
    return jnp.asarray(X), jnp.asarray(W)


def test_jax_entry_as_written_block_until_ready_python_loop_host_read(jax):
    jnp = jax.numpy
    step = jax.jit(lambda r, w: jnp.tanh(r @ w))

    def per_example(x, w):
        return jnp.stack([step(x[i], w) for i in range(x.shape[0])]).block_until_ready()

    names, st = recorded(JaxProgram(per_example, jx(jnp)))
    assert names.count("jax::dot_general") == 6 and names.count("jax::tanh") == 6

    def host_read(x, w):
        y = x @ w
        if float(y.sum()) > -1e9:  # a value read on the host: not traceable
            y = y * 2.0
        return jnp.tanh(y)

    p = JaxProgram(host_read, jx(jnp))
    names, st = recorded(p)
    assert p.captured and p.config()["jax.entry_captured"].startswith("eagerly")
    assert names[0] == "jax::dot_general" and "jax::mul" in names and names[-1] == "jax::tanh"
    # the value flows: the product's output feeds the reduction that was read back
    dot, total = st.ops[0], next(op for op in st.ops if op.name == "jax::reduce_sum")
    assert dot.outputs[0] in total.inputs


def test_jax_static_arguments_are_not_traced(jax):
    jnp = jax.numpy
    optax = pytest.importorskip("optax")

    tx = optax.adam(1e-2)
    params = {"w": jnp.asarray(W)}

    def step(tx, params, state, x):
        grads = jax.grad(lambda p: jnp.sum(jnp.tanh(x @ p["w"])))(params)
        updates, state = tx.update(grads, state, params)
        return optax.apply_updates(params, updates), state

    entry = jax.jit(step, static_argnums=0)
    p = JaxProgram(entry, (tx, params, tx.init(params), jnp.asarray(X)))
    names, st = recorded(p)
    assert "jax::sqrt" in names  # adam's update ran, with tx kept static
    assert {t.name for t in st.tensors if t.kind == "input"} >= {"args[1]['w']", "args[3]"}


def test_jax_loops_are_unrolled_and_long_ones_end_in_one_operator(jax, monkeypatch):
    jnp = jax.numpy

    def scan(x, w):
        return jax.lax.scan(lambda c, xi: (jnp.tanh(c @ w + xi), c.sum()), jnp.zeros(8), x)

    def loop(x, w):
        cond = lambda c: c[1] < 20  # noqa: E731
        return jax.lax.while_loop(cond, lambda c: (jnp.tanh(c[0] @ w), c[1] + 1), (x, 0))[0]

    want = {f: f(*jx(jnp)) for f in (scan, loop)}
    names, st = recorded(JaxProgram(scan, jx(jnp)))
    assert names.count("jax::scan_slice") == 6 and names.count("jax::scan_stack") == 1
    assert all(op.module == "scan" for op in st.ops if op.name == "jax::dot_general")
    names, st = recorded(JaxProgram(loop, jx(jnp)))
    assert names.count("jax::dot_general") == 20
    assert {m.name: m.type for m in st.modules}["while_body"] == "while_body"

    monkeypatch.setattr(jax_program, "MAX_UNROLLED_EQNS", 12)  # 3 trips of each, then one op
    for f, rest in ((scan, "jax::scan"), (loop, "jax::while")):
        p = JaxProgram(f, jx(jnp))
        names, st = recorded(p)
        assert names.count(rest) == 1 and names.count("jax::dot_general") == 3
        op = st.ops[names.index(rest)]
        assert "trips" in op.scalar_args
        outs = jax_program._Walker(jax, lambda s, i, _: s.fn(*i)).run(p.closed, p.leaves)
        for got, ref in zip(outs, jax.tree_util.tree_leaves(want[f]), strict=True):
            np.testing.assert_allclose(np.asarray(got), np.asarray(ref), rtol=1e-6)


def test_jax_solver_loop_cond_and_checkpoint_are_walked(jax):
    jnp = jax.numpy

    def solve(x, w):
        a = w @ w.T + 8.0 * jnp.eye(8)
        return jax.scipy.sparse.linalg.cg(lambda v: a @ v, x[0], tol=1e-6)[0]

    names, st = recorded(JaxProgram(solve, jx(jnp)))
    assert "jax::custom_linear_solve" not in names
    assert names.count("jax::dot_general") > 5  # one matvec per CG iteration
    assert any(op.module.startswith("linear_solve") for op in st.ops)

    def branch(x, w):
        return jax.lax.cond(x.sum() > 1e9, lambda a: jnp.sin(a @ w), lambda a: jnp.cos(a), x)

    names, _ = recorded(JaxProgram(branch, jx(jnp)))
    assert "jax::cos" in names and "jax::sin" not in names

    def remat(x, w):
        g = jax.checkpoint(lambda a: jnp.tanh(a @ w))
        return jax.grad(lambda a: g(a).sum())(x)

    names, st = recorded(JaxProgram(remat, jx(jnp)))
    # forward product, its recomputation in the backward pass, and the gradient's product
    assert names.count("jax::tanh") == 2 and names.count("jax::dot_general") == 3
    assert any(op.module.endswith("checkpoint") for op in st.ops)


# --------------------------------------------------------------------------------------
# TensorFlow
# --------------------------------------------------------------------------------------


def tx_(tf) -> tuple:
    return tf.constant(X), tf.constant(W)


def test_tf_map_fn_while_and_tensor_array_are_unrolled_with_unsummarised_lists(tf):
    def mapped(x, w):
        return tf.map_fn(lambda r: tf.tanh(tf.linalg.matvec(w, r)), x)

    p = TfProgram(mapped, tx_(tf))
    names, st = recorded(p)
    assert names.count("tf::MatMul") == 6 and names.count("tf::Tanh") == 6
    assert all(op.module.startswith("map.while") for op in st.ops if op.name == "tf::Tanh")
    lists = [t for t in st.tensors if t.dtype == "variant"]
    assert lists and not any(t.stats for t in lists)
    assert int(p.config()["tf.unsummarised_tensors"]) == len(lists)

    def running(x, w):
        out = tf.TensorArray(tf.float32, size=6)
        acc = tf.zeros([8])
        for t in tf.range(6):
            acc = acc + x[t]
            out = out.write(t, acc)
        return out.stack()

    names, _ = recorded(TfProgram(tf.function(running), tx_(tf)))
    assert names.count("tf::AddV2") >= 6 and "tf::TensorListStack" in names


def test_tf_cond_nested_call_and_a_long_loop(tf, monkeypatch):
    def branch(x, w):
        return tf.cond(tf.reduce_sum(x) > 1e9, lambda: tf.sin(x @ w), lambda: tf.cos(x))

    names, _ = recorded(TfProgram(branch, tx_(tf)))
    assert "tf::Cos" in names and "tf::Sin" not in names and "tf::StatelessIf" not in names

    inner = tf.function(lambda a, w: tf.tanh(a @ w))
    names, _ = recorded(TfProgram(lambda x, w: inner(x, w) + inner(-x, w), tx_(tf)))
    assert names.count("tf::Tanh") == 2 and "tf::PartitionedCall" not in names

    def loop(x, w):
        body = lambda i, c: (i + 1, tf.tanh(c @ w))  # noqa: E731
        return tf.while_loop(lambda i, c: i < 30, body, (tf.constant(0), x))[1]

    want = loop(*tx_(tf)).numpy()
    monkeypatch.setattr(tf_program, "MAX_UNROLLED_OPS", 12)  # a few trips, then one op
    p = TfProgram(loop, tx_(tf))
    names, st = recorded(p)
    assert names.count("tf::StatelessWhile") + names.count("tf::While") == 1
    assert 0 < names.count("tf::MatMul") < 30
    final = st.tensors[st.ops[-1].outputs[0]]
    np.testing.assert_allclose(final.stats[0], want.sum(), rtol=1e-5)


def test_a_diff_says_which_tensors_matching_could_not_compare():
    from magneton.diagnose.matching.diff import unsummarised_note
    from magneton.model import Profile, RunInfo

    def run(name: str, count: str | None) -> Profile:
        config = {"tf.unsummarised_tensors": count} if count else {}
        return Profile(run=RunInfo(name=name), config=config)

    note = unsummarised_note(run("loop", "195"), run("vec", None))
    assert "195 of 'loop'" in note and "vec" not in note
    assert unsummarised_note(run("a", None), run("b", None)) == ""
