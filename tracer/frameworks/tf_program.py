"""Record a TensorFlow program: the concrete graph of its `tf.function`, op by op.

The entry (a `tf.function`, or a plain function that is wrapped in one) is traced once
for the setup's arguments (`get_concrete_function(*args).graph`); the graph's operations,
in creation order (a topological order for a function graph), are the operators:

* `Placeholder`s are the entry's arguments (a `tf.Variable` argument by its handle) and
  the function's captures; `Const`s are constant tensors, not operators (as a Python
  constant is not an aten operator); `NoOp` does nothing and is left out.
* Every other operation is one `OpRecord` named `tf::<OpType>` (`tf::MatMul`, `tf::Cast`),
  its module path its name scope (`blk/count_nonzero/Cast` runs in `blk.count_nonzero`:
  Smaragdine's qualified names, which TensorFlow writes into every op name).
* Its inputs and outputs are `TensorRecord`s with the summaries PyTorch tensors get, so
  a TensorFlow tensor and a PyTorch or JAX tensor of the same values match.
* Its frames are the user's frames of the op's creation traceback (entry first); its API
  the TensorFlow function the user called (`tf.math.count_nonzero`), and the call path
  the library functions under it, then the op.

Control flow is walked, not run as one operator, so its cost lands on the operations
its bodies run (`tf.map_fn`, `tf.while_loop`, autograph loops, `tf.cond`, nested
`tf.function` calls):

* `If`/`StatelessIf` and `Case` run the branch their (concrete) predicate or index
  selects; `PartitionedCall`/`StatefulPartitionedCall` run their function's graph. The
  body's operations carry their own names, which TensorFlow writes under the calling
  op's scope (`map/while/mul`), so the module path puts them inside the loop or branch.
* `While`/`StatelessWhile` are unrolled: each iteration's condition and body operations
  are operators of their own, up to `MAX_UNROLLED_OPS` body operations per loop; the
  iterations left after that run as one operator (the `While` op on the carried values,
  its function definitions registered in the eager context), so a long loop records
  its first iterations one by one and the rest as one cost, never a failed recording.
  Every walk makes the same decisions from the same values, so the structure pass and
  each replay run the same operator sequence.
* Values that have no numeric summary (TensorLists and other `variant` tensors, resource
  handles) are recorded with their dtype and no summary: matching never pairs them
  (diagnose/matching/equivalence.py compares summaries), and the run's config counts
  them (`tf.unsummarised_tensors`).

The unfused replay runs each operation eagerly (`execute.execute`: the op's own kernel,
with the graph's attributes, converted to the form eager execution takes: shapes as
lists, functions by name), in the same order, so its windows are one op each. An
operation that still cannot run eagerly fails the recording with a one-line error
naming it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from magneton.model import MagnetonError, OpRecord, TensorRecord
from magneton.tracer.frameworks.base import (
    FrameTable,
    KernelTable,
    Structure,
    TracedProgram,
    Window,
    dtype_name,
    module_records,
    path_name,
    summarize_array,
    user_dirs,
)

_SKIPPED = ("Placeholder", "NoOp")
# TensorFlow's plumbing between an API function and the op it creates: not an API
_PLUMBING = ("/util/", "/framework/", "/eager/", "/autograph/", "gen_")
_IF = ("If", "StatelessIf")
_CASE = ("Case", "StatelessCase")
_WHILE = ("While", "StatelessWhile")
_CALL = ("PartitionedCall", "StatefulPartitionedCall")
MAX_UNROLLED_OPS = 4096  # body operations of one loop, all unrolled iterations together

# (op, inputs) -> outputs: what a walk does with one operation
Leaf = Callable[[Any, list], list]


class _Graph:
    """One graph's operations, ready to run: the entry's concrete graph or a function's
    body. `inputs`/`outputs` are its placeholders and results in call order."""

    def __init__(self, tf: Any, graph: Any, inputs: list, outputs: list):
        self.inputs = list(inputs)
        self.outputs = list(outputs)
        self.ops = [op for op in graph.get_operations() if op.type not in _SKIPPED]
        self.consts = {
            op.outputs[0].name: tf.constant(tf.make_ndarray(op.get_attr("value")))
            for op in self.ops
            if op.type == "Const"
        }


class TfProgram(TracedProgram):
    framework = "tf"

    def __init__(self, fn: Callable, args: tuple, kwargs: dict | None = None):
        import tensorflow as tf
        from tensorflow.python.eager import context, execute

        self.tf = tf
        self._execute = execute.execute
        self._ctx = context.context
        self.fn = fn if hasattr(fn, "get_concrete_function") else tf.function(fn)
        self.user_fn = getattr(fn, "python_function", fn)
        self.args = args
        self.kwargs = kwargs or {}
        try:
            self.cf = self.fn.get_concrete_function(*args, **self.kwargs)
        except Exception as e:  # a program TensorFlow cannot trace: one line
            msg = " ".join(str(e).split())[:300]
            raise MagnetonError(f"cannot trace the entry with tf.function: {msg}") from e
        self.graph = self.cf.graph
        flat = tf.nest.flatten((args, self.kwargs), expand_composites=False)
        feeds = [a.handle if isinstance(a, tf.Variable) else a for a in flat]
        feeds = [a for a in feeds if tf.is_tensor(a) or isinstance(a, np.ndarray)]
        feeds += list(self.cf.captured_inputs)
        if len(feeds) != len(self.cf.inputs):
            raise MagnetonError(
                f"the traced function takes {len(self.cf.inputs)} tensors but the entry's "
                f"arguments and captures give {len(feeds)}"
            )
        self.feeds = [tf.convert_to_tensor(v) if isinstance(v, np.ndarray) else v for v in feeds]
        n_args = len(feeds) - len(self.cf.captured_inputs)
        self.feed_names = [f"args[{i}]" for i in range(n_args)] + [
            f"capture[{i}]" for i in range(len(self.cf.captured_inputs))
        ]
        self.main = _Graph(tf, self.graph, self.cf.inputs, self.cf.outputs)
        self.ops = self.main.ops
        self._functions = _function_graphs(self.graph)
        self._bodies: dict[str, _Graph] = {}
        self._registered = False
        self._attr_cache: dict[int, tuple[Any, tuple]] = {}
        code = getattr(self.user_fn, "__code__", None)
        self.entry_code = (os.path.abspath(code.co_filename), code.co_name) if code else None
        self._self_dirs = user_dirs()
        self._tf_dirs = tuple(
            os.path.dirname(os.path.abspath(m.__file__)) + os.sep
            for m in _modules("tensorflow", "keras", "tf_keras")
        )

    # -- running -------------------------------------------------------------------

    def call(self) -> Any:
        out = self.fn(*self.args, **self.kwargs)
        for t in self.tf.nest.flatten(out):
            if hasattr(t, "numpy"):
                t.numpy()  # wait for the result (and keep an async executor honest)
        return out

    def _walk(self, leaf: Leaf) -> None:
        self._eval(self.main, list(self.feeds), leaf)

    def _body(self, name: str) -> _Graph:
        """The graph of function NAME (a loop's body, a branch, a called function)."""
        got = self._bodies.get(name)
        if got is None:
            fg = self._functions.get(name)
            if fg is None:
                raise MagnetonError(f"the graph calls function {name}, whose body is not in it")
            got = self._bodies[name] = _Graph(self.tf, fg, fg.inputs, fg.outputs)
        return got

    def _eval(self, g: _Graph, feeds: list, leaf: Leaf) -> list:
        vals: dict[str, Any] = {ph.name: v for ph, v in zip(g.inputs, feeds, strict=True)}
        vals.update(g.consts)
        for op in g.ops:
            if op.type == "Const":
                continue
            try:
                ins = [vals[t.name] for t in op.inputs]
            except KeyError as e:
                raise MagnetonError(f"op {op.name} ({op.type}) reads {e} before it is made") from e
            outs = self._op(g, op, ins, leaf)
            for t, o in zip(op.outputs, outs, strict=True):
                vals[t.name] = o
        return [vals[t.name] for t in g.outputs]

    def _op(self, g: _Graph, op: Any, ins: list, leaf: Leaf) -> list:
        """Run one operation: control flow through its bodies, anything else by `leaf`."""
        kind = op.type
        if kind in _IF:
            branch = op.get_attr("then_branch" if _truth(ins[0]) else "else_branch")
            return self._eval(self._body(branch.name), ins[1:], leaf)
        if kind in _CASE:
            branches = op.get_attr("branches")
            k = int(ins[0].numpy())
            k = k if 0 <= k < len(branches) else len(branches) - 1  # out of range: default
            return self._eval(self._body(branches[k].name), ins[1:], leaf)
        if kind in _CALL:
            return self._eval(self._body(op.get_attr("f").name), ins, leaf)
        if kind in _WHILE:
            return self._while(g, op, ins, leaf)
        return leaf(op, ins)

    def _while(self, g: _Graph, op: Any, ins: list, leaf: Leaf) -> list:
        """Unroll a while loop up to `MAX_UNROLLED_OPS` body operations; the iterations
        left run as the loop op itself, on the carried values (see module docstring)."""
        cond = self._body(op.get_attr("cond").name)
        body = self._body(op.get_attr("body").name)
        trips = max(1, MAX_UNROLLED_OPS // max(1, len(body.ops)))
        carry = list(ins)
        for _ in range(trips):
            (pred,) = self._eval(cond, carry, leaf)
            if not _truth(pred):
                return carry
            carry = self._eval(body, carry, leaf)
        self._register_functions()
        return leaf(op, carry)

    def _register_functions(self) -> None:
        """Put the graph's function definitions in the eager context, so a loop or call op
        run as one operator finds its bodies."""
        if self._registered:
            return
        ctx = self._ctx()
        for fdef in self.graph.as_graph_def().library.function:
            if not ctx.has_function(fdef.signature.name):
                ctx.add_function_def(fdef)
        self._registered = True

    def _run(self, op: Any, ins: list) -> list:
        try:
            return list(
                self._execute(
                    op.type,
                    len(op.outputs),
                    inputs=ins,
                    attrs=self._attrs(op),
                    ctx=self._ctx(),
                )
            )
        except Exception as e:
            msg = " ".join(str(e).split())[:200]
            raise MagnetonError(f"cannot replay op {op.name} ({op.type}) eagerly: {msg}") from e

    def _attrs(self, op: Any) -> tuple:
        """OP's attributes for eager execution, read once per operation (a loop body's
        operations run once per iteration)."""
        got = self._attr_cache.get(id(op))
        if got is None or got[0] is not op:
            got = self._attr_cache[id(op)] = (op, _attrs_of(self.tf, op))
        return got[1]

    def replay(self) -> list[Window]:
        wins: list[Window] = []
        clock, cpu = time.perf_counter_ns, time.process_time_ns

        def leaf(op: Any, ins: list) -> list:
            c0 = cpu()
            t0 = clock()
            out = self._run(op, ins)
            for o in out:
                o._shape_tuple()  # an eager CPU tensor is ready when its op returns
            t1 = clock()
            wins.append(("tf::" + op.type, t0, t1, c0, cpu()))
            return out

        self._walk(leaf)
        return wins

    # -- structure -----------------------------------------------------------------

    def structure(self) -> Structure:
        st = Structure()
        frames = FrameTable()
        kernels = KernelTable()
        live: dict[int, tuple[Any, int]] = {}  # id(value) -> (value kept alive, tensor idx)
        kinds: dict[str, str] = {"": "TensorFlow program"}
        unsummarised = 0

        def register(value: Any, rec: TensorRecord) -> int:
            nonlocal unsummarised
            rec.idx = len(st.tensors)
            dtype = _tf_dtype(value)
            if dtype in ("variant", "resource"):
                # a TensorList or a handle: no values to summarise (module docstring)
                rec.shape = list(getattr(value, "shape", []) or [])
                rec.dtype = dtype
                unsummarised += 1
            else:
                a = np.asarray(value.numpy() if hasattr(value, "numpy") else value)
                rec.shape = list(a.shape)
                rec.dtype = dtype_name(a.dtype) if a.dtype.kind != "O" else "object"
                rec.stride = [s // a.itemsize for s in a.strides] if a.itemsize else []
                rec.numel = int(a.size)
                if a.dtype.kind in "biufc":
                    for k, v in summarize_array(a).items():
                        setattr(rec, k, v)
            st.tensors.append(rec)
            live[id(value)] = (value, rec.idx)
            return rec.idx

        def lookup(value: Any) -> int:
            got = live.get(id(value))
            if got is not None and got[0] is value:
                return got[1]
            return register(value, TensorRecord(idx=-1, kind="constant"))

        for ph, v, name in zip(self.cf.inputs, self.feeds, self.feed_names, strict=True):
            kind = "param" if ph.dtype == self.tf.resource else "input"
            if id(v) not in live:
                register(v, TensorRecord(idx=-1, kind=kind, name=name))

        def leaf(op: Any, ins: list) -> list:
            idx = len(st.ops)
            scope = op.name.split("/")[:-1]
            module = path_name(scope)
            for k in range(1, len(scope) + 1):
                kinds.setdefault(path_name(scope[:k]), _scope_kind(scope[k - 1]))
            frame_ids, api, chain = self._frames(op, frames)
            inputs = [lookup(v) for v in ins]
            t0 = time.perf_counter_ns()
            out = self._run(op, ins)
            t1 = time.perf_counter_ns()
            rec = OpRecord(
                idx=idx,
                name="tf::" + op.type,
                module=module,
                inputs=inputs,
                input_shapes=[list(t.shape) for t in ins],
                input_dtypes=[_tf_dtype(t) for t in ins],
                input_contiguous=[True] * len(ins),
                scalar_args=_attr_text(self._attrs(op)),
                frames=frame_ids,
                api=api or "tf::" + op.type,
                call_paths=[" > ".join([*chain, "tf::" + op.type])],
                device="cpu",
                start_ns=t0,
                end_ns=t1,
                time_s=(t1 - t0) / 1e9,
            )
            rec.kernels = [kernels.add("tf::" + op.type, "cpu")]
            outputs = []
            for k, o in enumerate(out):
                outputs.append(register(o, TensorRecord(idx=-1, producer=idx, out_index=k)))
            rec.outputs = outputs
            rec.output_shapes = [list(st.tensors[i].shape) for i in outputs]
            rec.output_dtypes = [st.tensors[i].dtype for i in outputs]
            st.ops.append(rec)
            return out

        self._walk(leaf)
        self.unsummarised = unsummarised
        st.frames = frames.records
        st.kernels = kernels.records
        st.modules = module_records(st.ops, kinds)
        return st

    def _frames(self, op: Any, table: FrameTable) -> tuple[list[int], str, list[str]]:
        raw = list(op.traceback or [])  # outermost first
        user: list[Any] = []
        lib: list[Any] = []
        started = self.entry_code is None
        for f in raw:
            fn = os.path.abspath(f.filename)
            if not started:
                started = (fn, f.name) == self.entry_code
                if not started:
                    continue
            if fn.startswith(self._self_dirs):
                continue
            if fn.startswith(self._tf_dirs):
                if user and not any(p in fn for p in _PLUMBING):
                    lib.append(f)
                continue
            if lib:  # user code called back from the library (a Keras layer's call)
                lib = []
            user.append(f)
        ids = [table.add(f.filename, f.lineno, f.name) for f in user]
        chain = list(dict.fromkeys(_api_name(f.filename, f.name) for f in lib))[:6]
        return ids, chain[0] if chain else "", chain

    def config(self) -> dict[str, str]:
        tf = self.tf
        cfg = {"tensorflow.__version__": tf.__version__}
        if getattr(self, "unsummarised", 0):
            cfg["tf.unsummarised_tensors"] = str(self.unsummarised)
        try:
            cfg["tf.config.optimizer.get_jit"] = str(tf.config.optimizer.get_jit())
            cfg["tf.config.threading.intra_op"] = str(
                tf.config.threading.get_intra_op_parallelism_threads()
            )
        except Exception:
            pass
        return cfg

    def boundary_bytes(self) -> float:
        total = 0.0
        for t in list(self.cf.inputs) + list(self.cf.outputs):
            if t.dtype == self.tf.resource or not t.shape.is_fully_defined():
                continue
            total += float(np.prod(t.shape.as_list())) * t.dtype.size
        return total


def _modules(*names: str) -> list[Any]:
    import importlib

    out = []
    for n in names:
        try:
            m = importlib.import_module(n)
        except ImportError:
            continue
        if getattr(m, "__file__", None):
            out.append(m)
    return out


def _attrs_of(tf: Any, op: Any) -> tuple:
    """An operation's attributes as `execute.execute` takes them (name, value, ...)."""
    out: list[Any] = []
    for name in op.node_def.attr:
        if name.startswith("_"):
            continue
        out += [name, _attr_value(tf, op.get_attr(name))]
    return tuple(out)


def _attr_value(tf: Any, v: Any) -> Any:
    """An attribute read from the graph, in the form `execute.execute` takes: a dtype as
    its enum, a shape (also a `TensorShapeProto`, as loop ops keep their output shapes)
    as a list, a function (`NameAttrList`) by name."""
    from tensorflow.core.framework import attr_value_pb2, tensor_shape_pb2

    if isinstance(v, tf.DType):
        return v.as_datatype_enum
    if isinstance(v, list):
        return [_attr_value(tf, x) for x in v]
    if isinstance(v, tensor_shape_pb2.TensorShapeProto):
        v = tf.TensorShape(v)
    if isinstance(v, tf.TensorShape):
        return v.as_list() if v.rank is not None else None
    if isinstance(v, attr_value_pb2.NameAttrList):
        return v.name
    return v


def _function_graphs(graph: Any) -> dict[str, Any]:
    """Every function body reachable from GRAPH (nested loops and calls), by name."""
    out: dict[str, Any] = {}
    todo = [graph]
    while todo:
        g = todo.pop()
        for name, fn in getattr(g, "_functions", {}).items():
            if name in out:
                continue
            fg = getattr(fn, "graph", None)
            if fg is not None:
                out[name] = fg
                todo.append(fg)
    return out


def _truth(t: Any) -> bool:
    """A predicate as TensorFlow's `If` and `While` read it: a scalar's truth, else
    whether the tensor is non-empty."""
    a = np.asarray(t.numpy())
    return bool(a) if a.ndim == 0 else a.size > 0


def _scope_kind(segment: str) -> str:
    """What made a module path segment: a loop, a branch, or a name scope."""
    if segment == "while" or segment.startswith("while_"):
        return "while"
    if segment == "cond" or segment.startswith("cond_"):
        return "cond"
    return "name_scope"


def _attr_text(attrs: tuple) -> str:
    parts = []
    for name, v in zip(attrs[::2], attrs[1::2], strict=True):
        if name in ("T", "Tidx", "SrcT", "DstT", "dtype", "Tshape", "Tpaddings", "Tindices"):
            continue  # dtypes are on the tensors already
        r = repr(v)
        parts.append(f"{name}={r if len(r) <= 60 else r[:57] + '...'}")
    return ", ".join(parts)


def _tf_dtype(t: Any) -> str:
    d = getattr(t, "dtype", None)
    name = getattr(d, "name", str(d))
    return "resource" if name == "resource" else name


def _api_name(file: str, function: str) -> str:
    """`tf.math.count_nonzero`-like spelling of a TensorFlow library frame."""
    base = os.path.splitext(os.path.basename(file))[0]
    fn = function.removesuffix("_v2")
    if base in ("math_ops", "gen_math_ops"):
        return f"tf.math.{fn}"
    if base in ("nn_ops", "nn_impl", "gen_nn_ops"):
        return f"tf.nn.{fn}"
    if base in ("array_ops", "gen_array_ops"):
        return f"tf.{fn}"
    if base in ("signal", "fft_ops", "spectral_ops"):
        return f"tf.signal.{fn}"
    return f"tf.{base}.{fn}"
