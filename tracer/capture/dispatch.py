"""Operator capture: turn one execution of a PyTorch callable into a `Profile`.

Two dispatch modes, used in separate passes so the timing numbers stay honest:

* `StructureCapture` (the *structure pass*) records everything the diagnosis needs:
  tensor identity and dataflow, value summaries and invariants (computed on worker
  threads, and only for tensors matching may compare: see `_register`), module paths, Python
  call stacks and — through the PyTorch profiler — each operator's aten dispatch chain
  down to the kernels. That costs far more than the ops themselves, so its timestamps
  are never used for energy.
* `TimingCapture` (the *timing pass*) records only (start, end) per operator on
  `time.perf_counter_ns()`, the clock the power sampler also uses. Its overhead is what
  `benchmarks/tracing_overhead.py` measures.

Both intercept at the same dispatch level (`TorchDispatchMode`, eager mode), so a
deterministic program yields the same operator sequence in both passes; the recorder
checks that and falls back to the structure pass's timings (marked "combined") if not.

Linking a dispatched operator to its profiler subtree by timestamps would be fragile
(the profiler has its own clock); instead each intercepted call runs inside a
`record_function("magneton#<idx>")` tag, so the profiler tree says exactly which aten
calls belong to which recorded operator.

Every shape, stride, element count and value summary of a tensor is read from
`nested.recorded_view(t)`: the tensor itself, or for a nested tensor (which has no single
size, and made a recording fail) its components packed one after another.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from magneton.model import (
    FrameRecord,
    KernelRecord,
    ModuleRecord,
    OpRecord,
    TensorRecord,
    gc_paused,
)
from magneton.model.vocab import BOOKKEEPING_OPS, IN_PLACE_WRITE_OPS
from magneton.tracer.capture.invariants import SummaryPool
from magneton.tracer.capture.nested import recorded_view
from magneton.tracer.programs import signals as _signals

_TAG = "magneton#"
# this thread's RecordFunction switch (what the profiler records through); a no-op on a
# torch without it, where the capture's own calls are recorded too, as before
_record_functions: Callable[[bool], None] = getattr(
    torch._C._autograd, "_enable_record_function", lambda enable: None
)

# Frames from these files are machinery, not code a user could change: the dispatch
# mode plumbing, nn.Module's call wrapper, and Magneton itself.
_TORCH_DIR = os.path.dirname(torch.__file__)
_SKIP_FILES = (
    os.path.join(_TORCH_DIR, "utils", "_python_dispatch.py"),
    os.path.join(_TORCH_DIR, "_ops.py"),
    os.path.join(_TORCH_DIR, "nn", "modules", "module.py"),
    os.path.join(_TORCH_DIR, "autograd", "profiler.py"),
    os.path.join(_TORCH_DIR, "_tensor.py"),
    os.path.join(_TORCH_DIR, "overrides.py"),
    os.path.join(_TORCH_DIR, "_compile.py"),
    os.path.join(_TORCH_DIR, "utils", "_contextlib.py"),
)
_SKIP_DIRS = tuple(
    os.path.join(_TORCH_DIR, d) + os.sep for d in ("_dynamo", "_compile.py", "profiler")
)


def _package_dir(name: str) -> str:
    spec = importlib.util.find_spec(name)
    assert spec is not None and spec.submodule_search_locations
    return os.path.abspath(spec.submodule_search_locations[0]) + os.sep


# Magneton's own packages wherever the install put them: the stage folders of a checkout
# (tracer/, graphdb/), or one magneton/ tree in a wheel or a strict editable install,
# where a path computed from this file's parent would name a folder that does not exist.
_SELF_DIRS = tuple(_package_dir(n) for n in ("magneton.tracer", "magneton", "magneton.graphdb"))


def _op_name(func) -> tuple[str, str]:
    """("aten::addmm", "default"): the schema's qualified name, as the profiler spells it."""
    schema = func._schema
    return schema.name, schema.overload_name or "default"


def _device_str(t: torch.Tensor) -> str:
    d = t.device
    return d.type if d.index is None else f"{d.type}:{d.index}"


def _storage_key(t: torch.Tensor) -> tuple[str, int] | None:
    try:
        return (t.device.type, t.untyped_storage().data_ptr())
    except Exception:  # sparse, meta: no plain storage to alias
        return None


# --------------------------------------------------------------------------------------
# Module hierarchy
# --------------------------------------------------------------------------------------


class ModuleTracker:
    """Keeps the stack of nn.Modules currently running, by qualified path (`h.0.mlp.act`).

    Names come from the roots' `named_modules()` (Smaragdine's qualified names, root "");
    a module built inside the entry is named from its parent's `_modules` key, so dynamic
    models still get stable paths.
    """

    def __init__(self, roots: dict[str, torch.nn.Module]):
        self.names: dict[int, str] = {}
        self.types: dict[str, str] = {}
        for prefix, root in roots.items():
            for name, mod in root.named_modules():
                full = ".".join(p for p in (prefix, name) if p)
                self.names.setdefault(id(mod), full)
        self._local = threading.local()
        self._handles: list = []
        self.seen: dict[str, str] = {}  # name -> type, in first-seen order

    def _stack(self) -> list[str]:
        s = getattr(self._local, "stack", None)
        if s is None:
            s = self._local.stack = []
        return s

    @property
    def current(self) -> str:
        s = self._stack()
        return s[-1] if s else ""

    def _name_of(self, mod: torch.nn.Module) -> str:
        name = self.names.get(id(mod))
        if name is not None:
            return name
        # A module nobody told us about (built inside the entry, or the caller passed no
        # root). Name it, and everything under it, from the innermost running module that
        # owns it: searching that module's whole subtree, not just its direct children,
        # is what keeps `h.0` and `h.1` apart when the `ModuleList` between them is
        # never called itself (its blocks once all collapsed into one "GPT2Block").
        for parent, parent_mod in zip(
            reversed(self._stack()), reversed(getattr(self._local, "mods", [None])[1:]), strict=True
        ):
            found = False
            for sub, child in parent_mod.named_modules(prefix=parent):
                self.names.setdefault(id(child), sub)
                found = found or child is mod
            if found:
                return self.names[id(mod)]
        # a top-level module of its own: its type names it, and its subtree hangs below
        for sub, child in mod.named_modules(prefix=type(mod).__name__):
            self.names.setdefault(id(child), sub)
        return self.names[id(mod)]

    def _pre(self, mod, args):
        name = self._name_of(mod)
        self.seen.setdefault(name, type(mod).__name__)
        self._stack().append(name)
        mods = getattr(self._local, "mods", None)
        if mods is None:
            mods = self._local.mods = [None]
        mods.append(mod)

    def _post(self, mod, args, out):
        s = self._stack()
        if s:
            s.pop()
            self._local.mods.pop()

    def __enter__(self):
        from torch.nn.modules import module as m

        self._handles = [
            m.register_module_forward_pre_hook(self._pre),
            m.register_module_forward_hook(self._post, always_call=True),
        ]
        return self

    def __exit__(self, *exc):
        for h in self._handles:
            h.remove()
        self._handles = []

    def records(self) -> list[ModuleRecord]:
        out: list[ModuleRecord] = []
        index: dict[str, int] = {}
        for name in sorted(self.seen, key=lambda n: (n.count("."), n)):
            parent = -1
            if name:
                p = name.rsplit(".", 1)[0] if "." in name else ""
                while p not in index and p:
                    p = p.rsplit(".", 1)[0] if "." in p else ""
                parent = index.get(p, -1)
            index[name] = len(out)
            out.append(ModuleRecord(idx=len(out), name=name, type=self.seen[name], parent=parent))
        return out


# --------------------------------------------------------------------------------------
# The dispatch modes' common base
# --------------------------------------------------------------------------------------


class RecorderMode(TorchDispatchMode):
    """Base of every dispatch mode Magneton runs a workload under.

    torch wraps a mode's `__torch_dispatch__` in `torch._dynamo.disable` so that a
    compiled function running under the mode never has dynamo trace the mode's own frame
    (inside `__torch_dispatch__` the mode is off the stack, so dynamo's "a dispatch mode is
    active" skip does not protect it). That wrapper imports torch._dynamo and
    torch._inductor (1.1 s here) at the first operator of every recording, and costs ~2 µs
    of the ~11 µs a Python mode adds to each operator. It is needed only where dynamo has
    compiled something, and a workload that compiles has done so before any mode is
    entered: the warmup call runs the entry once, untraced. So a mode takes the wrapper
    when it is entered after dynamo compiled a frame (`_dynamo_compiled`), and never
    otherwise: not for a workload that merely imported dynamo (transformers does).
    """

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        return False  # not at class creation: see `__enter__`

    def __enter__(self):
        cls = type(self)
        if not cls.__dict__.get("_dynamo_disabled") and _dynamo_compiled():
            import torch._dynamo

            # own or inherited; `disable` unwraps a parent's already-wrapped function
            cls.__torch_dispatch__ = torch._dynamo.disable(cls.__torch_dispatch__, recursive=True)
            cls._dynamo_disabled = True
        return super().__enter__()

    def __exit__(self, exc_type, exc_value, tb):
        out = super().__exit__(exc_type, exc_value, tb)
        _signals.settle(exc_type)  # a Ctrl-C discarded since the last operator is raised
        return out


def _dynamo_compiled() -> bool:
    """Whether dynamo has processed a frame in this process (its own frame counter); a
    torch without that counter is taken to have."""
    if "torch._dynamo" not in sys.modules:
        return False
    try:
        from torch._dynamo.utils import counters

        return counters["frames"]["total"] > 0
    except Exception:
        return True


# --------------------------------------------------------------------------------------
# Timing pass
# --------------------------------------------------------------------------------------


class TimingCapture(RecorderMode):
    """Light mode: one tuple per operator, nothing else (what the overhead benchmark times).

    Everything not needed for a window is deferred: the op's name is resolved after the
    call (`names()`), and the hot path avoids building a kwargs dict. A Python dispatch
    mode that does nothing at all already costs ~5% on a CPU GPT-2 forward; this one
    stays within measurement noise of that floor.
    """

    def __init__(self):
        super().__init__()
        # (func, start_ns, end_ns); CpuTimingCapture (tracer/timing/passes.py) appends the
        # process CPU clock's start and end as well
        self.raw: list[tuple[Any, ...]] = []
        self._append = self.raw.append

    def __torch_dispatch__(self, func, types, args=(), kwargs=None, _clock=time.perf_counter_ns):
        if _signals.undelivered is not None:  # a discarded Ctrl-C (tracer/programs/signals.py)
            _signals.raise_undelivered()
        t0 = _clock()
        out = func(*args, **kwargs) if kwargs else func(*args)
        self._append((func, t0, _clock()))
        return out

    @property
    def events(self) -> list[tuple[str, int, int]]:
        """(aten name, start_ns, end_ns) per operator, in dispatch order."""
        return [(_op_name(f)[0], t0, t1) for f, t0, t1 in self.raw]


# --------------------------------------------------------------------------------------
# Structure pass
# --------------------------------------------------------------------------------------


@dataclass
class _Live:
    ref: weakref.ref
    tidx: int


@dataclass
class StructureResult:
    ops: list[OpRecord] = field(default_factory=list)
    tensors: list[TensorRecord] = field(default_factory=list)
    frames: list[FrameRecord] = field(default_factory=list)
    kernels: list[KernelRecord] = field(default_factory=list)
    modules: list[ModuleRecord] = field(default_factory=list)
    # operator calls the profiler saw in threads the capture does not trace
    other_thread_ops: int = 0
    # op idx -> seconds its device kernels ran (CUDA, from the profiler's activity)
    kernel_s: dict[int, float] = field(default_factory=dict)


class StructureCapture(RecorderMode):
    """Heavy mode: dataflow, summaries, module path and Python stack per operator."""

    def __init__(
        self,
        modules: ModuleTracker,
        *,
        sources: dict[int, tuple[str, str]] | None = None,
        stop_code: Any = None,
        summaries: bool = True,
        measured: bool = False,
    ):
        super().__init__()
        self.modules = modules
        self.sources = sources or {}  # id(tensor) -> (kind, name)
        self.stop_code = stop_code  # code object of the entry: stack walks stop there
        self.summaries = summaries
        # a measured pass (its windows priced: `record_block`) summarizes inline, so no
        # worker's CPU lands in its operators' energy (invariants.SummaryPool)
        self.measured = measured
        self._pool: SummaryPool | None = None
        self._failed = False  # the recorded block raised (set on exit)
        self._pending: list[tuple[TensorRecord, Any]] = []
        # per recorded tensor: a side input (see `_register`)
        self._side: list[bool] = []
        self.result = StructureResult()
        self._live: dict[int, _Live] = {}
        self._by_storage: dict[tuple[str, int], list[int]] = {}
        self._frames: dict[tuple[str, int, str], int] = {}
        self._frame_cache: dict[tuple[str, int, str], str] = {}

    def __enter__(self):
        # The capture allocates records by the thousand (no cycles); a collection they
        # trigger mid-pass rescans the whole process's heap (see `gc_paused`).
        self._gc = gc_paused()
        self._gc.__enter__()
        try:
            if self.summaries:
                self._pool = SummaryPool(0 if self.measured else None).__enter__()
            return super().__enter__()
        except BaseException:
            self._close_pool(failed=True)
            self._gc.__exit__(None, None, None)
            raise

    def __exit__(self, exc_type, exc_value, tb):
        """Stops recording. The summary threads go on until `finish`, so the profiler's
        events are parsed while they work (0.1-0.2 s of a GPT-2 pass, on the main thread,
        that used to wait for the last summaries first); after an error they stop here."""
        self._failed = exc_type is not None
        try:
            return super().__exit__(exc_type, exc_value, tb)
        finally:
            try:
                if self._failed:
                    self._close_pool(failed=True)
            finally:
                self._gc.__exit__(None, None, None)

    def finish(self, prof: Any = None) -> StructureResult:
        """The finished result: call paths from the profiler's events (`prof`, parsed
        while the summary threads finish; without one each op is its own call path),
        every summary filled in, modules linked. After an error only the summaries that
        are done and the modules. Call it before the program runs on: a pending summary
        reads its tensor's memory, which the program may write again."""
        try:
            if not self._failed and prof is not None:
                attach_profile(self.result, prof)
            elif not self._failed:
                for op in self.result.ops:
                    op.api, op.call_paths = op.name, [op.name]
        finally:
            self._close_pool(failed=False)
            finish_modules(self.result, self.modules)
        return self.result

    def recorded(self, value: Any) -> list[int]:
        """The records of the tensors in `value` (the entry's returned value, any nesting
        of tuples, lists and dicts), as they stand now: a result written in place is its
        last version. Tensors the pass never saw are left out."""
        from torch.utils._pytree import tree_leaves

        out: list[int] = []
        for leaf in tree_leaves(value):
            live = self._live.get(id(leaf)) if isinstance(leaf, torch.Tensor) else None
            if live is not None and live.ref() is leaf and live.tidx not in out:
                out.append(live.tidx)
        return out

    def _close_pool(self, failed: bool) -> None:
        """Wait for the pending summaries and fill them into their records."""
        pool, self._pool = self._pool, None
        if pool is None:
            return
        pool.__exit__(BaseException if failed else None, None, None)
        for rec, fut in self._pending:
            if fut.done() and not fut.cancelled():
                for k, v in fut.result().items():
                    setattr(rec, k, v)
        self._pending.clear()

    # -- tensors -------------------------------------------------------------------

    def _forget(self, key: int):
        self._live.pop(key, None)

    def _register(self, t: torch.Tensor, rec: TensorRecord, side: bool = False) -> int:
        """Record tensor `t` as `rec`; returns its index.

        `side`: a parameter or buffer, or computed from those alone (a weight's `.t()`, a
        mask from a buffer). Matching leaves such *side inputs* out of the value
        comparison (diagnose/matching/match.py builds its tensor index from data tensors only), so
        they get no value summary: for GPT-2 12L that is 125 M of the 215 M elements a
        structure pass summarized (the weights and the 50257×768 embedding). Whether a
        tensor is a side input is decided like `match.build_graph` decides it, except
        that the outputs of operators without tensor inputs (`arange`, `zeros`) are
        summarized: without tensor inputs to the entry, matching counts them as data."""
        rec.idx = len(self.result.tensors)
        self._side.append(side)
        # a nested tensor is recorded through its packed components (`nested.py`); the
        # tensor itself stays the identity key below, as that is what operators pass on
        dense = recorded_view(t)
        rec.shape = list(dense.shape)
        rec.dtype = str(t.dtype).replace("torch.", "")
        try:
            rec.stride = list(dense.stride())
            rec.contiguous = bool(dense.is_contiguous())
        except Exception:  # sparse: no strides
            rec.stride, rec.contiguous = [], False
        rec.device = _device_str(t)
        rec.numel = dense.numel()
        if self._pool is not None and not side:
            self._pending.append((rec, self._pool.submit(dense)))
        self.result.tensors.append(rec)
        key = id(t)
        self._live[key] = _Live(weakref.ref(t, lambda _r: self._forget(key)), rec.idx)
        sk = _storage_key(t)
        if sk is not None:
            self._by_storage.setdefault(sk, []).append(key)
        return rec.idx

    def _lookup(self, t: torch.Tensor) -> int:
        live = self._live.get(id(t))
        if live is not None and live.ref() is t:
            return live.tidx
        kind, name = self.sources.get(id(t), ("constant", ""))
        rec = TensorRecord(idx=-1, producer=-1, kind=kind, name=name)
        return self._register(t, rec, side=kind in ("param", "buffer"))

    # -- stacks --------------------------------------------------------------------

    def _stack(self) -> list[int]:
        frames: list[int] = []
        f: FrameType | None = sys._getframe(3)  # above _stack, _dispatch and __torch_dispatch__
        while f is not None:
            code = f.f_code
            fn = code.co_filename
            if not (fn in _SKIP_FILES or fn.startswith(_SELF_DIRS) or fn.startswith(_SKIP_DIRS)):
                key = (fn, f.f_lineno, code.co_name)
                idx = self._frames.get(key)
                if idx is None:
                    idx = len(self.result.frames)
                    self._frames[key] = idx
                    self.result.frames.append(
                        FrameRecord(idx=idx, file=fn, line=f.f_lineno, function=code.co_name)
                    )
                frames.append(idx)
            if code is self.stop_code:
                break
            f = f.f_back
        frames.reverse()  # entry first, op call site last
        return frames

    # -- dispatch ------------------------------------------------------------------

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        # The capture's own tensor calls (views of the operands, and `.numpy()` for each
        # summary: detach, to, resolve_conj, resolve_neg) are not the program's; with
        # record functions off on this thread the profiler neither times nor keeps them.
        # They were 2,160 of 5,334 profiler events of a GPT-2 12L pass, each paid for
        # when recorded and again when the events are parsed. Only the operator itself
        # (inside its tag) is recorded; other threads keep recording (the switch is
        # thread-local), so `other_thread_ops` still sees them.
        if _signals.undelivered is not None:  # a Ctrl-C discarded in `_forget`, say
            _signals.raise_undelivered()
        _record_functions(False)
        try:
            return self._dispatch(func, args, kwargs or {})
        finally:
            _record_functions(True)

    def _dispatch(self, func, args, kwargs):
        name, overload = _op_name(func)
        idx = len(self.result.ops)
        flat_in, _ = tree_flatten((args, kwargs))
        in_tensors = [a for a in flat_in if isinstance(a, torch.Tensor)]
        inputs = [self._lookup(t) for t in in_tensors]
        side = bool(inputs) and all(self._side[i] for i in inputs)
        in_dense = [recorded_view(t) for t in in_tensors]
        op = OpRecord(
            idx=idx,
            name=name,
            overload=overload,
            thread=threading.get_ident(),
            module=self.modules.current,
            inputs=inputs,
            input_shapes=[list(t.shape) for t in in_dense],
            input_dtypes=[str(t.dtype).replace("torch.", "") for t in in_dense],
            input_contiguous=[bool(t.is_contiguous()) for t in in_dense],
            scalar_args=_scalar_args(func, args, kwargs),
            frames=self._stack(),
        )
        op.device = _device_str(in_tensors[0]) if in_tensors else _kwarg_device(kwargs)

        mutated = _mutated_tensors(func, args, kwargs)
        if mutated and self._pool is not None:
            # pending summaries read the values before this write; cached ones go
            self._pool.before_write(mutated)
        _record_functions(True)
        try:
            with torch.profiler.record_function(f"{_TAG}{idx}"):
                t0 = time.perf_counter_ns()
                out = func(*args, **kwargs)
                t1 = time.perf_counter_ns()
        finally:
            _record_functions(False)
        op.start_ns, op.end_ns = t0, t1
        op.time_s = (t1 - t0) / 1e9
        self.result.ops.append(op)

        in_storages = {_storage_key(t) for t in in_tensors}
        in_storages.discard(None)
        outputs: list[int] = []
        flat_out, _ = tree_flatten(out)
        seen_ids: set[int] = set()
        for t in flat_out:
            if not isinstance(t, torch.Tensor) or id(t) in seen_ids:
                continue
            seen_ids.add(id(t))
            is_view = _storage_key(t) in in_storages
            rec = TensorRecord(idx=-1, producer=idx, out_index=len(outputs), is_view=is_view)
            outputs.append(self._register(t, rec, side))
        # In-place writes make new versions of the written tensor and of every live
        # view of the same storage, all produced by this op, so later consumers depend
        # on the write rather than on the stale pre-write value.
        for t in mutated:
            if id(t) in seen_ids:
                continue
            seen_ids.add(id(t))
            rec = TensorRecord(idx=-1, producer=idx, out_index=len(outputs))
            outputs.append(self._register(t, rec, side))
        if mutated:  # in-place ops only: the per-op path stays as short as it was
            self._register_written_views(mutated, flat_out, idx, outputs, seen_ids, side)
        op.outputs = outputs
        out_t = [self.result.tensors[i] for i in outputs]
        op.output_shapes = [list(r.shape) for r in out_t]
        op.output_dtypes = [r.dtype for r in out_t]
        return out

    def _register_written_views(
        self,
        mutated: list[torch.Tensor],
        flat_out: list,
        idx: int,
        outputs: list[int],
        seen_ids: set[int],
        side: bool,
    ) -> None:
        """Every live view of a storage op `idx` wrote becomes a new version produced by it
        (appended to `outputs`), so later consumers of the view depend on the write."""
        for t in list(mutated) + [t for t in flat_out if isinstance(t, torch.Tensor)]:
            sk = _storage_key(t)
            if sk is None or not any(_storage_key(m) == sk for m in mutated):
                continue
            keys = self._by_storage.get(sk, [])
            for key in list(keys):
                live = self._live.get(key)
                other = live.ref() if live else None
                # A key is an id, i.e. an address: once the tensor registered under it
                # dies, a tensor of another storage can get the same id. Without this
                # check that tensor was recorded as written by this operator (a dropped
                # `w.t()` whose id went to a view of `x`: `w.add_` "produced" x).
                if other is None or _storage_key(other) != sk:
                    keys.remove(key)
                    continue
                if id(other) in seen_ids:
                    continue
                seen_ids.add(id(other))
                rec = TensorRecord(idx=-1, producer=idx, out_index=len(outputs), is_view=True)
                outputs.append(self._register(other, rec, side))


def _kwarg_device(kwargs: dict) -> str:
    d = kwargs.get("device")
    if d is None:
        return "cpu"
    d = torch.device(d)
    return d.type if d.index is None else f"{d.type}:{d.index}"


def _schema_values(func, args, kwargs):
    for i, a in enumerate(func._schema.arguments):
        if i < len(args) and not a.kwarg_only:
            yield a, args[i]
        elif a.name in kwargs:
            yield a, kwargs[a.name]


def _mutated_tensors(func, args, kwargs) -> list[torch.Tensor]:
    out: list[torch.Tensor] = []
    for a, v in _schema_values(func, args, kwargs):
        if a.alias_info is not None and a.alias_info.is_write:
            flat, _ = tree_flatten(v)
            out.extend(t for t in flat if isinstance(t, torch.Tensor))
    return out


def _scalar_args(func, args, kwargs) -> str:
    parts = []
    for a, v in _schema_values(func, args, kwargs):
        flat, _ = tree_flatten(v)
        if any(isinstance(t, torch.Tensor) for t in flat):
            continue
        # Opaque handles (process groups are torch.ScriptObjects) repr with their address,
        # which would make two identical runs look different; name them by type instead.
        r = f"<{type(v).__name__}>" if isinstance(v, torch.ScriptObject) else repr(v)
        parts.append(f"{a.name}={r if len(r) <= 60 else r[:57] + '...'}")
    return ", ".join(parts)


# --------------------------------------------------------------------------------------
# Profiler tree → dispatch chains and kernels
# --------------------------------------------------------------------------------------


def attach_call_paths(result: StructureResult, events) -> None:
    """Fill `api`, `call_paths`, `kernels` and `seq` of each op from profiler events.

    For op k the profiler tree looks like
        aten::linear > aten::addmm > PythonDispatchMode > magneton#k > aten::addmm > ...
    The aten ops above the mode are how Python entered the dispatcher (`api` is the
    outermost); the subtree under the tag is what the op dispatched to. A call path is
    ancestors + subtree chain, with the op itself named once.
    """
    kernels: dict[tuple[str, str], int] = {}
    grad_of: dict[int, int] = {}  # backward op idx -> sequence nr of its forward op
    by_idx: dict[int, Any] = {}
    for e in events:
        if e.name.startswith(_TAG):
            try:
                by_idx[int(e.name[len(_TAG) :])] = e
            except ValueError:
                pass
    for op in result.ops:
        tag = by_idx.get(op.idx)
        if tag is None:
            op.api = op.name
            op.call_paths = [op.name]
            continue
        ancestors: list[str] = []
        p = tag.cpu_parent
        seq = -1
        while p is not None and not p.name.startswith(_TAG):
            if p.name.startswith("aten::"):
                ancestors.append(p.name)
                if seq < 0 and getattr(p, "sequence_nr", -1) >= 0:
                    seq = p.sequence_nr
            elif "Backward" in p.name and getattr(p, "sequence_nr", -1) >= 0:
                # the autograd node running this op (`AddmmBackward0`) carries the
                # sequence number of the forward op that created it
                grad_of.setdefault(op.idx, p.sequence_nr)
            p = p.cpu_parent
        ancestors.reverse()
        op.seq = seq
        op.api = ancestors[0] if ancestors else op.name
        if ancestors and ancestors[-1] == op.name:
            ancestors.pop()
        chains: list[list[str]] = []
        roots = [c for c in tag.cpu_children] or []
        for r in roots:
            _chains(r, [], chains)
        if not chains:
            chains = [[op.name]]
        paths = [" > ".join(ancestors + chain) for chain in chains]
        kern = _kernels_of(chains)
        # device kernels (CUDA) launched anywhere under the tag, by correlation id, and
        # how long they ran on the device (what the op costs a GPU, beyond its launch)
        for e in _walk(tag):
            for k in getattr(e, "kernels", []) or []:
                kname = getattr(k, "name", str(k))
                if kname not in kern:
                    kern.append(kname)
                dur_us = getattr(k, "duration", 0) or 0
                result.kernel_s[op.idx] = result.kernel_s.get(op.idx, 0.0) + dur_us / 1e6
        op.call_paths = list(dict.fromkeys(paths))
        for kname in kern:
            key = (kname, op.device if not kname.startswith("aten::") else "cpu")
            if key not in kernels:
                kernels[key] = len(result.kernels)
                result.kernels.append(KernelRecord(idx=kernels[key], name=key[0], device=key[1]))
            op.kernels.append(kernels[key])
    # Backward ops run in the autograd engine, outside every module's forward hooks: they
    # all landed in the root module (62% of a GPT-2 training step's energy in "(root)").
    # Charge each to the module whose forward op created its autograd node, as the
    # profiler links forward and backward by sequence number.
    fwd_module: dict[int, str] = {}
    for op in result.ops:
        if op.seq >= 0 and op.idx not in grad_of:
            fwd_module.setdefault(op.seq, op.module)
    for op in result.ops:
        if op.idx in grad_of and not op.module:
            op.module = fwd_module.get(grad_of[op.idx], op.module)


def other_thread_ops(events) -> int:
    """Outermost aten operator calls of threads where no operator was traced (the
    dispatch mode is per thread: its tags appear on the threads it traced)."""
    traced = {e.thread for e in events if e.name.startswith(_TAG)}
    return sum(
        1
        for e in events
        if e.cpu_parent is None and e.name.startswith("aten::") and e.thread not in traced
    )


def _kernels_of(chains: list[list[str]]) -> list[str]:
    """The ops that did the work: on each chain the deepest non-bookkeeping op, minus ops
    that only dispatched to a deeper kernel (`aten::_convolution` above
    `aten::_slow_conv2d_forward`)."""
    cands: list[tuple[str, ...]] = []
    for chain in chains:
        work = [i for i, n in enumerate(chain) if n not in BOOKKEEPING_OPS]
        if work:
            c = tuple(chain[: work[-1] + 1])
            if c not in cands:
                cands.append(c)
    keep = [
        c
        for c in cands
        if not any(
            len(d) > len(c) and d[: len(c)] == c and d[-1] not in IN_PLACE_WRITE_OPS for d in cands
        )
    ]
    return list(dict.fromkeys(c[-1] for c in keep))


def _chains(e, prefix: list[str], out: list[list[str]]):
    chain = prefix + [e.name]
    children = [c for c in e.cpu_children if not c.name.startswith(_TAG)]
    if not children:
        out.append(chain)
        return
    for c in children:
        _chains(c, chain, out)


def _walk(e):
    yield e
    for c in e.cpu_children:
        yield from _walk(c)


@contextlib.contextmanager
def call_profiler() -> Iterator[Any]:
    """The PyTorch profiler, set up for call paths (and CUDA kernels when present); read
    its events from `.function_events` once the block has ended.

    Kineto writes "USDT ... profiler_start/stop" lines straight to file descriptor 2 and
    only honours KINETO_LOG_LEVEL from the process's *initial* environment, so the start
    and stop calls run with fd 2 pointed at /dev/null; the workload's own stderr output in
    between is untouched.

    `torch.autograd.profiler.profile` (the Kineto profiler `torch.profiler.profile` wraps),
    not the wrapper: the wrapper's start asks `hasattr(torch, "_inductor")`, which imports
    torch._inductor through torch's lazy attributes — 1.1 s of every recording here, for a
    cudagraphs setting only its schedule uses.
    """
    from torch.autograd.profiler import profile

    # every thread, not only this one: operators of the program's other threads (a pool
    # built in setup(), a worker started by the entry) are not traced by the dispatch
    # mode, and `other_thread_ops` counts them so the recording can say so
    try:
        everywhere = torch._C._profiler._ExperimentalConfig(profile_all_threads=True)
    except TypeError:  # an older torch: this thread only (and `_other_threads` counts)
        everywhere = None
    cuda = torch.cuda.is_available()
    prof = profile(
        use_cpu=True,
        use_device="cuda" if cuda else None,
        use_kineto=True,
        experimental_config=everywhere,
    )
    with _fd2_silenced():
        prof.__enter__()
    try:
        yield prof
    finally:
        if cuda:
            torch.cuda.synchronize()
        with _fd2_silenced():
            prof.__exit__(None, None, None)


@contextlib.contextmanager
def _fd2_silenced() -> Iterator[None]:
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):  # no real fd 2 (embedded interpreters, some notebooks)
        yield
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def attach_profile(result: StructureResult, prof: Any) -> None:
    """Parse the profiler's events into `result`: call paths, and the count of operators
    other threads ran. The parse builds one object per event (3,000+ for a GPT-2 12L
    pass) and no cycles; with the collector running, a full collection it triggered made
    the parse 0.27-0.29 s instead of 0.08 s in two of six passes (measured)."""
    with gc_paused():
        events = prof.function_events
        attach_call_paths(result, events)
        result.other_thread_ops = other_thread_ops(events)


def run_structure_pass(
    fn: Callable[[], Any], capture: StructureCapture, *, profile_calls: bool = True
) -> tuple[Any, StructureResult]:
    """Run `fn` once under the structure capture (and the profiler, for call paths)."""
    prof = None
    profiler = call_profiler() if profile_calls else contextlib.nullcontext()
    try:
        with profiler as prof, capture.modules, capture:
            out = fn()
    finally:
        result = capture.finish(prof)
    return out, result


def finish_modules(result: StructureResult, modules: ModuleTracker) -> None:
    """Turn the tracker's seen modules into records and link each op to its module."""
    result.modules = modules.records()
    idx = {m.name: m.idx for m in result.modules}
    for op in result.ops:
        op.module_idx = idx.get(op.module, -1)
