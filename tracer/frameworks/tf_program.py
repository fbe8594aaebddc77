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

The unfused replay runs each operation eagerly (`execute.execute`: the op's own kernel,
with the graph's attributes), in the same order, so its windows are one op each. An
operation that cannot run eagerly on its own (a call of a nested function whose
definition the eager context lacks) fails the recording with a one-line error naming it.
Not supported yet: control flow inside the graph (`If`, `While` and nested function calls
run as one operator, their bodies unseen), Keras models (they run: their layers' variables
are captures, but layers are name scopes only where Keras writes them).
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
        self.ops = [op for op in self.graph.get_operations() if op.type not in _SKIPPED]
        self._attrs = {op.name: self._attrs_of(op) for op in self.ops if op.type != "Const"}
        self._consts = {
            op.outputs[0].name: tf.constant(tf.make_ndarray(op.get_attr("value")))
            for op in self.ops
            if op.type == "Const"
        }
        code = getattr(self.user_fn, "__code__", None)
        self.entry_code = (os.path.abspath(code.co_filename), code.co_name) if code else None
        self._self_dirs = user_dirs()
        self._tf_dirs = tuple(
            os.path.dirname(os.path.abspath(m.__file__)) + os.sep
            for m in _modules("tensorflow", "keras", "tf_keras")
        )

    def _attrs_of(self, op: Any) -> tuple:
        out: list[Any] = []
        for name in op.node_def.attr:
            if name.startswith("_"):
                continue
            out += [name, _attr_value(self.tf, op.get_attr(name))]
        return tuple(out)

    # -- running -------------------------------------------------------------------

    def call(self) -> Any:
        out = self.fn(*self.args, **self.kwargs)
        for t in self.tf.nest.flatten(out):
            if hasattr(t, "numpy"):
                t.numpy()  # wait for the result (and keep an async executor honest)
        return out

    def _walk(self, leaf: Callable[[Any, list], list]) -> None:
        vals: dict[str, Any] = {
            ph.name: v for ph, v in zip(self.cf.inputs, self.feeds, strict=True)
        }
        vals.update(self._consts)
        for op in self.ops:
            if op.type == "Const":
                continue
            try:
                ins = [vals[t.name] for t in op.inputs]
            except KeyError as e:
                raise MagnetonError(f"op {op.name} ({op.type}) reads {e} before it is made") from e
            outs = leaf(op, ins)
            for t, o in zip(op.outputs, outs, strict=True):
                vals[t.name] = o

    def _run(self, op: Any, ins: list) -> list:
        try:
            return list(
                self._execute(
                    op.type,
                    len(op.outputs),
                    inputs=ins,
                    attrs=self._attrs[op.name],
                    ctx=self._ctx(),
                )
            )
        except Exception as e:
            msg = " ".join(str(e).split())[:200]
            raise MagnetonError(f"cannot replay op {op.name} ({op.type}) eagerly: {msg}") from e

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
        by_name: dict[str, int] = {}  # graph tensor name -> tensor idx
        kinds: dict[str, str] = {"": "TensorFlow program"}

        def register(value: Any, rec: TensorRecord) -> int:
            rec.idx = len(st.tensors)
            a = np.asarray(value.numpy() if hasattr(value, "numpy") else value)
            rec.shape = list(a.shape)
            rec.dtype = dtype_name(a.dtype) if a.dtype.kind != "O" else "resource"
            rec.stride = [s // a.itemsize for s in a.strides] if a.itemsize else []
            rec.numel = int(a.size)
            if a.dtype.kind in "biufc":
                for k, v in summarize_array(a).items():
                    setattr(rec, k, v)
            st.tensors.append(rec)
            return rec.idx

        for ph, v, name in zip(self.cf.inputs, self.feeds, self.feed_names, strict=True):
            resource = ph.dtype == self.tf.resource
            value = np.zeros(0, np.float32) if resource else v
            kind = "param" if resource else "input"
            by_name[ph.name] = register(value, TensorRecord(idx=-1, kind=kind, name=name))
        for tname, v in self._consts.items():
            by_name[tname] = register(v, TensorRecord(idx=-1, kind="constant", name=tname))

        def leaf(op: Any, ins: list) -> list:
            idx = len(st.ops)
            scope = op.name.split("/")[:-1]
            module = path_name(scope)
            for k in range(1, len(scope) + 1):
                kinds.setdefault(path_name(scope[:k]), "name_scope")
            frame_ids, api, chain = self._frames(op, frames)
            t0 = time.perf_counter_ns()
            out = self._run(op, ins)
            t1 = time.perf_counter_ns()
            rec = OpRecord(
                idx=idx,
                name="tf::" + op.type,
                module=module,
                inputs=[by_name[t.name] for t in op.inputs],
                input_shapes=[list(t.shape) for t in ins],
                input_dtypes=[_tf_dtype(t) for t in ins],
                input_contiguous=[True] * len(ins),
                scalar_args=_attr_text(self._attrs[op.name]),
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
            for k, (t, o) in enumerate(zip(op.outputs, out, strict=True)):
                tidx = register(o, TensorRecord(idx=-1, producer=idx, out_index=k))
                by_name[t.name] = tidx
                outputs.append(tidx)
            rec.outputs = outputs
            rec.output_shapes = [list(st.tensors[i].shape) for i in outputs]
            rec.output_dtypes = [st.tensors[i].dtype for i in outputs]
            st.ops.append(rec)
            return out

        self._walk(leaf)
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


def _attr_value(tf: Any, v: Any) -> Any:
    """An attribute read from the graph, in the form `execute.execute` takes."""
    if isinstance(v, tf.DType):
        return v.as_datatype_enum
    if isinstance(v, list):
        return [_attr_value(tf, x) for x in v]
    if isinstance(v, tf.TensorShape):
        return v.as_list() if v.rank is not None else None
    return v


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
