"""Record a JAX program: its jaxpr walked equation by equation.

The structure is the entry's jaxpr (`jax.make_jaxpr`), walked into nested jaxprs so that
each *primitive* the program runs becomes one `OpRecord` named `jax::<primitive>`.

The entry is traced as the user wrote it. `.block_until_ready()` on a traced value (the
usual way to time JAX, and the last line of many entries) is the identity while tracing;
without that the trace failed with "The 'block_until_ready' method is not available on
traced array". An entry that JAX cannot trace at all because it reads values on the host
(`float(loss)`, `np.asarray(x)`, an `if` on an array: a host round trip) is *captured
eagerly* instead (`_capture_eagerly`): it runs once as plain Python while every
primitive it binds at the top level (each call of a jitted function is one `pjit`) is
written into a jaxpr of the same form, so the rest of this module walks it unchanged.
The host's decisions are those of that run (as a jaxpr's are those of its trace).

* `jit`/`pjit`, `closed_call`, `remat`/`checkpoint`, `custom_jvp_call`,
  `custom_vjp_call` are inlined; the jit's name becomes a module-path segment, after the
  equation's own name stack (`jax.named_scope`, Flax module names), so the name stack is
  the module path. A `jax.checkpoint`ed function's recomputation in the backward pass
  is inlined too: that recomputation is the cost a remat policy adds.
* `cond` runs the branch its index selects (read from the concrete index), under `cond`.
* `scan` is unrolled: per iteration a `jax::scan_slice` operator takes the iteration's
  slices of the scanned inputs, and one `jax::scan_stack` operator stacks the outputs,
  so dataflow stays explicit. Unrolling stops at `MAX_UNROLLED_EQNS` body equations in
  all; the iterations left run as one `jax::scan` operator over the remaining slices
  (its outputs concatenated after the unrolled ones'), so a long scan records its first
  iterations one by one and the rest as one cost.
* `while` is unrolled the same way, up to `MAX_UNROLLED_EQNS` condition and body
  equations; the trips left run as one `jax::while` operator on the carried values.
  Both loops decide from the values alone, so the structure pass and each replay run
  the same operator sequence.
* `custom_linear_solve` (`jax.scipy.sparse.linalg.cg` and the other iterative solvers)
  runs its `solve` jaxpr, as JAX's implementation does, so the solver's loop is walked.
* Any other primitive with a sub-jaxpr runs as one operator.

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

import contextlib
import os
import time
import warnings
from collections.abc import Callable, Iterator
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

MAX_UNROLLED_EQNS = 4096  # body equations of one loop, all unrolled iterations together
_INLINED = ("pjit", "jit", "closed_call", "core_call", "remat", "remat2", "checkpoint")
# a concrete value needed while tracing: the entry reads a value on the host
_HOST_ERRORS = (
    "ConcretizationTypeError",
    "TracerArrayConversionError",
    "TracerBoolConversionError",
    "TracerIntegerConversionError",
)
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

    def __init__(self, jax: Any, leaf: Callable[[_Step, list, tuple], list]):
        from jax.extend import core as jcore

        self.jax = jax
        self.leaf = leaf
        self.literal_cls = jcore.Literal
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
                label = "checkpoint" if name in ("remat", "remat2") else name
                self.kinds.setdefault(path_name(path + (label,)), name)
                return self._eval(sub, [], invals, path + (label,), inner)
        if name == "cond":
            branches = p["branches"]
            index = int(np.clip(int(np.asarray(invals[0])), 0, len(branches) - 1))
            br = branches[index]
            return self._eval(br.jaxpr, list(br.consts), invals[1:], path + ("cond",), inner)
        if name == "custom_linear_solve" and hasattr(p.get("jaxprs"), "solve"):
            return self._linear_solve(eqn, invals, path, inner)
        if name == "scan":
            return self._scan(eqn, invals, path, inner)
        if name == "while":
            return self._while(eqn, invals, path, inner)
        return self.leaf(_eqn_step(eqn, self.literal_cls, outer), invals, path)

    def _linear_solve(self, eqn: Any, invals: list, path: tuple, outer: tuple) -> list:
        """`custom_linear_solve` (`jax.scipy.sparse.linalg.cg`, `lax.custom_linear_solve`)
        evaluates its `solve` jaxpr on the solver's constants and the right-hand side, as
        JAX's own implementation does; the other jaxprs serve differentiation only."""
        lengths = list(eqn.params["const_lengths"])
        start = sum(lengths[:2])  # matvec's and vecmat's constants come first
        consts = invals[start : start + lengths[2]]
        b = invals[sum(lengths) :]
        solve = eqn.params["jaxprs"].solve
        if solve is None:  # nothing to walk: the primitive runs as one operator
            return self.leaf(_eqn_step(eqn, self.literal_cls, outer), invals, path)
        here = path + ("linear_solve",)
        self.kinds.setdefault(path_name(here), "custom_linear_solve")
        return self._eval(solve.jaxpr, list(solve.consts), consts + b, here, outer)

    def _scan(self, eqn: Any, invals: list, path: tuple, outer: tuple) -> list:
        p = eqn.params
        nc, ncarry, length = p["num_consts"], p["num_carry"], p["length"]
        body = p["jaxpr"]
        consts, carry, xs = invals[:nc], invals[nc : nc + ncarry], invals[nc + ncarry :]
        here = path + ("scan",)
        jnp = self.jax.numpy
        lax = self.jax.lax
        own = outer[len(_frames_of(eqn)) :]
        unrolled = min(length, max(1, MAX_UNROLLED_EQNS // max(1, len(body.jaxpr.eqns))))
        order = list(range(length - 1, -1, -1) if p["reverse"] else range(length))
        ys: list[list] = []
        for i in order[:unrolled]:
            x_i: list = []
            if xs:
                step = _Step(
                    name="scan_slice",
                    fn=lambda *a, i=i: [lax.index_in_dim(x, i, keepdims=False) for x in a],
                    literal=[False] * len(xs),
                    params=f"index={i}",
                    source_info=eqn.source_info,
                    outer=own,
                )
                x_i = self.leaf(step, list(xs), here)
            out = self._eval(body.jaxpr, list(body.consts), consts + carry + x_i, here, outer)
            carry, y = out[:ncarry], out[ncarry:]
            ys.append(y)
        n_y = len(eqn.outvars) - ncarry
        rest: list = []
        if unrolled < length:  # the iterations left: one operator (module docstring)
            carry, rest = self._scan_rest(eqn, consts, carry, xs, unrolled, here, own)
        if p["reverse"]:
            ys.reverse()
        if not n_y:
            return carry
        if length == 0:
            return carry + [jnp.zeros(v.aval.shape, v.aval.dtype) for v in eqn.outvars[ncarry:]]
        flat = [y for it in ys for y in it]
        if rest:  # the rest's stacked outputs join the unrolled ones, in scan order
            flat = rest + flat if p["reverse"] else flat + rest
        step = _Step(
            name="scan_stack",
            fn=lambda *a: _stack(jnp, a, n_y, bool(rest), p["reverse"]),
            literal=[False] * len(flat),
            params=f"length={length}",
            source_info=eqn.source_info,
            outer=own,
        )
        return carry + self.leaf(step, flat, here)

    def _scan_rest(
        self, eqn: Any, consts: list, carry: list, xs: list, done: int, here: tuple, own: tuple
    ) -> tuple[list, list]:
        """The iterations of a scan after the first DONE, as one `scan` operator over the
        remaining slices: (carry, its stacked outputs)."""
        p = dict(eqn.params)
        length, ncarry, reverse = p["length"], p["num_carry"], p["reverse"]
        left = length - done
        lax = self.jax.lax
        if xs:
            sl = _Step(
                name="scan_rest_slice",
                fn=lambda *a: [
                    lax.slice_in_dim(x, 0, left) if reverse else lax.slice_in_dim(x, done, length)
                    for x in a
                ],
                literal=[False] * len(xs),
                params=f"start={0 if reverse else done}, length={left}",
                source_info=eqn.source_info,
                outer=own,
            )
            xs = self.leaf(sl, list(xs), here)
        p["length"] = left
        prim = eqn.primitive
        bind_params = prim.get_bind_params(p)
        step = _Step(
            name="scan",
            fn=lambda *a: list(prim.bind(*a, **bind_params)),
            literal=[False] * (len(consts) + len(carry) + len(xs)),
            params=f"length={left}, trips={left} (after {done} unrolled)",
            source_info=eqn.source_info,
            outer=own,
        )
        out = self.leaf(step, consts + carry + list(xs), here)
        return out[:ncarry], out[ncarry:]

    def _while(self, eqn: Any, invals: list, path: tuple, outer: tuple) -> list:
        p = eqn.params
        cj, bj = p["cond_jaxpr"], p["body_jaxpr"]
        cn, bn = p["cond_nconsts"], p["body_nconsts"]
        cc, bc, carry = invals[:cn], invals[cn : cn + bn], invals[cn + bn :]
        per_trip = max(1, len(cj.jaxpr.eqns) + len(bj.jaxpr.eqns))
        for _ in range(max(1, MAX_UNROLLED_EQNS // per_trip)):
            here = path + ("while_cond",)
            (pred,) = self._eval(cj.jaxpr, list(cj.consts), cc + carry, here, outer)
            if not bool(np.asarray(pred)):
                return carry
            here = path + ("while_body",)
            carry = self._eval(bj.jaxpr, list(bj.consts), bc + carry, here, outer)
        # the trips left: the loop itself, on the carried values (module docstring)
        step = _eqn_step(eqn, self.literal_cls, outer)
        step.params = "trips left after the unrolled ones; " + step.params
        return self.leaf(step, cc + bc + carry, path + ("while",))


def _stack(jnp: Any, a: tuple, n_y: int, rest: bool, reverse: bool) -> list:
    """A scan's outputs: the unrolled iterations' (each `n_y` values)
    stacked, joined with the stacked outputs of the iterations run as one operator."""
    if not rest:
        return [jnp.stack(a[k::n_y]) for k in range(n_y)]
    tail, head = (a[:n_y], a[n_y:]) if reverse else (a[-n_y:], a[:-n_y])
    out = []
    for k in range(n_y):
        unrolled = jnp.stack(head[k::n_y])
        both = [tail[k], unrolled] if reverse else [unrolled, tail[k]]
        out.append(jnp.concatenate(both))
    return out


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
        # only arrays are traced: any other leaf (an optax transformation, a config
        # object, a Python number) is what `jax.jit(..., static_argnums=...)` keeps
        # static, and as a traced input it failed the trace ("not a valid JAX type")
        self._static = [None if _is_array(v) else v for _, v in flat]
        self.names = [_arg_name(kp) for kp, v in flat if _is_array(v)]
        self.leaves = [v for _, v in flat if _is_array(v)]
        self.captured = False  # True: the entry was captured eagerly (module docstring)
        try:
            with _traced_block_until_ready():
                self.closed = jax.make_jaxpr(self._flat_fn)(*self.leaves)
        except Exception as e:
            if type(e).__name__ not in _HOST_ERRORS:  # not a host read: say so in one line
                msg = " ".join(str(e).split())[:300]
                raise MagnetonError(f"cannot trace the entry with jax.make_jaxpr: {msg}") from e
            self.closed = _capture_eagerly(self._flat_fn, self.leaves)
            self.captured = True
        code = getattr(getattr(fn, "__wrapped__", fn), "__code__", None)
        self.entry_code = (code.co_filename, code.co_name) if code is not None else None
        self._self_dirs = user_dirs()
        self._jax_dir = os.path.dirname(os.path.abspath(jax.__file__)) + os.sep

    def _flat_fn(self, *leaves: Any) -> Any:
        it = iter(leaves)
        full = [next(it) if s is None else s for s in self._static]
        args, kwargs = self.jax.tree_util.tree_unflatten(self._tree, full)
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

        _Walker(self.jax, leaf).run(self.closed, list(self.leaves))
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

        walker = _Walker(self.jax, leaf)
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
        if self.captured:
            cfg["jax.entry_captured"] = "eagerly (the entry reads values on the host)"
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


@contextlib.contextmanager
def _traced_block_until_ready() -> Iterator[None]:
    """`.block_until_ready()` on a traced value returns it while the entry is traced (a
    traced value has nothing to wait for); JAX's tracer raises AttributeError."""
    from jax._src import core

    had = "block_until_ready" in vars(core.Tracer)
    old = vars(core.Tracer).get("block_until_ready")
    setattr(core.Tracer, "block_until_ready", lambda self: self)  # noqa: B010
    try:
        yield
    finally:
        if had:
            setattr(core.Tracer, "block_until_ready", old)  # noqa: B010
        else:
            delattr(core.Tracer, "block_until_ready")


def _capture_eagerly(fn: Callable, leaves: list) -> Any:
    """Run FN(*LEAVES) once as plain Python, writing every primitive it binds at the top
    level into a closed jaxpr (module docstring): the entry's arguments are its inputs,
    arrays made outside it (closed over, or built on the host from a value read back)
    its constants, Python and NumPy scalars literals."""
    from jax._src import core, source_info_util

    var_of: dict[int, Any] = {}
    keep: list = []  # values whose ids are in var_of: alive until the capture ends
    constvars: list = []
    consts: list = []
    eqns: list = []

    def bind_var(x: Any) -> Any:
        v = core.Var(core.typeof(x))
        var_of[id(x)] = v
        keep.append(x)
        return v

    def atom(x: Any) -> Any:
        got = var_of.get(id(x))
        if got is not None:
            return got
        if isinstance(x, (bool, int, float, complex, np.generic)):
            return core.Literal(x, core.typeof(x))
        constvars.append(bind_var(x))
        consts.append(x)
        return constvars[-1]

    class _Capture(core.EvalTrace):
        def process_primitive(self, primitive: Any, args: Any, params: Any, /) -> Any:
            invars = [atom(a) for a in args]
            with core.set_current_trace(core.eval_trace):
                out = core.eval_trace.process_primitive(primitive, args, params)
            outs = list(out) if primitive.multiple_results else [out]
            outvars = [bind_var(o) for o in outs]
            eqns.append(
                core.new_jaxpr_eqn(
                    invars,
                    outvars,
                    primitive,
                    params,
                    core.no_effects,
                    source_info_util.current(),
                )
            )
            return out

    invars = [bind_var(x) for x in leaves]
    with core.set_current_trace(_Capture()):
        result = fn(*leaves)
    outs = [x for x in _tree_leaves(result) if id(x) in var_of]
    with warnings.catch_warnings():  # no DebugInfo: this jaxpr was not traced from source
        warnings.simplefilter("ignore", DeprecationWarning)
        jaxpr = core.Jaxpr(constvars, invars, [var_of[id(x)] for x in outs], eqns)
    return core.ClosedJaxpr(jaxpr, consts)


def _is_array(v: Any) -> bool:
    """A leaf the entry gets as an array (traced), not as a static value."""
    return hasattr(v, "shape") and hasattr(v, "dtype")


def _tree_leaves(x: Any) -> list:
    import jax

    return jax.tree_util.tree_leaves(x)


def _kind(segment: str) -> str:
    if segment in ("scan", "cond", "while", "while_cond", "while_body", "checkpoint"):
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
