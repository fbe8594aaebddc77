"""Record a JAX program: its jaxpr walked equation by equation.

The structure is the entry's jaxpr (`jax.make_jaxpr`), walked into nested jaxprs so that
each *primitive* the program runs becomes one `OpRecord` named `jax::<primitive>`:

* `jit`/`pjit`, `closed_call`, `remat`, `custom_jvp_call`, `custom_vjp_call` are inlined;
  the jit's name becomes a module-path segment, after the equation's own name stack
  (`jax.named_scope`, Flax module names), so the name stack is the module path.
* `cond` runs the branch its index selects (read from the concrete index), under `cond`.
* `scan` is unrolled: per iteration a `jax::scan_slice` operator takes the iteration's
  slices of the scanned inputs, and one `jax::scan_stack` operator stacks the outputs,
  so dataflow stays explicit; a scan of more than `MAX_UNROLLED_EQNS` body equations in
  all stays one operator (its body runs compiled).
* `while` is unrolled the same way when it ends within `MAX_WHILE_TRIPS` iterations
  (counted once with JAX's own evaluator, before anything is recorded, so the structure
  and the replay make the same decision); longer loops stay one operator.
* Any other primitive with a sub-jaxpr (`custom_linear_solve`, ...) runs as one operator.

Every walk makes the same control-flow decisions from the same inputs, so the structure
pass and each unfused replay yield the same operator sequence.

Each operator's inputs and outputs are `TensorRecord`s with the value summaries PyTorch
tensors get (base.summarize_array); a literal operand is a scalar argument, as a Python
number passed to an aten operator is. Call paths come from each equation's source info:
the user's frames (entry first), then the JAX API the user called (`jax.scipy.linalg.expm`,
`jnp.matmul`) and the library functions under it, then the primitive.

What this does not see: XLA's fusion decisions and the HLO a primitive lowers to (an
operator's kernel is named `xla::<primitive>`); randomness keyed by `jax.random` keys is
recorded like any other integer tensor.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
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

MAX_UNROLLED_EQNS = 4096  # body equations of one scan, all iterations together
MAX_WHILE_TRIPS = 256
_INLINED = ("pjit", "jit", "closed_call", "core_call", "remat", "checkpoint")
_CUSTOM = ("custom_jvp_call", "custom_vjp_call", "custom_vjp_call_jaxpr")
# JAX's dispatch machinery between an API function and its primitive: not an API
_WRAPPERS = (
    "traceback_util.py",
    "api_util.py",
    "linear_util.py",
    "pjit.py",
    "core.py",
    "source_info_util.py",
    "partial_eval.py",
    "api.py",
)


@dataclass
class _Step:
    """One operator to run: an equation's primitive, or a synthetic scan slice/stack."""

    name: str
    fn: Callable[..., list]
    literal: list[bool]  # per input: a literal (scalar argument), not a tensor
    params: str
    source_info: Any
    # the frames of the equations this one is nested in (innermost first): a jaxpr traced
    # by an inner `jit` records only the frames below that jit's function
    outer: tuple = ()


def _eqn_step(eqn: Any, literal_cls: type, outer: tuple = ()) -> _Step:
    prim = eqn.primitive
    bind_params = prim.get_bind_params(eqn.params)
    ctx = getattr(eqn, "ctx", None)

    def run(*invals: Any) -> list:
        if ctx is not None:
            with ctx.manager:
                out = prim.bind(*invals, **bind_params)
        else:
            out = prim.bind(*invals, **bind_params)
        return list(out) if prim.multiple_results else [out]

    return _Step(
        name=prim.name,
        fn=run,
        literal=[isinstance(v, literal_cls) for v in eqn.invars],
        params=_params_text(eqn),
        source_info=eqn.source_info,
        outer=outer,
    )


def _params_text(eqn: Any) -> str:
    parts = []
    for k, v in eqn.params.items():
        if hasattr(v, "jaxpr") or hasattr(v, "eqns") or callable(v):
            continue
        r = repr(v)
        parts.append(f"{k}={r if len(r) <= 60 else r[:57] + '...'}")
    if eqn.primitive.name == "dot_general":
        # the contracted size, for FLOPs (tracer/energy/flops.py): 2·K multiply-adds per output
        (lc, _), _ = eqn.params["dimension_numbers"]
        shape = eqn.invars[0].aval.shape
        k = int(np.prod([shape[d] for d in lc])) if lc else 1
        parts.insert(0, f"contract_size={k}")
    return ", ".join(parts)


class _Walker:
    """Evaluates a closed jaxpr, calling `leaf(step, invals, path)` for each operator."""

    def __init__(self, jax: Any, leaf: Callable[[_Step, list, tuple], list], trips: dict):
        from jax.extend import core as jcore

        self.jax = jax
        self.leaf = leaf
        self.literal_cls = jcore.Literal
        self.trips = trips  # id(while eqn) -> unrolled?, decided once (see module docstring)
        self.kinds: dict[str, str] = {}  # module path -> what made it (jit, scan, ...)

    def run(self, closed: Any, args: list) -> list:
        return self._eval(closed.jaxpr, list(closed.consts), args, ())

    def _eval(self, jaxpr: Any, consts: list, args: list, path: tuple, outer: tuple = ()) -> list:
        env: dict[Any, Any] = {}
        for v, c in zip(jaxpr.constvars, consts, strict=True):
            env[v] = c
        for v, a in zip(jaxpr.invars, args, strict=True):
            env[v] = a

        def read(v: Any) -> Any:
            return v.val if isinstance(v, self.literal_cls) else env[v]

        for eqn in jaxpr.eqns:
            invals = [read(v) for v in eqn.invars]
            here = path + tuple(s for s in str(eqn.source_info.name_stack).split("/") if s)
            outs = self._eqn(eqn, invals, here, outer)
            for v, o in zip(eqn.outvars, outs, strict=True):
                env[v] = o
        return [read(v) for v in jaxpr.outvars]

    def _eqn(self, eqn: Any, invals: list, path: tuple, outer: tuple) -> list:
        name = eqn.primitive.name
        p = eqn.params
        tb = getattr(eqn.source_info, "traceback", None)
        inner = tuple(getattr(tb, "frames", ()) or ()) + outer  # for nested equations
        if name in _INLINED or name in _CUSTOM:
            sub = p.get("jaxpr") if "jaxpr" in p else p.get("call_jaxpr")
            if sub is not None and hasattr(sub, "consts"):
                label = p.get("name") or _func_name(sub) or name
                self.kinds.setdefault(path_name(path + (str(label),)), name)
                sub_path = path + (str(label),)
                return self._eval(sub.jaxpr, list(sub.consts), invals, sub_path, inner)
            if sub is not None and hasattr(sub, "eqns"):
                return self._eval(sub, [], invals, path + (name,), inner)
        if name == "cond":
            branches = p["branches"]
            index = int(np.clip(int(np.asarray(invals[0])), 0, len(branches) - 1))
            br = branches[index]
            return self._eval(br.jaxpr, list(br.consts), invals[1:], path + ("cond",), inner)
        if name == "scan" and p["length"] * len(p["jaxpr"].jaxpr.eqns) <= MAX_UNROLLED_EQNS:
            return self._scan(eqn, invals, path, inner)
        if name == "while" and self._while_unrolled(eqn, invals):
            return self._while(eqn, invals, path, inner)
        return self.leaf(_eqn_step(eqn, self.literal_cls, outer), invals, path)

    def _scan(self, eqn: Any, invals: list, path: tuple, outer: tuple) -> list:
        p = eqn.params
        nc, ncarry, length = p["num_consts"], p["num_carry"], p["length"]
        body = p["jaxpr"]
        consts, carry, xs = invals[:nc], invals[nc : nc + ncarry], invals[nc + ncarry :]
        here = path + ("scan",)
        lax = self.jax.lax
        jnp = self.jax.numpy
        ys: list[list] = []
        order = range(length - 1, -1, -1) if p["reverse"] else range(length)
        for i in order:
            x_i: list = []
            if xs:
                step = _Step(
                    name="scan_slice",
                    fn=lambda *a, i=i: [lax.index_in_dim(x, i, keepdims=False) for x in a],
                    literal=[False] * len(xs),
                    params=f"index={i}",
                    source_info=eqn.source_info,
                    outer=outer[len(_frames_of(eqn)) :],
                )
                x_i = self.leaf(step, list(xs), here)
            out = self._eval(body.jaxpr, list(body.consts), consts + carry + x_i, here, outer)
            carry, y = out[:ncarry], out[ncarry:]
            ys.append(y)
        if p["reverse"]:
            ys.reverse()
        n_y = len(eqn.outvars) - ncarry
        if not n_y:
            return carry
        if length == 0:
            return carry + [jnp.zeros(v.aval.shape, v.aval.dtype) for v in eqn.outvars[ncarry:]]
        flat = [y for it in ys for y in it]
        step = _Step(
            name="scan_stack",
            fn=lambda *a: [jnp.stack(a[k::n_y]) for k in range(n_y)],
            literal=[False] * len(flat),
            params=f"length={length}",
            source_info=eqn.source_info,
            outer=outer[len(_frames_of(eqn)) :],
        )
        return carry + self.leaf(step, flat, here)

    def _while_unrolled(self, eqn: Any, invals: list) -> bool:
        key = id(eqn)
        if key not in self.trips:
            from jax.extend import core as jcore

            p = eqn.params
            cj, bj = p["cond_jaxpr"], p["body_jaxpr"]
            cn, bn = p["cond_nconsts"], p["body_nconsts"]
            cc, bc, carry = invals[:cn], invals[cn : cn + bn], invals[cn + bn :]
            cond_fn, body_fn = jcore.jaxpr_as_fun(cj), jcore.jaxpr_as_fun(bj)
            trips = 0
            while trips <= MAX_WHILE_TRIPS:
                (pred,) = cond_fn(*cc, *carry)
                if not bool(pred):
                    break
                carry = list(body_fn(*bc, *carry))
                trips += 1
            self.trips[key] = trips <= MAX_WHILE_TRIPS
        return self.trips[key]

    def _while(self, eqn: Any, invals: list, path: tuple, outer: tuple) -> list:
        p = eqn.params
        cj, bj = p["cond_jaxpr"], p["body_jaxpr"]
        cn, bn = p["cond_nconsts"], p["body_nconsts"]
        cc, bc, carry = invals[:cn], invals[cn : cn + bn], invals[cn + bn :]
        while True:
            here = path + ("while_cond",)
            (pred,) = self._eval(cj.jaxpr, list(cj.consts), cc + carry, here, outer)
            if not bool(np.asarray(pred)):
                return carry
            here = path + ("while_body",)
            carry = self._eval(bj.jaxpr, list(bj.consts), bc + carry, here, outer)


def _frames_of(eqn: Any) -> tuple:
    tb = getattr(eqn.source_info, "traceback", None)
    return tuple(getattr(tb, "frames", ()) or ())


def _func_name(closed: Any) -> str:
    info = getattr(getattr(closed, "jaxpr", None), "debug_info", None)
    name = getattr(info, "func_name", "") or ""
    return name.split(" ")[0].strip("<>") if name else ""


def _api_name(file: str, function: str) -> str:
    """`jax.scipy.linalg.expm`, `jnp.matmul`: the public spelling of a JAX library frame."""
    norm = file.replace(os.sep, "/")
    if "/jax/_src/" not in norm:
        mod = os.path.splitext(os.path.basename(norm))[0]
        return f"{mod}.{function}"
    if function.startswith("_operator_"):  # array_methods' `x @ y`: jax.Array.__matmul__
        function = f"__{function.removeprefix('_operator_')}__"
    rel = norm.split("/jax/_src/", 1)[1].removesuffix(".py").split("/")
    if rel[0] == "numpy":
        prefix = "jax.Array" if rel[-1] == "array_methods" else "jnp"
    elif rel[0] == "scipy":
        prefix = "jax.scipy." + ".".join(rel[1:])
    elif rel[0] == "lax":
        prefix = "jax.lax"
    elif rel[0] == "nn":
        prefix = "jax.nn"
    else:
        prefix = "jax"
    return f"{prefix}.{function}"


class JaxProgram(TracedProgram):
    framework = "jax"

    def __init__(self, fn: Callable, args: tuple, kwargs: dict | None = None):
        import jax

        self.jax = jax
        self.fn = fn
        self.args = args
        self.kwargs = kwargs or {}
        flat, self._tree = jax.tree_util.tree_flatten_with_path((args, self.kwargs))
        self.names = [_arg_name(kp) for kp, _ in flat]
        self.leaves = [v for _, v in flat]
        try:
            self.closed = jax.make_jaxpr(self._flat_fn)(*self.leaves)
        except Exception as e:  # a program JAX cannot trace: say so in one line
            msg = " ".join(str(e).split())[:300]
            raise MagnetonError(f"cannot trace the entry with jax.make_jaxpr: {msg}") from e
        self.trips: dict[int, bool] = {}
        code = getattr(getattr(fn, "__wrapped__", fn), "__code__", None)
        self.entry_code = (code.co_filename, code.co_name) if code is not None else None
        self._self_dirs = user_dirs()
        self._jax_dir = os.path.dirname(os.path.abspath(jax.__file__)) + os.sep

    def _flat_fn(self, *leaves: Any) -> Any:
        args, kwargs = self.jax.tree_util.tree_unflatten(self._tree, leaves)
        return self.fn(*args, **kwargs)

    # -- running -------------------------------------------------------------------

    def call(self) -> Any:
        return self.jax.block_until_ready(self.fn(*self.args, **self.kwargs))

    def replay(self) -> list[Window]:
        wins: list[Window] = []
        block = self.jax.block_until_ready
        clock, cpu = time.perf_counter_ns, time.process_time_ns

        def leaf(step: _Step, invals: list, path: tuple) -> list:
            c0 = cpu()
            t0 = clock()
            out = block(step.fn(*invals))
            t1 = clock()
            wins.append(("jax::" + step.name, t0, t1, c0, cpu()))
            return out

        _Walker(self.jax, leaf, self.trips).run(self.closed, list(self.leaves))
        return wins

    # -- structure -----------------------------------------------------------------

    def structure(self) -> Structure:
        st = Structure()
        frames = FrameTable()
        kernels = KernelTable()
        live: dict[int, tuple[Any, int]] = {}  # id(array) -> (array kept alive, tensor idx)
        kinds: dict[str, str] = {}

        def register(arr: Any, rec: TensorRecord) -> int:
            rec.idx = len(st.tensors)
            a = np.asarray(arr)
            rec.shape = list(a.shape)
            rec.dtype = dtype_name(a.dtype)
            rec.stride = [s // a.itemsize for s in a.strides] if a.itemsize else []
            rec.numel = int(a.size)
            rec.device = "cpu"
            for k, v in summarize_array(a).items():
                setattr(rec, k, v)
            st.tensors.append(rec)
            live[id(arr)] = (arr, rec.idx)
            return rec.idx

        def lookup(arr: Any) -> int:
            got = live.get(id(arr))
            if got is not None and got[0] is arr:
                return got[1]
            return register(arr, TensorRecord(idx=-1, kind="constant"))

        for name, arg in zip(self.names, self.leaves, strict=True):
            if id(arg) not in live:
                register(arg, TensorRecord(idx=-1, kind="input", name=name))
        for c in self.closed.consts:
            if hasattr(c, "shape") and id(c) not in live:
                register(c, TensorRecord(idx=-1, kind="constant"))

        def leaf(step: _Step, invals: list, path: tuple) -> list:
            idx = len(st.ops)
            tensors = [v for v, lit in zip(invals, step.literal, strict=True) if not lit]
            scalars = [v for v, lit in zip(invals, step.literal, strict=True) if lit]
            inputs = [lookup(v) for v in tensors]
            arrays = [np.asarray(v) for v in tensors]
            frame_ids, api, chain = self._frames(step.source_info, step.outer, frames)
            scalar_text = ", ".join(f"literal={np.asarray(s).item()!r}" for s in scalars)
            module = path_name(path)
            for k in range(1, len(path) + 1):
                kinds.setdefault(path_name(path[:k]), _kind(path[k - 1]))
            op = OpRecord(
                idx=idx,
                name="jax::" + step.name,
                module=module,
                inputs=inputs,
                input_shapes=[list(a.shape) for a in arrays],
                input_dtypes=[dtype_name(a.dtype) for a in arrays],
                input_contiguous=[True] * len(arrays),
                scalar_args=", ".join(x for x in (step.params, scalar_text) if x),
                frames=frame_ids,
                api=api or "jax::" + step.name,
                call_paths=[" > ".join([*chain, "jax::" + step.name])],
                device="cpu",
            )
            t0 = time.perf_counter_ns()
            out = self.jax.block_until_ready(step.fn(*invals))
            t1 = time.perf_counter_ns()
            op.start_ns, op.end_ns, op.time_s = t0, t1, (t1 - t0) / 1e9
            op.kernels = [kernels.add("xla::" + step.name, "cpu")]
            outputs = []
            for k, o in enumerate(out):
                rec = TensorRecord(idx=-1, producer=idx, out_index=k)
                outputs.append(register(o, rec))
            op.outputs = outputs
            op.output_shapes = [list(st.tensors[i].shape) for i in outputs]
            op.output_dtypes = [st.tensors[i].dtype for i in outputs]
            st.ops.append(op)
            return out

        walker = _Walker(self.jax, leaf, self.trips)
        walker.run(self.closed, list(self.leaves))
        kinds.update(walker.kinds)
        kinds[""] = "JAX program"
        st.frames = frames.records
        st.kernels = kernels.records
        st.modules = module_records(st.ops, kinds)
        return st

    def _frames(
        self, source_info: Any, outer: tuple, table: FrameTable
    ) -> tuple[list[int], str, list[str]]:
        """(frame ids entry first, the API the user called, the library chain under it)."""
        tb = getattr(source_info, "traceback", None)
        raw = list(getattr(tb, "frames", []) or []) + list(outer)  # innermost first
        user: list[Any] = []
        lib: list[Any] = []
        for f in raw:
            fn = os.path.abspath(f.file_name)
            if fn.startswith(self._self_dirs):
                break  # the recorder's own frames: everything above is not the program's
            if fn.startswith(self._jax_dir) or "/jaxlib/" in fn:
                wrapper = fn.endswith(_WRAPPERS) or f.function_name.startswith("_forward_")
                if not user and not wrapper:
                    lib.append(f)
                continue
            user.append(f)
            if self.entry_code and (fn, f.function_name) == (
                os.path.abspath(self.entry_code[0]),
                self.entry_code[1],
            ):
                break
        ids = [table.add(f.file_name, f.line_num, f.function_name) for f in reversed(user)]
        chain = [_api_name(f.file_name, f.function_name) for f in reversed(lib)][:6]
        chain = list(dict.fromkeys(chain))
        # the library's frames stay out of `frames`: the op site is the user's line, as
        # the divergence and the fix need it (the API is in `api` and the call path)
        api = chain[0] if chain else ""
        return ids, api, chain

    def config(self) -> dict[str, str]:
        jax = self.jax
        cfg = {
            "jax.__version__": jax.__version__,
            "jax.default_backend": jax.default_backend(),
        }
        for flag in ("jax_enable_x64", "jax_default_matmul_precision", "jax_numpy_rank_promotion"):
            try:
                cfg[f"jax.config.{flag}"] = str(getattr(jax.config, flag))
            except AttributeError:
                pass
        return cfg

    def boundary_bytes(self) -> float:
        total = 0.0
        for v in list(self.closed.in_avals) + list(self.closed.out_avals):
            shape = getattr(v, "shape", ())
            dtype = getattr(v, "dtype", None)
            if dtype is not None:
                total += float(np.prod(shape)) * np.dtype(dtype).itemsize
        return total


def _kind(segment: str) -> str:
    if segment in ("scan", "cond", "while_cond", "while_body"):
        return segment
    return "named_scope"


def _arg_name(keypath: tuple) -> str:
    """`args[0]`, `args[1]['w']`: an entry argument's name, as the PyTorch recorder's."""
    out = ""
    for i, k in enumerate(keypath):
        key = getattr(k, "idx", getattr(k, "key", getattr(k, "name", k)))
        if i == 0:
            out = "args" if key == 0 else "kwargs"
            continue
        out += f"[{key!r}]" if isinstance(key, str) else f"[{key}]"
    return out
