"""The recording sequence shared by the JAX and TensorFlow recorders, and what they share.

A compiled framework fuses its program: XLA (JAX's `jit`, TensorFlow's `tf.function` with
XLA or Grappler) runs the whole function as a few fused kernels, so there is no operator
boundary to time while the program runs as the user wrote it. A recording therefore has
two costs, kept apart and both stored:

* **Per-operator windows from an unfused replay.** The program's graph (a jaxpr, a
  `tf.function`'s concrete graph) is replayed operator by operator, each one run eagerly
  and waited for, on the same inputs; its windows are what the energy attribution
  (tracer/energy/session.py) charges, exactly as the PyTorch timing pass's windows are. This is
  the only way to see one operator's cost; it is labelled "replayed, unfused"
  (`energy.windows` in the run's config), and its sum is the run's energy, so per-operator
  energies add up to the run's as for PyTorch.
* **The program as it runs** (`fused_*` in the config): the entry called as written
  (jitted, fused), timed as a whole. That is the run's real cost; `report` says how far
  the unfused sum is from it (`unfused_over_fused`). Under the power model the fused
  call is priced on its process CPU time plus the same FLOPs as the replay and the bytes
  of the program's inputs and outputs only (fusion keeps intermediates out of memory);
  with a sensor it is the sensor's energy over the fused calls.

The structure pass (`TracedProgram.structure`) and the timing pass (`replay`) walk the
same graph with the same control-flow decisions, so their operator sequences agree; the
driver checks the names and falls back to the structure pass's windows ("combined") if
they do not, as the PyTorch recorder does.

Tensors carry the summaries of tracer/capture/invariants.py, computed from the framework's arrays
through NumPy (`summarize_array`), so a JAX tensor and a PyTorch tensor with the same
values get the same summary and match.
"""

from __future__ import annotations

import ast
import datetime as _dt
import gc
import importlib.util
import os
import socket
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from magneton.model import (
    FrameRecord,
    KernelRecord,
    MagnetonError,
    ModuleRecord,
    OpRecord,
    Profile,
    RunInfo,
    TensorRecord,
)
from magneton.model.frameworks import BY_KEY, FRAMEWORKS, framework_name


def detect_framework(script: str | Path) -> str:
    """The key of the framework SCRIPT's imports name (anywhere in it): the first entry
    of the registry (model/frameworks.py) whose import names it uses, else 'torch'.

    Only the imports are read (no code runs). A script that imports torch is a PyTorch
    program whatever else it imports (it may use NumPy-producing helpers of another
    framework); one that imports JAX or TensorFlow and not torch is recorded by that
    framework's recorder (JAX where it imports both: its names are checked first)."""
    try:
        tree = ast.parse(Path(script).read_text(encoding="utf-8", errors="replace"))
    except (OSError, SyntaxError):
        return "torch"  # let the import report the problem as it always has
    roots: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            roots.add(node.module.split(".")[0])
    for fw in FRAMEWORKS:
        if roots & set(fw.imports):
            return fw.key
    return "torch"


def require(framework: str) -> None:
    """Raise the one-line error saying what to install when FRAMEWORK cannot be imported."""
    fw = BY_KEY[framework]
    if importlib.util.find_spec(fw.module) is None:
        raise MagnetonError(
            f"this script is a {fw.name} program and {fw.module} is not installed: "
            f'pip install "magneton[{fw.extra}]"'
        )


# --------------------------------------------------------------------------------------
# What a framework's recorder provides
# --------------------------------------------------------------------------------------


@dataclass
class Structure:
    """The structure pass's result (the same fields `capture.StructureResult` has)."""

    ops: list[OpRecord] = field(default_factory=list)
    tensors: list[TensorRecord] = field(default_factory=list)
    frames: list[FrameRecord] = field(default_factory=list)
    kernels: list[KernelRecord] = field(default_factory=list)
    modules: list[ModuleRecord] = field(default_factory=list)


# One replayed operator: (name, wall start ns, wall end ns, cpu start ns, cpu end ns)
Window = tuple[str, int, int, int, int]


class TracedProgram(ABC):
    """A framework's program, as the recording sequence (`record_traced`) drives it."""

    framework: str = ""

    @abstractmethod
    def call(self) -> Any:
        """Run the entry as the user wrote it (compiled, fused), waiting for its result."""

    @abstractmethod
    def structure(self) -> Structure:
        """The structure pass: operators with inputs, outputs, values, module paths and
        call paths (its timestamps are not used for energy)."""

    @abstractmethod
    def replay(self) -> list[Window]:
        """One unfused replay of the program, operator by operator, each one waited for."""

    def config(self) -> dict[str, str]:
        """Framework settings worth diffing (versions, precision flags)."""
        return {}

    def boundary_bytes(self) -> float:
        """Bytes of the program's inputs and outputs (what a fused program must move)."""
        return 0.0


# --------------------------------------------------------------------------------------
# Shared helpers for recorders
# --------------------------------------------------------------------------------------


def summarize_array(a: Any) -> dict:
    """The layout-invariant summary (tracer/capture/invariants.py) of an array-like, as for a
    PyTorch tensor of the same values. bfloat16 and other NumPy extension types that
    torch cannot wrap are widened to float32 first (the values are unchanged)."""
    import torch

    from magneton.tracer.capture.invariants import summarize

    arr = np.asarray(a)
    if arr.dtype.kind not in "biufc":
        arr = arr.astype(np.float32)
    if arr.dtype.kind == "c" and arr.dtype.itemsize not in (8, 16):
        arr = arr.astype(np.complex64)
    if not arr.flags.writeable:  # a JAX/TF buffer: torch warns on read-only memory
        arr = arr.copy()
    try:
        t = torch.from_numpy(np.ascontiguousarray(arr))
    except TypeError:
        t = torch.from_numpy(np.ascontiguousarray(arr.astype(np.float32)))
    return summarize(t)


def dtype_name(dtype: Any) -> str:
    """A dtype as PyTorch's records spell it ("float32", "int64", "bool")."""
    name = str(getattr(dtype, "name", dtype))
    return {"bool_": "bool"}.get(name, name)


class FrameTable:
    """Deduplicated `FrameRecord`s of one run, by (file, line, function)."""

    def __init__(self) -> None:
        self.records: list[FrameRecord] = []
        self._index: dict[tuple[str, int, str], int] = {}

    def add(self, file: str, line: int, function: str) -> int:
        key = (file, line, function)
        idx = self._index.get(key)
        if idx is None:
            idx = self._index[key] = len(self.records)
            self.records.append(FrameRecord(idx=idx, file=file, line=line, function=function))
        return idx


class KernelTable:
    def __init__(self) -> None:
        self.records: list[KernelRecord] = []
        self._index: dict[tuple[str, str], int] = {}

    def add(self, name: str, device: str) -> int:
        key = (name, device)
        idx = self._index.get(key)
        if idx is None:
            idx = self._index[key] = len(self.records)
            self.records.append(KernelRecord(idx=idx, name=name, device=device))
        return idx


def module_records(ops: Iterable[OpRecord], kinds: dict[str, str]) -> list[ModuleRecord]:
    """Module records for every path the ops ran in and its prefixes ("" is the root),
    parents linked, and each op's `module_idx` set. `kinds` names a path's type (`jit`,
    `scan`, a named scope)."""
    ops = list(ops)
    names: set[str] = {""}
    for op in ops:
        parts = op.module.split(".") if op.module else []
        for k in range(1, len(parts) + 1):
            names.add(".".join(parts[:k]))
    out: list[ModuleRecord] = []
    index: dict[str, int] = {}
    for name in sorted(names, key=lambda n: (n.count(".") + bool(n), n)):
        parent = index.get(name.rsplit(".", 1)[0] if "." in name else "", -1) if name else -1
        index[name] = len(out)
        out.append(
            ModuleRecord(idx=len(out), name=name, type=kinds.get(name, "scope"), parent=parent)
        )
    for op in ops:
        op.module_idx = index.get(op.module, -1)
    return out


def path_name(parts: Iterable[str]) -> str:
    """A module path from name-stack segments: dots inside a segment would read as
    nesting in a module path (`h.0.mlp`), so they become underscores."""
    return ".".join(p.replace(".", "_") for p in parts if p)


# --------------------------------------------------------------------------------------
# The recording sequence
# --------------------------------------------------------------------------------------


@dataclass
class ReplayPass:
    """The unfused replays: per iteration, its windows; as `timing.TimingPass` has them."""

    iterations: list[list[tuple[str, int, int]]] = field(default_factory=list)
    cpu_windows: list[list[tuple[int, int]]] = field(default_factory=list)
    walls_s: list[float] = field(default_factory=list)
    cost_s: list[float] = field(default_factory=list)
    stop_reason: str = ""


@dataclass
class FusedTiming:
    calls: int
    wall_s: float  # mean wall seconds of one call as it runs
    cpu_s: float  # mean process CPU seconds of one call
    energy_j: float  # per call
    stop_reason: str = ""


def _until_stable(
    once: Callable[[], tuple[float, float]], floor: int, cap: int, budget_s: float
) -> tuple[list[float], list[float], str]:
    """Run `once` (returns wall s, cost s) at least `floor` times, then until the cost's
    95% half-width is within `timing.TARGET_REL`, `cap` runs or `budget_s` (the timing
    pass's stop rule, tracer/timing/passes.py)."""
    from magneton.tracer.timing.passes import MIN_FOR_CI, TARGET_REL, relative_halfwidth

    walls: list[float] = []
    costs: list[float] = []
    t0 = time.perf_counter()
    gc_was = gc.isenabled()
    gc.collect()
    try:
        while True:
            gc.collect(0)
            gc.disable()
            w, c = once()
            if gc_was:
                gc.enable()
            walls.append(w)
            costs.append(c)
            n = len(walls)
            if n < floor:
                continue
            if n >= MIN_FOR_CI and relative_halfwidth(costs) <= TARGET_REL:
                return walls, costs, "stable"
            if n >= cap:
                return walls, costs, "max-iterations"
            if time.perf_counter() - t0 > budget_s and n >= max(floor, 2):
                return walls, costs, "budget"
    finally:
        if gc_was:
            gc.enable()


def _end_to_end(cpu: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """CPU windows laid end to end. Between two replayed operators the CPU runs the
    replay's own walker, not the program: priced as interpreter time (tracer/energy/session.py
    charges CPU time between operators to the next one's Python) it became a finding of
    "Python in main" that the program does not have."""
    out: list[tuple[int, int]] = []
    t = cpu[0][0] if cpu else 0
    for a, b in cpu:
        out.append((t, t + (b - a)))
        t += b - a
    return out


def _replay_pass(
    program: TracedProgram, floor: int, cap: int, cpu_clock: bool, step: Callable[[], None]
) -> ReplayPass:
    from magneton.tracer.timing.passes import BUDGET_S

    rp = ReplayPass()

    def once() -> tuple[float, float]:
        w0, c0 = time.perf_counter_ns(), time.process_time_ns()
        wins = program.replay()
        w1, c1 = time.perf_counter_ns(), time.process_time_ns()
        rp.iterations.append([(n, a, b) for n, a, b, _, _ in wins])
        rp.cpu_windows.append(_end_to_end([(ca, cb) for _, _, _, ca, cb in wins]))
        step()
        wall = (w1 - w0) / 1e9
        return wall, (c1 - c0) / 1e9 if cpu_clock else wall

    rp.walls_s, rp.cost_s, rp.stop_reason = _until_stable(once, floor, cap, BUDGET_S)
    if not cpu_clock:
        rp.cpu_windows = []
    return rp


def _fused_timing(
    program: TracedProgram, session: Any, profile: Profile, floor: int
) -> FusedTiming:
    """Time the program as it runs (see module docstring for how it is priced): the
    timing pass's stop rule, within a second (a fused call is short)."""
    from magneton.tracer.energy.power.model import dominant_dtype
    from magneton.tracer.timing.passes import MAX_ITERATIONS

    def once() -> tuple[float, float]:
        w0, c0 = time.perf_counter_ns(), time.process_time_ns()
        program.call()
        return (time.perf_counter_ns() - w0) / 1e9, (time.process_time_ns() - c0) / 1e9

    live = session.kind != "model"
    if live:
        session.start()
    a_ns = time.perf_counter_ns()
    try:
        walls, cpus, reason = _until_stable(once, max(3, floor), MAX_ITERATIONS, 1.0)
    finally:
        b_ns = time.perf_counter_ns()
        if live:
            session.stop()
    n = len(walls)
    if live:
        try:
            energy = session.window_energy(a_ns, b_ns) / n
        except MagnetonError:
            energy = float("nan")
    else:
        m = session.model
        flops_j = sum(op.flops * m.flop_pj(dominant_dtype(op)) for op in profile.ops) * 1e-12
        bytes_j = program.boundary_bytes() * m.e_byte_pj * 1e-12
        # the least CPU time of the calls: another process only ever adds to it
        energy = m.p_static_w * min(cpus) + flops_j + bytes_j
    return FusedTiming(n, sum(walls) / n, sum(cpus) / n, energy, reason)


def record_traced(
    program: TracedProgram,
    *,
    run: str,
    options: Any,
    script: str,
    entry: str,
    setup: str,
    phases: Any,
) -> Profile:
    """Record PROGRAM as run RUN (the sequence of `record.record_callable`, with the unfused
    replay as its timing pass and the fused program timed after it); the caller saves it."""
    from magneton.tracer.capture.config import sha256_file, snapshot
    from magneton.tracer.energy.session import EnergySession
    from magneton.tracer.timing.alignment import price_timed_units
    from magneton.tracer.timing.passes import MAX_ITERATIONS

    opts = options
    info = RunInfo(
        name=run,
        script=script,
        script_sha256=sha256_file(script) if script else "",
        entry=entry,
        setup=setup,
        started_at=_dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        warmup=opts.warmup,
        repeat=opts.repeat,
        host=socket.gethostname(),
    )
    session = EnergySession.create(opts.power, interval_s=opts.interval_s, device="cpu")
    phases.phase("idle power baseline")
    session.measure_idle()
    phases.phase("warmup (compiles the program)", max(1, opts.warmup))
    for _ in range(max(1, opts.warmup)):  # the first call compiles: never measured
        program.call()
        phases.step()

    phases.phase(f"structure pass ({program.framework} graph, values, call paths)")
    t0 = time.perf_counter()
    st = program.structure()
    structure_s = time.perf_counter() - t0
    if not st.ops:
        raise MagnetonError(
            f"{entry}() ran no {framework_name(program.framework)} operation: nothing to record"
        )
    profile = Profile(
        run=info,
        ops=st.ops,
        tensors=st.tensors,
        modules=st.modules,
        frames=st.frames,
        kernels=st.kernels,
        # the same settings snapshot a PyTorch run has (env, device, script hash, torch's
        # flags as this process has them): a diff against a PyTorch run compares settings
        # both sides have, and re-runs get the recorded environment
        config=snapshot(script),
    )
    cpu_clock = session.prices_cpu_time(sync=False)
    session.start()
    try:
        phases.phase("unfused replay (power sampler on)", opts.repeat)
        rp = _replay_pass(
            program,
            opts.repeat,
            MAX_ITERATIONS if opts.adaptive else opts.repeat,
            cpu_clock,
            phases.step,
        )
    finally:
        session.stop()
    phases.phase("attributing energy")
    session.timing = rp  # type: ignore[assignment]  # a TimingPass's fields, by duck typing
    info.repeat = len(rp.walls_s)
    info.time_s = sum(rp.walls_s) / len(rp.walls_s)
    price_timed_units(profile, session, rp.iterations, rp.cpu_windows)
    if info.status != "ok":
        return profile

    phases.phase("the program as it runs (fused)")
    fused = _fused_timing(program, session, profile, opts.repeat)
    cfg = profile.config
    cfg.update(program.config())
    cfg["framework"] = program.framework
    cfg["energy.windows"] = "replayed, unfused (one operator at a time, each waited for)"
    cfg["fused.calls"] = str(fused.calls)
    cfg["fused.time_s"] = repr(fused.wall_s)
    cfg["fused.cpu_s"] = repr(fused.cpu_s)
    cfg["fused.energy_j"] = repr(fused.energy_j)
    cfg["fused.energy_method"] = (
        f"{session.method} (the program as it runs, timed as a whole)"
        if session.kind != "model"
        else "estimated (fused CPU time; replay's FLOPs; program input/output bytes)"
    )
    if fused.energy_j > 0 and fused.energy_j == fused.energy_j:
        cfg["fused.unfused_over_fused"] = repr(info.energy_j / fused.energy_j)
    if fused.wall_s > 0:
        cfg["overhead.structure_over_fused"] = repr(structure_s / fused.wall_s)
        cfg["overhead.replay_over_fused"] = repr(info.time_s / fused.wall_s)
    info.status = "ok"
    return profile


def fused_line(profile: Profile) -> str:
    """One line for `report`: the fused program's cost against the unfused replay's sum
    ('' for a PyTorch run)."""
    cfg = profile.config
    if "fused.energy_j" not in cfg:
        return ""
    try:
        fused_j = float(cfg["fused.energy_j"])
        fused_s = float(cfg["fused.time_s"])
    except ValueError:
        return ""
    ratio = cfg.get("fused.unfused_over_fused")
    how = f"{float(ratio):.2f}x the fused total" if ratio else "fused total unknown"
    name = framework_name(cfg.get("framework", ""))
    return (
        f"{name} program as it runs (fused, timed as a whole): {fused_j:.4g} J/call, "
        f"{fused_s * 1e3:.3g} ms/call; operator energies are from an unfused replay, their "
        f"sum {profile.run.energy_j:.4g} J is {how}"
    )


def user_dirs() -> tuple[str, ...]:
    """Magneton's own package folders: frames from there are never the user's."""
    out = []
    for name in ("magneton", "magneton.tracer", "magneton.graphdb"):
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.submodule_search_locations:
            out.append(os.path.abspath(list(spec.submodule_search_locations)[0]) + os.sep)
    return tuple(out)
