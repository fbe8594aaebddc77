"""The key variable: which condition or setting made the two sides take different paths.

Paper §4.3 (FindKeyVar). Two situations:

* **Python-level divergence** — the deviation site is a Python line both sides executed
  (e.g. transformers' `hidden_states = self.act(hidden_states)` or
  `attention_interface(...)`), after which they entered different functions. Magneton
  re-runs both scripts exactly like the recorder (import as a module, `setup()`, then the
  entry) with *line tracing restricted to the functions on the divergent path*: a global
  `sys.settrace` hook that returns a local tracer only for the watched code objects, so
  the rest of the program runs at near full speed (`sys.monitoring` would be cheaper but
  needs 3.12). The tracer records which lines ran (branches taken) and evaluates the
  watched expressions in the frame's locals — the branch conditions' operands (parsed
  with libcst) and the call target at the deviation line. The first branch taken
  differently, or else the call target whose value differs, is the key variable. Each
  side runs in a process of its own: scripts set global flags at import (`torch.backends.
  mkldnn.enabled = False`) and must not leak them into Magneton or into each other. The
  processes are forks of one warm worker (tracer/timing/warm.py) that imported the libraries
  both scripts import once — two cold imports of transformers were over 90% of the
  re-run; the two sides run in parallel. In a diff (diagnose/pipeline.py) that worker is
  the diff's own (`WarmPool`), started when detection found candidates and already used
  by confirmation, so the libraries are not imported a third time for diagnosis; a
  caller without one (export-patch's lookup) starts a worker as soon as the first Python
  deviation site is found.
* **Native divergence** — inside C++ dispatch (`aten::_convolution` → `mkldnn_convolution`
  vs `thnn_conv2d`) or the same kernels with other arguments. No Python line decides it;
  the knowledge rules name the knobs that steer that dispatch, and the knob whose value
  differs between the two runs' config snapshots is the key variable.

The backward data-flow (dataflow.py) then takes the key variable to the user's line.
"""

from __future__ import annotations

import builtins
import inspect
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import libcst as cst

from magneton.knowledge.base import Knob, KnowledgeBase
from magneton.model import PathElement, WorkerError
from magneton.tracer.programs.program import env_of, program_config
from magneton.tracer.timing.warm import WarmPool, WarmWorker

from ..source.dataflow import (
    BackwardSlicer,
    DataFlow,
    KeyVariable,
    Origin,
    SideContext,
    SliceContext,
    find_attribute_origin,
    find_constructor_call,
    find_knob_origin,
    find_library_default,
)
from ..source.index import SourceIndex, is_literal, is_user_file, literal_value, source_index

RERUN_TIMEOUT_S = 240.0


# --------------------------------------------------------------------------------------
# Re-run of one side (a job of tracer/timing/warm.py's worker, in a child process)
# --------------------------------------------------------------------------------------

# Frames that are call plumbing, skipped when recording who called a watched function.
_PLUMBING = ("torch/nn/modules/module.py", "functools.py", "contextlib.py", "/typing.py")


def summarize(v: object) -> str:
    """A short, comparable description of a runtime value."""
    if isinstance(v, (str, int, float, bool, type(None))):
        return repr(v)
    torch = sys.modules.get("torch")  # never import torch just to describe a value
    if torch is not None:
        if isinstance(v, torch.Tensor):
            dtype = str(v.dtype).replace("torch.", "")
            if v.is_nested:  # no single shape: the components it packs
                return f"<Tensor {dtype} nested, {v.size(0)} components>"
            return f"<Tensor {dtype} {list(v.shape)}>"
        if isinstance(v, torch.nn.Module):
            t = type(v)
            return f"<module {t.__module__}.{t.__qualname__}>"
    if isinstance(v, type):
        return f"<class {v.__module__}.{v.__qualname__}>"
    func = getattr(v, "func", None)
    if func is not None and hasattr(v, "keywords"):  # functools.partial
        kw = ", ".join(f"{k}={val!r}" for k, val in sorted(v.keywords.items()))
        return f"<partial {summarize(func)[1:-1]}{' ' + kw if kw else ''}>"
    if inspect.isfunction(v) or inspect.ismethod(v) or inspect.isbuiltin(v):
        mod = getattr(v, "__module__", "") or ""
        return f"<function {mod}.{getattr(v, '__qualname__', getattr(v, '__name__', '?'))}>"
    t = type(v)
    return f"<{t.__module__}.{t.__qualname__}>"


class _Unsupported(Exception):
    pass


def _evaluate(node: cst.BaseExpression, frame) -> Any:
    """Evaluate a side-effect-free expression (names, attributes, constant subscripts)."""
    if is_literal(node):
        return literal_value(node)
    if isinstance(node, cst.Name):
        for ns in (frame.f_locals, frame.f_globals, vars(builtins)):
            if node.value in ns:
                return ns[node.value]
        raise _Unsupported(node.value)
    if isinstance(node, cst.Attribute):
        return getattr(_evaluate(node.value, frame), node.attr.value)
    if isinstance(node, cst.Subscript) and len(node.slice) == 1:
        el = node.slice[0].slice
        if isinstance(el, cst.Index):
            return _evaluate(node.value, frame)[_evaluate(el.value, frame)]
    raise _Unsupported(type(node).__name__)


def _type_info(node: cst.BaseExpression, frame) -> tuple[str, str] | None:
    """(type name, source file) of an attribute's owner object (`config` in `config.x`)."""
    if not isinstance(node, cst.Attribute):
        return None
    try:
        owner = _evaluate(node.value, frame)
    except Exception:
        return None
    t = type(owner)
    try:
        src = inspect.getsourcefile(t) or ""
    except TypeError:
        src = ""
    return t.__qualname__, src


class _Tracer:
    def __init__(self, spec: dict):
        self.watch: dict[tuple[str, str], list[dict]] = {}
        for w in spec.get("watch", []):
            self.watch.setdefault((w["file"], w["name"]), []).append(w)
        self.max_inv = int(spec.get("max_invocations", 4))
        self.exprs: dict[str, cst.BaseExpression] = {}
        self.lines: dict[tuple[str, int], list[list[int]]] = {}
        self.values: dict[tuple[str, int, str], list[str]] = {}
        self.types: dict[tuple[str, int, str], list[str]] = {}
        self.call_sites: dict[tuple[str, int], list] = {}
        self.errors: dict[tuple[str, int, str], str] = {}

    def _match(self, code) -> dict | None:
        for w in self.watch.get((code.co_filename, code.co_name), ()):
            if w["first"] <= code.co_firstlineno <= w["last"]:
                return w
        return None

    def global_trace(self, frame, event, arg):
        if event != "call":
            return None
        w = self._match(frame.f_code)
        if w is None:
            return None
        key = (w["file"], w["first"])
        if key not in self.call_sites:
            f = frame.f_back
            while f is not None and any(p in f.f_code.co_filename for p in _PLUMBING):
                f = f.f_back
            if f is not None:
                self.call_sites[key] = [f.f_code.co_filename, f.f_lineno]
        runs = self.lines.setdefault(key, [])
        record = len(runs) < self.max_inv
        seq: list[int] = []
        if record:
            runs.append(seq)
        watched = {int(k): v for k, v in w.get("lines", {}).items()}

        def local(frame, event, arg):
            if event == "line":
                ln = frame.f_lineno
                if record:
                    seq.append(ln)
                for code in watched.get(ln, ()):
                    self._eval(w["file"], ln, code, frame)
            return local

        return local

    def _eval(self, file: str, line: int, code: str, frame) -> None:
        key = (file, line, code)
        vals = self.values.setdefault(key, [])
        if len(vals) >= 5:
            return
        node = self.exprs.get(code)
        if node is None:
            try:
                node = self.exprs[code] = cst.parse_expression(code)
            except Exception as e:
                self.errors[key] = f"parse: {e}"
                return
        try:
            v = summarize(_evaluate(node, frame))
        except Exception as e:  # not evaluable here (yet): keep the reason, not a crash
            self.errors.setdefault(key, f"{type(e).__name__}: {e}"[:200])
            return
        if v not in vals:
            vals.append(v)
        ti = _type_info(node, frame)
        if ti is not None and key not in self.types:
            self.types[key] = list(ti)


def _preimport(script: str) -> None:
    """Run the script's module-level imports untraced first.

    A global trace hook costs a Python call per function call; `import transformers`
    makes ~1.8 million of them (30 s instead of 12 s here). The libraries are cached in
    sys.modules afterwards, so the traced import of the script itself is cheap and its
    own module-level code (where flags are set) is still traced.
    """
    idx = source_index(script)
    if idx is None:
        return
    scratch: dict = {"__name__": "magneton_preimport"}
    for stmt in idx.module.body:
        if isinstance(stmt, cst.SimpleStatementLine) and all(
            isinstance(s, (cst.Import, cst.ImportFrom)) for s in stmt.body
        ):
            try:
                exec(compile(idx.code(stmt), script, "exec"), scratch)
            except Exception:  # the traced import will raise it properly if it matters
                pass


def _trace_entry(spec: dict, script: str, tracer: _Tracer, phases: dict, t0: float) -> None:
    """Import the script, call its setup and entry with the tracer on."""
    import importlib.util

    sys.settrace(tracer.global_trace)
    try:
        name = "magneton_rerun_" + "".join(c if c.isalnum() else "_" for c in Path(script).stem)
        mspec = importlib.util.spec_from_file_location(name, script)
        if mspec is None or mspec.loader is None:
            raise ImportError(f"cannot import {script} as a module")
        module = importlib.util.module_from_spec(mspec)
        sys.modules[name] = module
        sys.path.insert(0, str(Path(script).parent))
        mspec.loader.exec_module(module)
        phases["import_s"] = time.perf_counter() - t0
        setup_fn = getattr(module, spec.get("setup") or "setup", None)
        args = setup_fn() if callable(setup_fn) else ()
        if args is None:
            args = ()
        elif not isinstance(args, tuple):
            args = (args,)
        phases["setup_s"] = time.perf_counter() - t0
        getattr(module, spec.get("entry") or "main")(*args)
        phases["entry_s"] = time.perf_counter() - t0
    finally:
        sys.settrace(None)


def _trace_program_window(program: dict, tracer: _Tracer, phases: dict, t0: float) -> None:
    """Re-run a recorded program (`magneton record -- python …`) with the tracer on for
    exactly the unit its structure pass recorded (tracer/programs/program.py)."""
    from magneton.tracer.programs.program import run_program_window

    try:
        run_program_window(
            program, lambda: sys.settrace(tracer.global_trace), lambda: sys.settrace(None)
        )
    finally:
        sys.settrace(None)
    phases["entry_s"] = time.perf_counter() - t0


def run_side(spec: dict) -> dict:
    """Re-run one side with the watches installed (a job of tracer/timing/warm.py's worker, in a
    child process of its own); the tracer's tables as JSON."""
    tracer = _Tracer(spec)
    result: dict = {"ok": False, "error": ""}
    phases: dict[str, float] = {}  # cumulative seconds at the end of each phase
    t0 = time.perf_counter()
    os.environ.update(spec.get("env", {}))
    script = spec["script"]
    sys.argv = [script]
    try:
        _preimport(script)
        phases["preimport_s"] = time.perf_counter() - t0
        if spec.get("program"):  # a program run: trace only the window it recorded
            _trace_program_window(spec["program"], tracer, phases, t0)
        else:
            _trace_entry(spec, script, tracer, phases, t0)
        result["ok"] = True
    except BaseException as e:  # the user's script failed: report, never hang the parent
        result["error"] = f"{type(e).__name__}: {e}"[:500]
    # JSON has no tuple keys: tables travel as [key..., value] rows
    result.update(
        lines=[[*k, v] for k, v in tracer.lines.items()],
        values=[[*k, v] for k, v in tracer.values.items()],
        types=[[*k, v] for k, v in tracer.types.items()],
        call_sites=[[*k, v] for k, v in tracer.call_sites.items()],
        errors=[[*k, v] for k, v in tracer.errors.items()],
        seconds=time.perf_counter() - t0,
        phases={k: round(v, 3) for k, v in phases.items()},
    )
    return result


# --------------------------------------------------------------------------------------
# Driving the re-runs
# --------------------------------------------------------------------------------------


@dataclass
class Watch:
    file: str
    name: str  # co_name
    first: int  # lowest acceptable co_firstlineno (first decorator line)
    last: int  # highest (the `def` line)
    lines: dict[int, list[str]] = field(default_factory=dict)

    def add(self, line: int, code: str) -> None:
        lst = self.lines.setdefault(line, [])
        if code not in lst:
            lst.append(code)

    def to_json(self) -> dict:
        return {
            "file": self.file,
            "name": self.name,
            "first": self.first,
            "last": self.last,
            "lines": {str(k): v for k, v in self.lines.items()},
        }


@dataclass
class RerunSide:
    script: str
    entry: str
    setup: str
    env: dict[str, str] = field(default_factory=dict)
    program: dict[str, str] = field(default_factory=dict)  # `program.*` config of a program run


@dataclass
class RerunResult:
    ok: bool
    error: str = ""
    seconds: float = 0.0
    lines: dict[tuple[str, int], list[list[int]]] = field(default_factory=dict)
    values: dict[tuple[str, int, str], list[str]] = field(default_factory=dict)
    types: dict[tuple[str, int, str], list[str]] = field(default_factory=dict)
    call_sites: dict[tuple[str, int], tuple[str, int]] = field(default_factory=dict)
    errors: dict[tuple[str, int, str], str] = field(default_factory=dict)
    # cumulative seconds since the worker started, at the end of each of its phases
    phases: dict[str, float] = field(default_factory=dict)
    forked: bool = False  # ran in a fork of a warm worker (else in a fresh interpreter)

    def value(self, file: str, line: int, code: str) -> str | None:
        v = self.values.get((file, line, code))
        return v[0] if v else None

    def executed(self, w: Watch) -> set[int]:
        out: set[int] = set()
        for (f, first), runs in self.lines.items():
            if f == w.file and w.first <= first <= w.last:
                for r in runs:
                    out.update(r)
        return out


def watch_for(idx: SourceIndex, fn: cst.FunctionDef) -> Watch:
    # a decorated function's code object starts at its first decorator
    # (`co_firstlineno`), not at `def`: torch.optim's `adam()` under
    # `@_disable_dynamo_if_unsupported` was never matched, so the re-run saw nothing
    first = min([idx.span(fn).line, *(idx.line_of(d) for d in fn.decorators)])
    return Watch(file=idx.path, name=fn.name.value, first=first, last=idx.line_of(fn.name))


class Rerun:
    """The re-run of both sides, started before the watch points are known.

    The workers (tracer/timing/warm.py) begin importing the scripts' libraries at once, so the
    caller's static analysis overlaps them; `run(watches)` then forks one child per side.
    Sides recorded in the same environment share one worker: the libraries both scripts
    import are imported once. With `pool` (the diff's warm workers, tracer/timing/warm.py
    `WarmPool`, which confirmation already used), a group the pool has a worker for runs
    there, so a diff imports its libraries once in all; groups it lacks get a worker of
    their own. `close()` (or leaving the `with`) kills the processes of the workers it
    started, and removes their temporary directories, also on timeouts and Ctrl-C; the
    pool's belong to its owner.
    """

    def __init__(self, sides: dict[str, RerunSide], pool: WarmPool | None = None):
        self.sides = sides
        self.t0 = time.perf_counter()
        self.workers: list[tuple[WarmWorker, dict[str, RerunSide]]] = []
        self._own: list[WarmWorker] = []
        self.started = 0  # zygotes started for this re-run (0: all from the pool)
        groups: dict[tuple, dict[str, RerunSide]] = {}
        for name, side in sides.items():
            groups.setdefault(tuple(sorted(side.env.items())), {})[name] = side
        try:
            for group in groups.values():
                env = next(iter(group.values())).env
                scripts = [s.script for s in group.values()]
                worker = pool.worker(scripts, env) if pool is not None else None
                if worker is None:
                    worker = WarmWorker(
                        scripts,
                        env=env,
                        preload=[__name__],
                        # removed by close(): one directory per diagnosed finding piled up
                        tmp_prefix="magneton-rerun-",
                    )
                    self._own.append(worker)
                self.workers.append((worker, group))
        except BaseException:
            self.close()
            raise
        self.started = len(self._own)

    def run(self, watches: list[Watch]) -> dict[str, RerunResult]:
        """Re-run every side (in parallel) with the watches installed."""
        deadline = time.monotonic() + RERUN_TIMEOUT_S
        jobs = [
            (w, {n: w.submit(f"{__name__}:run_side", _spec(s, watches), cwd=_cwd(s))})
            for w, group in self.workers
            for n, s in group.items()
        ]
        return {n: _side_result(w, job, deadline) for w, js in jobs for n, job in js.items()}

    def close(self) -> None:
        for worker in self._own:
            worker.close()

    def __enter__(self) -> Rerun:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def rerun_sides(sides: dict[str, RerunSide], watches: list[Watch]) -> dict[str, RerunResult]:
    """Re-run every side in a child process of its own (in parallel) with the watches."""
    with Rerun(sides) as rerun:
        return rerun.run(watches)


def _spec(side: RerunSide, watches: list[Watch]) -> dict:
    return {
        "script": side.script,
        "entry": side.entry,
        "setup": side.setup,
        "env": side.env,
        "program": side.program,
        "watch": [w.to_json() for w in watches],
    }


def _cwd(side: RerunSide) -> str:
    """The working directory a side ran in (a program run's, else the script's folder)."""
    return side.program.get("program.cwd") or os.path.dirname(side.script) or os.getcwd()


def _side_result(worker: WarmWorker, job: int, deadline: float) -> RerunResult:
    try:
        res = worker.result(job, timeout_s=max(1.0, deadline - time.monotonic()))
    except WorkerError as e:
        if "timed out" in str(e):
            return RerunResult(False, f"re-run timed out after {RERUN_TIMEOUT_S:.0f} s")
        return RerunResult(False, f"re-run crashed: {e}"[:300])
    if res.value is None:  # the job did not return: it crashed or raised in Magneton
        return RerunResult(False, f"re-run crashed: {res.error}"[:300])
    data = res.value
    stats = worker.stats
    return RerunResult(
        ok=bool(data.get("ok")),
        error=data.get("error", ""),
        seconds=float(data.get("seconds", 0.0)),
        lines={(f, int(first)): v for f, first, v in data.get("lines", [])},
        values={(f, int(ln), c): v for f, ln, c, v in data.get("values", [])},
        types={(f, int(ln), c): v for f, ln, c, v in data.get("types", [])},
        call_sites={
            (f, int(first)): (v[0], int(v[1])) for f, first, v in data.get("call_sites", [])
        },
        errors={(f, int(ln), c): v for f, ln, c, v in data.get("errors", [])},
        phases={
            **data.get("phases", {}),
            "cpu_s": round(res.cpu_s, 3),
            "worker_ready_s": stats.ready_s if stats else 0.0,
            "worker_ready_cpu_s": stats.ready_cpu_s if stats else 0.0,
        },
        forked=bool(stats and stats.forking),
    )


# --------------------------------------------------------------------------------------
# Finding the key variable
# --------------------------------------------------------------------------------------


@dataclass
class SideInfo:
    """What key-variable analysis needs from one side of a finding."""

    name: str  # "a" | "b"
    run: str
    script: str
    entry: str
    setup: str
    config: dict[str, str]
    files: list[str]
    frames: list[tuple[str, int, str]]  # stack of the diverging operator, entry first
    script_unchanged: bool = True


# a node that branches on a condition (its `test`)
_Branch = cst.If | cst.While | cst.IfExp


def _branch_tests(idx: SourceIndex, fn: cst.FunctionDef, before: int) -> list[_Branch]:
    """`if`/`while` statements and conditional expressions in `fn` up to line `before`."""
    out: list[_Branch] = []
    for n in idx.walk(fn):
        if isinstance(n, (cst.If, cst.While, cst.IfExp)) and idx.line_of(n) <= before:
            out.append(n)
    return out


def _body_lines(idx: SourceIndex, b: cst.If | cst.While) -> set[int]:
    """The lines of a branch's own body: from its first statement (an IndentedBlock's
    span starts on the header line) to its end, elif/else excluded."""
    stmts = b.body.body
    if not stmts:
        return set()
    return set(range(idx.line_of(stmts[0]), idx.span(stmts[-1]).end_line + 1))


def _operands(idx: SourceIndex, test: cst.BaseExpression) -> list[cst.BaseExpression]:
    """The variables a condition reads (maximal Name/Attribute/Subscript chains)."""
    found: list[cst.BaseExpression] = []

    def visit(n: cst.CSTNode) -> None:
        if isinstance(n, (cst.Name, cst.Attribute, cst.Subscript)):
            if not is_literal(n):
                found.append(n)
            return
        if isinstance(n, cst.Call):
            for a in n.args:  # the call's arguments, not the callee name
                visit(a.value)
            if isinstance(n.func, cst.Attribute):
                visit(n.func.value)
            return
        for c in n.children:
            visit(c)

    visit(test)
    return found


def _static_watches(
    idx: SourceIndex, fn: cst.FunctionDef, site_line: int, slicer: BackwardSlicer
) -> tuple[list[Watch], list[cst.BaseExpression], list[_Branch]]:
    """Watch points for the re-run: the call targets on the deviation line, the branch
    conditions before it, and the statically reachable hops of the call targets' slices."""
    site = watch_for(idx, fn)
    watches: dict[tuple[str, int], Watch] = {(site.file, site.first): site}
    targets = [c.func for c in idx.calls_on_line(site_line, within=fn)]
    for t in targets:
        site.add(site_line, idx.code(t))
    branches = _branch_tests(idx, fn, site_line)
    for b in branches:
        test = b.test
        line = idx.line_of(test)
        for op in _operands(idx, test):
            site.add(line, idx.code(op))
    for t in targets:
        flow = slicer.from_node(idx, t, "call target")
        for hop in flow.hops[1:]:
            hidx = source_index(hop.file)
            if hidx is None:
                continue
            hfn = hidx.function_at(hop.line)
            if hfn is None:
                continue
            w = watch_for(hidx, hfn)
            w = watches.setdefault((w.file, w.first), w)
            w.add(hop.line, hop.expr)
            try:
                node = cst.parse_expression(hop.expr)
            except cst.ParserSyntaxError:
                continue
            if isinstance(node, cst.Attribute):
                w.add(hop.line, hidx.module.code_for_node(node.value))
    return list(watches.values()), targets, branches


def _values_table(results: dict[str, RerunResult]) -> dict[tuple[str, int, str], dict[str, str]]:
    table: dict[tuple[str, int, str], dict[str, str]] = {}
    for side, res in results.items():
        for (file, line, code), vals in res.values.items():
            if vals:
                table.setdefault((file, line, code), {})[side] = vals[0]
    return table


@dataclass
class SitePlan:
    """Static preparation of one Python deviation site: what the re-run must watch."""

    site: PathElement
    idx: SourceIndex
    fn: cst.FunctionDef
    ctx: SliceContext
    slicer: BackwardSlicer
    watches: list[Watch]
    targets: list[cst.BaseExpression]
    branches: list[_Branch]


def plan_site(
    site: PathElement, sides: dict[str, SideInfo], kb: KnowledgeBase
) -> SitePlan | KeyVariable:
    """Prepare the analysis of a Python deviation site (a KeyVariable when impossible)."""
    file, line = site.file or "", site.line or 0
    idx = source_index(file)
    if idx is None:
        return KeyVariable("unknown", note=f"cannot read {file}")
    fn = idx.function_at(line, site.function)
    if fn is None:
        return KeyVariable("unknown", note=f"no function around {file}:{line}")
    ctx = SliceContext(
        sides={
            n: SideContext(script=s.script, files=s.files, frames=s.frames)
            for n, s in sides.items()
        },
        config_attributes=frozenset(
            k.attribute.lstrip("_") for k in kb.knobs.values() if k.attribute
        ),
        knob_names=frozenset(n for k in kb.knobs.values() for n in (k.key, *k.snapshot_keys)),
    )
    slicer = BackwardSlicer(ctx)
    watches, targets, branches = _static_watches(idx, fn, line, slicer)
    return SitePlan(site, idx, fn, ctx, slicer, watches, targets, branches)


def merge_watches(plans: list[SitePlan]) -> list[Watch]:
    """One watch per function across all sites, so both scripts re-run once per diff."""
    merged: dict[tuple[str, int], Watch] = {}
    for plan in plans:
        for w in plan.watches:
            m = merged.setdefault((w.file, w.first), Watch(w.file, w.name, w.first, w.last))
            for line, codes in w.lines.items():
                for c in codes:
                    m.add(line, c)
    return list(merged.values())


def _rerun_skipped(sides: dict[str, SideInfo], rerun: bool) -> str | None:
    """Why the scripts cannot be re-run (disabled, stale or missing); None if they can."""
    if not rerun:
        return "disabled (--no-rerun)"
    missing = [s.name for s in sides.values() if not s.script or not os.path.isfile(s.script)]
    if missing:
        return f"script of side {', '.join(missing)} not found"
    stale = [s.script for s in sides.values() if not s.script_unchanged]
    if stale:
        return f"{', '.join(stale)} changed since it was recorded"
    return None


def start_rerun(
    sides: dict[str, SideInfo], rerun: bool, pool: WarmPool | None = None
) -> Rerun | None:
    """Start the re-run's workers now (None when it will be skipped), in `pool` where it
    has them; pass the result to `run_rerun` once the watches are known, and close it in
    any case."""
    if _rerun_skipped(sides, rerun) is not None:
        return None
    return _new_rerun(sides, pool)


def _new_rerun(sides: dict[str, SideInfo], pool: WarmPool | None) -> Rerun:
    return Rerun(
        {
            n: RerunSide(s.script, s.entry, s.setup, env_of(s.config), program_config(s.config))
            for n, s in sides.items()
        },
        pool,
    )


def run_rerun(
    sides: dict[str, SideInfo],
    watches: list[Watch],
    rerun: bool,
    started: Rerun | None = None,
    pool: WarmPool | None = None,
) -> tuple[dict[str, RerunResult], dict]:
    """Re-run both scripts with the watches (unless disabled, stale or missing), in the
    workers `start_rerun` started for these sides if given (closed here), else in
    `pool`'s where it has them."""
    skipped = _rerun_skipped(sides, rerun)
    if skipped is not None:
        if started is not None:
            started.close()
        return {}, {"ran": False, "skipped": skipped}
    t0 = time.perf_counter()
    # not skipped (checked just above): start the workers unless `started` has them
    with started or _new_rerun(sides, pool) as job:
        results = job.run(watches)
    rerun_info: dict = {
        "ran": True,
        "seconds": round(time.perf_counter() - t0, 2),
        "ok": {n: r.ok for n, r in results.items()},
    }
    errors = {n: r.error for n, r in results.items() if r.error}
    if errors:
        rerun_info["errors"] = errors
    # where the time went (docs/benchmarks.md): the workers' imports, then each side
    rerun_info["since_start_s"] = round(time.perf_counter() - job.t0, 2)
    rerun_info["forked"] = all(r.forked for r in results.values())
    rerun_info["workers_started"] = job.started  # 0: it ran in the diff's warm workers
    rerun_info["phases"] = {n: r.phases for n, r in results.items()}
    return results, rerun_info


def python_key_variable(
    site: PathElement,
    sides: dict[str, SideInfo],
    kb: KnowledgeBase,
    *,
    rerun: bool,
    pool: WarmPool | None = None,
) -> KeyVariable:
    """Key variable of a divergence decided at a Python line both sides executed (the
    re-run in `pool`'s warm workers where it has them)."""
    plan = plan_site(site, sides, kb)
    if isinstance(plan, KeyVariable):
        return plan
    results, info = run_rerun(sides, plan.watches, rerun, pool=pool)
    return analyze_site(plan, sides, kb, results, info)


def analyze_site(
    plan: SitePlan,
    sides: dict[str, SideInfo],
    kb: KnowledgeBase,
    results: dict[str, RerunResult],
    rerun_info: dict,
) -> KeyVariable:
    """Compare the re-runs at the site: the branch taken differently, else the call
    target whose value differs; then follow it back with the observed values."""
    site, idx, ctx, slicer = plan.site, plan.idx, plan.ctx, plan.slicer
    targets, branches = plan.targets, plan.branches
    site_watch = plan.watches[0]
    ctx.values = _values_table(results)
    for n, r in results.items():
        ctx.call_sites[n] = dict(r.call_sites)
    key_node: cst.BaseExpression | None = None
    kind = "call-target"
    note = ""
    if len(results) == 2 and all(r.ok for r in results.values()):
        ra, rb = results["a"], results["b"]
        lines_a, lines_b = ra.executed(site_watch), rb.executed(site_watch)
        differing = lines_a ^ lines_b

        def differing_operands(b: cst.If | cst.While) -> list[cst.BaseExpression]:
            line = idx.line_of(b.test)
            return [
                o
                for o in _operands(idx, b.test)
                if len(set(ctx.values.get((idx.path, line, idx.code(o)), {}).values())) > 1
            ]

        # A branch explains the split when its own body (not its elif/else: an `if`'s
        # span covers those too, which once blamed `fused` in torch.optim's
        # `if fused: ... elif foreach: ...` for what `foreach` decided) ran on one side
        # only. Prefer one whose condition's operands were seen to differ, else the
        # innermost such branch.
        taken = [
            b for b in branches if not isinstance(b, cst.IfExp) and _body_lines(idx, b) & differing
        ]
        chosen_branch = next((b for b in taken if differing_operands(b)), None)
        if chosen_branch is None and taken:
            chosen_branch = taken[-1]
        if chosen_branch is not None:
            kind = "branch"
            ops = differing_operands(chosen_branch) or _operands(idx, chosen_branch.test)
            key_node = (ops or [chosen_branch.test])[0]
        else:
            # plan_site plans only a site with a line (at line 0 it finds no function)
            assert site.line is not None
            for t in targets:
                vals = ctx.values.get((idx.path, site.line, idx.code(t)), {})
                if len(set(vals.values())) > 1:
                    key_node = t
                    break
            if key_node is None and targets:
                key_node = targets[0]
                note = "the re-run saw the same call target on both sides"
    elif targets:
        key_node = targets[0]
        note = "without a re-run: the call target at the deviation line is assumed"
    if key_node is None:
        return KeyVariable("unknown", rerun=rerun_info, note="no call or condition at the site")
    kline = idx.line_of(key_node)
    kcode = idx.code(key_node)
    flow = slicer.from_node(idx, key_node, "key variable")
    kv = KeyVariable(
        kind=kind,
        expr=kcode,
        file=idx.path,
        line=kline,
        values=ctx.values.get((idx.path, kline, kcode), {}),
        flow=flow,
        rerun=rerun_info,
        note=note,
    )
    kv.origins = _origins_from_flow(flow, sides, ctx, kb, results)
    kv.knob = differing_knob(flow, kb, sides)  # the setting the key variable came from
    return kv


def _origins_from_flow(
    flow: DataFlow,
    sides: dict[str, SideInfo],
    ctx: SliceContext,
    kb: KnowledgeBase,
    results: dict[str, RerunResult],
) -> dict[str, Origin | None]:
    out: dict[str, Origin | None] = {}
    last = flow.hops[-1] if flow.hops else None
    for name, side in sides.items():
        observed = last.values.get(name) if last else None
        origin: Origin | None = None
        if flow.terminal == "config-attribute" and flow.attribute:
            origin = find_attribute_origin(flow.attribute, side.files, observed, side.config)
            if origin is None and last is not None:
                origin = _library_default(flow.attribute, last, name, side, results)
        elif flow.terminal == "knob" and flow.knob_name:
            knob = flow_knob(flow, kb)
            if knob is not None and knob is differing_knob(flow, kb, sides):
                # its value on this side is the recorded setting (the re-run saw only the
                # expression that read it); never set here: the library default
                origin = _knob_origin(knob, sides, name, observed or _snapshot(knob, side))
            elif knob is not None:
                origin = find_knob_origin(knob, side.files, observed, side.config)
        elif flow.terminal == "literal" and last is not None:
            user = is_user_file(last.file, side.script)
            origin = Origin(
                kind="api-argument" if user else "code",
                variable=last.expr,
                file=last.file,
                line=last.line,
                code=last.code,
                value=last.expr,
                library_default=not user,
                note="" if user else "hard-coded in library code",
            )
        out[name] = origin
    return out


def flow_knob(flow: DataFlow, kb: KnowledgeBase) -> Knob | None:
    """The KB's knob a data-flow ended at (by key, or by one of its assignment targets)."""
    if flow.terminal != "knob" or not flow.knob_name:
        return None
    return kb.knob(flow.knob_name) or next(
        (k for k in kb.knobs.values() if flow.knob_name in k.assign), None
    )


def _snapshot(knob: Knob, side: SideInfo) -> str | None:
    return next((side.config[k] for k in knob.snapshot_keys if k in side.config), None)


def differing_knob(flow: DataFlow, kb: KnowledgeBase, sides: dict[str, SideInfo]) -> Knob | None:
    """The knob the data-flow ended at when its recorded values differ between the sides:
    only then does it explain the divergence (a knob both runs had alike cannot)."""
    knob = flow_knob(flow, kb)
    if knob is None:
        return None
    values = [_snapshot(knob, side) for side in sides.values()]
    return knob if None not in values and len(set(values)) > 1 else None


def _library_default(
    attribute: str, hop, side_name: str, side: SideInfo, results: dict[str, RerunResult]
) -> Origin | None:
    """The user never set the attribute: report the library's default and where the user
    builds the settings object (so a fix can pass the attribute explicitly)."""
    res = results.get(side_name)
    owner = None
    if res is not None:
        base = hop.expr.rsplit(".", 1)[0] if "." in hop.expr else hop.expr
        owner = res.types.get((hop.file, hop.line, hop.expr)) or res.types.get(
            (hop.file, hop.line, base)
        )
    if not owner:
        return None
    type_name, type_file = owner
    found = find_library_default(attribute, type_name.split(".")[-1], type_file)
    if found is None:
        return None
    file, line, value = found
    fidx = source_index(file)
    origin = Origin(
        kind="config",
        variable=attribute,
        file=file,
        line=line,
        code=(fidx.line_text(line) if fidx else ""),
        value=value,
        library_default=True,
        note=f"default of {type_name}; not set in the script",
    )
    call = find_constructor_call(type_name.split(".")[-1], side.files)
    if call is not None:
        cidx, node = call
        origin.insert = {
            "file": cidx.path,
            "line": cidx.line_of(node),
            "span": cidx.span(node).to_json(),
            "keyword": attribute.lstrip("_"),
            "code": cidx.line_text(cidx.line_of(node)),
        }
    return origin


def _plausible_at(knob: Knob, level: str | None, kb: KnowledgeBase) -> bool:
    """Can this knob cause a divergence seen at `level`? A knob the rules only tie to
    dispatch choices (mkldnn.enabled) cannot explain identical kernels with identical
    arguments; knobs no rule mentions are not excluded (nothing is known about them)."""
    levels: set[str] = set()
    mentioned = False
    for r in kb.rules:
        if r.knob == knob.key:
            mentioned = True
            levels.update(r.levels or ("python", "dispatch", "kernel"))
    return not mentioned or level is None or level in levels


def native_key_variable(
    candidate_knobs: list[Knob],
    sides: dict[str, SideInfo],
    kb: KnowledgeBase,
    level: str | None = None,
) -> KeyVariable:
    """Key variable of a divergence inside native dispatch: the knob that differs."""
    cfg_a, cfg_b = sides["a"].config, sides["b"].config
    diffs = [d for d in kb.config_differences(cfg_a, cfg_b) if _plausible_at(d[0], level, kb)]
    differing = {k.key: (key, va, vb) for k, key, va, vb in diffs}
    chosen: Knob | None = None
    for k in candidate_knobs:
        if k.key in differing:
            chosen = k
            break
    note = ""
    if chosen is None and diffs:
        chosen = diffs[0][0]
        note = "no knowledge rule links this dispatch to a knob; this setting differs"
    if chosen is None:
        return KeyVariable(
            "unknown",
            note="no recorded setting differs between the runs"
            + (
                f" (rules point at {', '.join(k.key for k in candidate_knobs)})"
                if candidate_knobs
                else ""
            ),
        )
    key, va, vb = differing[chosen.key]
    kv = KeyVariable(
        kind="knob",
        expr=key,
        values={"a": va, "b": vb},
        knob=chosen,
        note=note,
    )
    for name in sides:
        kv.origins[name] = _knob_origin(chosen, sides, name, va if name == "a" else vb)
    return kv


def _knob_origin(knob: Knob, sides: dict[str, SideInfo], name: str, observed: str | None) -> Origin:
    """Where side `name` sets the knob: its statement in the user's code, else the
    environment it was recorded in, else the library default."""
    side = sides[name]
    origin = find_knob_origin(knob, side.files, observed, side.config)
    if origin is not None:
        return origin
    cfg_a, cfg_b = sides["a"].config, sides["b"].config
    env_keys = [k for k in knob.snapshot_keys if k.startswith("env.")]
    env_diff = next((k for k in env_keys if cfg_a.get(k, "") != cfg_b.get(k, "")), None)
    if env_diff:
        var = env_diff[4:]
        return Origin(
            kind="env",
            variable=var,
            env_var=var,
            value=side.config.get(env_diff, "") or "(unset)",
            note="set in the environment the run was recorded in",
        )
    return Origin(
        kind="global-flag",
        variable=knob.key,
        value=observed,
        library_default=True,
        note="not set in the script (library default or set by a library)",
    )
