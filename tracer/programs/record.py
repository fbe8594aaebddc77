"""Record a workload into a Magneton DB: the orchestration behind `magneton record`.

A recording is a fixed sequence, each step there to prevent a specific failure:

1. `setup()` runs outside everything measured (model construction must not count).
2. The idle baseline is measured before any work, so "above idle" means the workload.
3. `warmup` untraced calls let allocators, thread pools and oneDNN primitive caches
   settle; otherwise the first measured call is systematically the most expensive.
4. The *structure pass* (one call) captures dataflow, values, stacks and call paths.
5. The *timing pass* (`repeat` calls) records only operator windows while the power
   sampler runs; energy is attributed from these windows, never from the structure
   pass, whose instrumentation would inflate every operator.
6. Everything is written to the DB in one bulk load at the end. The DB is opened only
   briefly before the workload (name free? writable? disk space?) and for this write, so
   `runs`/`query` work while a recording runs. A script that raises, exits (`sys.exit`,
   `os._exit`), a Ctrl-C or a SIGTERM leaves earlier runs untouched and the new run
   marked failed with a one-line reason, except that a failed `--replace` keeps the
   earlier run as it was. Both signals are held back while the DB is written, so a load
   is never cut; one that arrived then is reported after the save, as saved.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import gc
import importlib.util
import inspect
import json
import os
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import torch

from magneton.graphdb.store import DBArg, opened
from magneton.model import MagnetonError, Profile, RunInfo, WorkloadError
from magneton.model.run import RETURNED_KEY
from magneton.model.wording import UNRECORDED_THREAD_OPS, unrecorded_threads_warning
from magneton.tracer.capture.config import sha256_file, snapshot
from magneton.tracer.capture.dispatch import (
    ModuleTracker,
    RecorderMode,
    StructureCapture,
    call_profiler,
    run_structure_pass,
)
from magneton.tracer.programs.signals import InterruptedAfterSave as _InterruptedAfterSave
from magneton.tracer.programs.signals import Terminated, defer_sigint
from magneton.tracer.programs.signals import interruptible as _interruptible
from magneton.tracer.timing.passes import (
    MAX_ITERATIONS,
    MIN_SENSOR_UPDATES,
    TimingPass,
    timed_iterations,
)

if TYPE_CHECKING:
    from magneton.graphdb.db import ProfileDB
    from magneton.tracer.energy.session import EnergySession


@dataclass
class RecordOptions:
    warmup: int = 1
    repeat: int = 3
    power: str = "auto"  # auto | nvml | rapl | meter:FILE | model[:PROFILE]
    interval_s: float = 0.005  # power sampler cadence
    replay: bool = False  # re-execute each op in a loop for sensor-resolution energy
    replace: bool = False  # overwrite a run of the same name
    call_paths: bool = True  # capture aten dispatch chains with the profiler
    progress: bool = False
    # more timing iterations until stable (tracer/timing/passes.py); off for the ranks of a job,
    # whose iterations must pair up collective by collective, so every rank runs `repeat`
    adaptive: bool = True


# --------------------------------------------------------------------------------------
# Loading user scripts
# --------------------------------------------------------------------------------------


def load_script(path: str | Path) -> Any:
    """Import SCRIPT as a module (not `__main__`, so its `if __name__ == "__main__"`
    block does not run the workload behind our back)."""
    path = Path(path).resolve()
    if not path.is_file():
        raise MagnetonError(f"no such script: {path}")
    name = "magneton_user_" + "".join(c if c.isalnum() else "_" for c in path.stem)
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise MagnetonError(f"cannot import {path} as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    script_dir = str(path.parent)
    if script_dir not in sys.path:
        sys.path.insert(0, script_dir)
    spec.loader.exec_module(module)
    return module


def _as_args(result: Any) -> tuple:
    if result is None:
        return ()
    return result if isinstance(result, tuple) else (result,)


# --------------------------------------------------------------------------------------
# Sources: parameters, buffers and inputs get names
# --------------------------------------------------------------------------------------


def _walk_objects(obj: Any, label: str, depth: int = 0) -> Iterator[tuple[str, Any]]:
    yield label, obj
    if depth > 3:
        return
    if isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            yield from _walk_objects(v, f"{label}[{i}]", depth + 1)
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield from _walk_objects(v, f"{label}[{k!r}]", depth + 1)


def _roots_and_sources(
    fn: Callable, args: tuple, kwargs: dict, globals_: dict | None
) -> tuple[dict[str, torch.nn.Module], dict[int, tuple[str, str]]]:
    candidates: list[tuple[str, torch.nn.Module]] = []
    inputs: dict[int, tuple[str, str]] = {}
    if isinstance(fn, torch.nn.Module):
        candidates.append(("model", fn))
    bound = getattr(fn, "__self__", None)
    if isinstance(bound, torch.nn.Module):
        candidates.append(("model", bound))
    objs = [(f"args[{i}]", a) for i, a in enumerate(args)]
    objs += [(f"kwargs[{k!r}]", v) for k, v in kwargs.items()]
    # `magneton.record(lambda: model(x))` passes the model by closure or global, not as
    # an argument: without looking there, module paths fell back to class names and every
    # block of a ModuleList shared one. Only names the function's own code uses count,
    # so an unrelated model elsewhere in the caller's module does not become a root.
    code = getattr(fn, "__code__", None)
    if code is not None:
        cells = zip(code.co_freevars, getattr(fn, "__closure__", None) or (), strict=False)
        for var, cell in cells:
            with contextlib.suppress(ValueError):  # an unassigned cell
                objs.append((var, cell.cell_contents))
        if globals_ is None:
            fn_globals = getattr(fn, "__globals__", {})
            objs += [(n, fn_globals[n]) for n in code.co_names if n in fn_globals]
    for label, top in objs:
        for sub_label, o in _walk_objects(top, label):
            if isinstance(o, torch.nn.Module):
                candidates.append((sub_label, o))
            elif isinstance(o, torch.Tensor):
                inputs.setdefault(id(o), ("input", sub_label))
            elif hasattr(o, "items") and hasattr(o, "keys"):  # BatchEncoding and friends
                with contextlib.suppress(Exception):
                    for k, v in o.items():
                        if isinstance(v, torch.Tensor):
                            inputs.setdefault(id(v), ("input", f"{sub_label}[{k!r}]"))
    for name, o in (globals_ or {}).items():
        if isinstance(o, torch.nn.Module) and not name.startswith("_"):
            candidates.append((name, o))
    # Keep outermost modules only; a lone root gets the empty prefix (`h.0.mlp.act`).
    uniq: dict[int, tuple[str, torch.nn.Module]] = {}
    for label, m in candidates:
        uniq.setdefault(id(m), (label, m))
    inner = {id(s) for _, m in uniq.values() for s in m.modules() if s is not m}
    roots_list = [(label, m) for i, (label, m) in uniq.items() if i not in inner]
    if len(roots_list) == 1:
        roots = {"": roots_list[0][1]}
    else:
        roots = {label: m for label, m in roots_list}
    sources: dict[int, tuple[str, str]] = {}
    for prefix, root in roots.items():
        for n, p in root.named_parameters(remove_duplicate=False):
            sources.setdefault(id(p), ("param", ".".join(x for x in (prefix, n) if x)))
        for n, b in root.named_buffers(remove_duplicate=False):
            sources.setdefault(id(b), ("buffer", ".".join(x for x in (prefix, n) if x)))
    sources.update(inputs)
    return roots, sources


# --------------------------------------------------------------------------------------
# Progress
# --------------------------------------------------------------------------------------


class Phases:
    """The recording's progress on stderr: the phase and, for repeated calls, k/n.

    A recording is silent for 20-80 s otherwise. Drawn only on a terminal (rich's live
    display), transient, and off with `-q`, so piped output and the one-line errors
    stay as they are."""

    def __init__(self, enabled: bool):
        self._bar = None
        self._done = 0
        self._total: int | None = None
        if enabled:
            from rich.console import Console

            console = Console(stderr=True)
            if not console.is_terminal:
                return
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

            self._bar = Progress(
                TextColumn("record: {task.description}"),
                BarColumn(),
                TextColumn("{task.fields[count]}"),
                TimeElapsedColumn(),
                console=console,
                transient=True,
                # redrawn by `phase`/`step` only: a 10 Hz refresh thread would take the
                # GIL during the timing pass, whose operator windows are being measured
                auto_refresh=False,
            )
            self._task = self._bar.add_task("starting", total=None, count="")

    def __enter__(self) -> Phases:
        if self._bar is not None:
            self._bar.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.stop()

    def phase(self, description: str, total: int | None = None) -> None:
        self._done, self._total = 0, total
        self._show(description=description, total=total, completed=0)

    def step(self) -> None:
        self._done += 1
        self._show(completed=self._done)

    def _show(self, **fields: Any) -> None:
        if self._bar is None:
            return
        count = f"{self._done}/{self._total}" if self._total else ""
        self._bar.update(self._task, count=count, **fields)
        self._bar.refresh()  # drawn at least once, however short the phase


# --------------------------------------------------------------------------------------
# The recording itself
# --------------------------------------------------------------------------------------


def _entry_code(fn: Callable) -> Any:
    """The code object of the user's entry, where stack walks stop. A decorated entry
    (`@torch.no_grad()`) is the decorator's wrapper, whose code is shared with every
    other function that decorator wraps: stopping at it cut the stack at the first
    decorated library call (transformers' `generate`), losing the user's own frames.
    The function the wrapper wraps (`__wrapped__`, set by functools.wraps) is the entry."""
    target = fn.forward if isinstance(fn, torch.nn.Module) else fn
    target = getattr(target, "__func__", target)
    try:
        target = inspect.unwrap(target)
    except ValueError:  # a __wrapped__ cycle: keep the outermost
        pass
    return getattr(target, "__code__", None)


class _OpCounter(RecorderMode):
    """Counts aten operators; pushed in threads the entry starts (see `_other_threads`)."""

    def __init__(self, counts: list[int]):
        super().__init__()
        self._counts = counts

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self._counts[0] += 1
        return func(*args, **(kwargs or {}))


@contextlib.contextmanager
def _other_threads(counts: list[int]) -> Iterator[None]:
    """Count the operators run by threads started inside the block.

    The capture's dispatch mode is per thread, so operators of worker threads are not
    recorded; without this count they were dropped without a word (2 of 14 operators
    recorded, nothing said). Threads started before the entry (a pool built in
    `setup()`) are not seen here; the structure pass's profiler, which watches every
    thread, counts those (`StructureResult.other_thread_ops`) when call paths are on."""
    real_run = threading.Thread.run

    def counted_run(thread: threading.Thread) -> None:
        with _OpCounter(counts):
            real_run(thread)

    setattr(threading.Thread, "run", counted_run)  # noqa: B010 (mypy refuses `Thread.run =`)
    try:
        yield
    finally:
        setattr(threading.Thread, "run", real_run)  # noqa: B010


def note_unrecorded_threads(profile: Profile, count: int) -> None:
    """Keep in the run's config how many operator calls other threads ran unrecorded
    (`unrecorded_thread_warning` words it for `record` and `report`). The caller passes
    the larger of the profiler's count (it sees every thread, a pool built before the
    recording too) and `_other_threads`' (it works without the profiler)."""
    if count:
        profile.config[UNRECORDED_THREAD_OPS] = str(count)


def no_operator_error(what: str, returned: Any = None, other_threads: int = 0) -> MagnetonError:
    """The one-line error for a recording in which the traced thread ran no PyTorch
    operator. Without it the empty run reached the energy attribution, whose numpy
    reshape failed, and the user read "main.py raised ValueError: cannot reshape array
    of size 0" -- Magneton's error blamed on the script."""
    import inspect

    if inspect.isgenerator(returned) or inspect.isasyncgen(returned):
        why = (
            f"{what} returned a generator that was never iterated, so it ran no PyTorch "
            "operator (run the work in the entry itself, e.g. consume the generator)"
        )
    elif inspect.iscoroutine(returned):
        returned.close()  # never awaited: close it so Python does not warn at exit
        why = (
            f"{what} returned a coroutine that was never awaited, so it ran no PyTorch "
            "operator (call asyncio.run(...) in the entry)"
        )
    else:
        why = f"{what} ran no PyTorch operator"
    if other_threads:
        why += (
            f"; {other_threads} operator call(s) ran in other threads, which are not "
            "recorded (Magneton records the thread that calls the entry)"
        )
    return MagnetonError(f"{why}: nothing to record")


def unrecorded_thread_warning(profile: Profile) -> str:
    """The warning for operators run outside the recorded thread ('' when none)."""
    return unrecorded_threads_warning(profile.config)


def record_callable(
    fn: Callable,
    args: tuple = (),
    kwargs: dict | None = None,
    *,
    run: str,
    db: DBArg | None = None,
    options: RecordOptions | None = None,
    script: str = "",
    entry: str = "",
    setup: str = "",
    globals_: dict | None = None,
    phases: Phases | None = None,
) -> Profile:
    """Record `fn(*args, **kwargs)` as run `run`; store it in `db` (a path or an open
    ProfileDB) when given. Returns the Profile either way."""
    opts = options or RecordOptions()
    phases = phases or Phases(enabled=False)
    kwargs = kwargs or {}
    from magneton.tracer.energy.session import EnergySession

    def call():
        return fn(*args, **kwargs)

    info = _callable_run_info(fn, run, script, entry, setup, opts)
    session = EnergySession.create(
        opts.power, interval_s=opts.interval_s, device=_device_hint(args)
    )
    phases.phase("idle power baseline")
    session.measure_idle()
    phases.phase("warmup (untraced)", opts.warmup)
    for _ in range(opts.warmup):
        call()
        phases.step()

    phases.phase("structure pass (dataflow, values, call paths)")
    profile = _structure_profile(fn, args, kwargs, call, info, opts, script, globals_)
    info.device = "cuda" if any(op.device.startswith("cuda") for op in profile.ops) else "cpu"
    tp = _timing_pass(call, session, opts, phases, sync=info.device == "cuda")
    phases.phase("attributing energy")
    iterations, walls = tp.iterations, tp.walls_s
    session.timing = tp
    info.repeat = len(walls)  # the timing pass chose how many (tracer/timing/passes.py)
    info.time_s = sum(walls) / len(walls)
    from magneton.tracer.timing.alignment import price_timed_units

    price_timed_units(profile, session, iterations, tp.cpu_windows)
    if opts.replay and info.status == "ok":
        from magneton.tracer.energy.replay import replay_ops

        replay_ops(call, profile, session, progress=opts.progress)
    if db is not None:
        phases.phase("writing to the DB")
        save(profile, db, replace=opts.replace)
    return profile


def _callable_run_info(
    fn: Callable, run: str, script: str, entry: str, setup: str, opts: RecordOptions
) -> RunInfo:
    """The run's identity before anything is measured (the rank from torchrun's env)."""
    info = RunInfo(
        name=run,
        script=script,
        script_sha256=sha256_file(script) if script else "",
        entry=entry or getattr(fn, "__qualname__", type(fn).__name__),
        setup=setup,
        started_at=_dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        warmup=opts.warmup,
        repeat=opts.repeat,
        host=socket.gethostname(),
    )
    rank = os.environ.get("RANK")
    if rank is not None and rank.isdigit():
        info.rank = int(rank)
        info.world_size = int(os.environ.get("WORLD_SIZE", "1"))
    return info


def _structure_profile(
    fn: Callable,
    args: tuple,
    kwargs: dict,
    call: Callable[[], Any],
    info: RunInfo,
    opts: RecordOptions,
    script: str,
    globals_: dict | None,
) -> Profile:
    """The structure pass (dataflow, values, call paths) as a Profile without timings."""
    roots, sources = _roots_and_sources(fn, args, kwargs, globals_)
    capture = StructureCapture(ModuleTracker(roots), sources=sources, stop_code=_entry_code(fn))
    elsewhere = [0]
    with _other_threads(elsewhere):
        out, structure = run_structure_pass(call, capture, profile_calls=opts.call_paths)
    unrecorded = max(structure.other_thread_ops, elsewhere[0])
    if not structure.ops:
        raise no_operator_error(f"{info.entry}()", out, unrecorded)
    profile = Profile(
        run=info,
        ops=structure.ops,
        tensors=structure.tensors,
        modules=structure.modules,
        frames=structure.frames,
        kernels=structure.kernels,
        config=snapshot(script),
    )
    returned = capture.recorded(out)
    if returned:  # what the entry hands back is what advise judges a variant by
        profile.config[RETURNED_KEY] = json.dumps(returned)
    if structure.kernel_s:
        profile.energy.kernel_s = [structure.kernel_s.get(op.idx, 0.0) for op in structure.ops]
    note_unrecorded_threads(profile, unrecorded)
    return profile


def _timing_pass(
    call: Callable[[], Any],
    session: EnergySession,
    opts: RecordOptions,
    phases: Phases,
    sync: bool,
) -> TimingPass:
    """The timed iterations, with the power sampler on only while they run."""
    session.start()
    try:
        phases.phase("timing pass (power sampler on)", opts.repeat)
        return timed_iterations(
            call,
            opts.repeat,
            sync,
            cpu_clock=session.prices_cpu_time(sync),
            max_iterations=MAX_ITERATIONS if opts.adaptive else opts.repeat,
            on_iteration=phases.step,
            # a sensor's figure needs many of its updates (NVML's: every ~100 ms); not for
            # a job's ranks, which must time the same count to pair their collectives
            min_duration_s=(
                MIN_SENSOR_UPDATES * session.update_period_s
                if session.live and opts.adaptive
                else 0.0
            ),
        )
    finally:
        session.stop()


def _device_hint(args: tuple) -> str:
    for _, o in _walk_objects(args, "args"):
        if isinstance(o, torch.Tensor):
            return str(o.device)
        if isinstance(o, torch.nn.Module):
            p = next(o.parameters(), None)
            if p is not None:
                return str(p.device)
    return "cpu"


# --------------------------------------------------------------------------------------
# DB writes (SIGINT deferred) and failure records
# --------------------------------------------------------------------------------------


class WorkloadExited(SystemExit):
    """`os._exit(n)` called by the workload in the recording process (see `_no_exit`)."""


@contextlib.contextmanager
def _no_exit() -> Iterator[None]:
    """While the workload runs, `os._exit` in this process raises `WorkloadExited`:
    otherwise a workload calling it ended `magneton record` with its exit code, no
    message and nothing stored. Forked children (DataLoader workers, multiprocessing)
    exit through the real `os._exit`. The workload's changes to the process that
    Magneton's own ending relies on are undone when it ends: the working directory (a
    script that `os.chdir`s at import put a relative `--db` somewhere else), the
    standard streams (one that set `sys.stdout = None` turned "recorded run ..." into a
    traceback after the run was stored) and `sys.path` (a `secrets.py` beside the script
    shadowed the standard module Magneton's save imports)."""
    real, pid = os._exit, os.getpid()
    cwd, streams, path = os.getcwd(), (sys.stdout, sys.stderr), list(sys.path)

    def guarded(status: int) -> NoReturn:  # os._exit's own signature
        if os.getpid() != pid:
            real(status)
        raise WorkloadExited(status)

    os._exit = guarded
    try:
        yield
    finally:
        os._exit = real
        with contextlib.suppress(OSError):
            os.chdir(cwd)
        sys.stdout, sys.stderr = streams
        sys.path[:] = path


def _opened(db: DBArg) -> contextlib.AbstractContextManager[ProfileDB]:
    """The DB to save into: a handle as given, or a path opened for writing, which waits
    while another process holds the DB (graphdb/lock.py: the recording is never thrown
    away because another command was reading or saving a second earlier)."""
    return opened(db)


def save(profile: Profile, db: DBArg, replace: bool = False) -> None:
    """Write the run. A failure of the write is the DB's, said as such: an engine error
    that escaped here was reported as "SCRIPT raised RuntimeError: IO exception ...",
    blaming the user's script for Magneton's own write."""
    where = db if isinstance(db, (str, os.PathLike)) else getattr(db, "file", "the DB")
    try:
        with _own_imports(), defer_sigint(), _opened(db) as handle:
            handle.save_profile(profile, replace=replace)
    except MagnetonError:
        raise
    except Exception as e:
        if os.environ.get("MAGNETON_DEBUG"):
            traceback.print_exc()
        msg = " ".join(str(e).split()) or "(no message)"
        raise MagnetonError(
            f"writing run '{profile.run.name}' to the Magneton DB {where} failed "
            f"({type(e).__name__}: {msg}; MAGNETON_DEBUG=1 shows the traceback)",
            exit_code=1,
        ) from None


@contextlib.contextmanager
def _own_imports() -> Iterator[None]:
    """While the run is saved, `sys.path` holds only the installation's directories:
    the save imports modules lazily (the engine's client imports pandas, which imports
    numpy.random, which imports `secrets`), and a `secrets.py` in the script's folder or
    the working directory then ran in its place and lost the run after the workload had
    run. The user's directories are back when the save ends."""
    package = sys.modules["magneton"].__file__ or ""  # where Magneton itself is installed
    own = (sys.prefix, sys.base_prefix, sys.exec_prefix, str(Path(package).parents[1]))
    saved = list(sys.path)
    sys.path[:] = [p for p in saved if p and os.path.abspath(p).startswith(own)]
    try:
        yield
    finally:
        sys.path[:] = saved


def _user_location(exc: BaseException, script: str) -> str:
    """file:line of the innermost frame in the user's script (where to look first)."""
    tb = traceback.extract_tb(exc.__traceback__)
    for fr in reversed(tb):
        if script and os.path.abspath(fr.filename) == script:
            return f" at {os.path.basename(fr.filename)}:{fr.lineno}"
    return ""


def check_run_name(run: str) -> None:
    """Refuse an empty or blank run name before anything runs (it used to be refused
    only by the DB write, after the whole recording)."""
    if not run.strip():
        raise MagnetonError(f"--run needs a non-blank name, got {run!r}")


def _exit_reason(
    e: SystemExit, script: str, who: str = "the workload", before: str = "before finishing"
) -> str:
    call = f"os._exit({e.code})" if isinstance(e, WorkloadExited) else f"sys.exit({e.code!r})"
    return f"{who} called {call}{_user_location(e, script)}" + (f" {before}" if before else "")


@contextlib.contextmanager
def own_objects_frozen() -> Iterator[None]:
    """While recording, leave every object alive before it (torch's and Magneton's)
    out of the cyclic collector's walks: the timing pass's full collection walked them,
    60-70 ms. Entered before the recorded code is imported, so its objects stay
    collectable; left as it was entered, so a process that records in-process (a test,
    `record_script` called from Python) gets its objects back for collection. A caller
    that froze objects itself keeps its own freeze untouched."""
    if gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def record_script(
    script: str | Path,
    *,
    db: DBArg,
    run: str,
    entry: str = "main",
    setup: str = "setup",
    options: RecordOptions | None = None,
) -> Profile:
    """What `magneton record` does. Raises MagnetonError (one line) on any failure, after
    marking the run failed in the DB (a failed `--replace` keeps the earlier run).

    The DB is opened twice, briefly: before the workload (name taken? DB writable?) and
    for the final write, so other commands can read it while the workload runs.
    """
    opts = options or RecordOptions()
    check_run_name(run)
    script = str(Path(script).resolve())
    if not os.path.isfile(script):
        raise MagnetonError(f"no such script: {script}")
    from magneton.tracer.frameworks import detect_framework, require

    framework = detect_framework(script)
    if framework != "torch":
        require(framework)  # before anything is opened: one line naming the extra
    _check_can_store(db, run, opts.replace)
    info = RunInfo(
        name=run,
        script=script,
        entry=entry,
        setup=setup,
        started_at=_dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        status="failed",
    )
    old_argv = sys.argv
    sys.argv = [script]
    try:
        with own_objects_frozen(), _interruptible(), _no_exit(), Phases(opts.progress) as phases:
            phases.phase(f"importing {os.path.basename(script)}")
            module, entry_fn, setup_fn = _load_entry(script, entry, setup)
            phases.phase(f"{setup}() (not measured)")
            args = _as_args(setup_fn()) if callable(setup_fn) else ()
            if framework != "torch":
                return _record_framework(
                    framework, entry_fn, args, run, db, opts, script, entry, setup_fn, phases
                )
            return record_callable(
                entry_fn,
                args,
                run=run,
                db=db,
                options=opts,
                script=script,
                entry=entry,
                setup=setup if callable(setup_fn) else "",
                globals_=vars(module),
                phases=phases,
            )
    except _InterruptedAfterSave as e:
        raise MagnetonError(f"{e}: run '{run}' is saved", exit_code=e.exit_code) from None
    except MagnetonError as e:
        info.error = str(e)
        raise MagnetonError(f"{e}; {_record_failure(info, db, opts.replace)}") from None
    except KeyboardInterrupt as e:
        how = "terminated (SIGTERM)" if isinstance(e, Terminated) else "interrupted (Ctrl-C)"
        info.error = f"{how} while recording"
        raise MagnetonError(
            f"{how}; {_record_failure(info, db, opts.replace)}",
            exit_code=143 if isinstance(e, Terminated) else 130,
        ) from None
    except SystemExit as e:
        info.error = _exit_reason(e, script)
        raise WorkloadError(f"{info.error}; {_record_failure(info, db, opts.replace)}") from None
    except Exception as e:
        raise _workload_raised(e, script, info, db, opts.replace) from None
    finally:
        sys.argv = old_argv


def _check_can_store(db: DBArg, run: str, replace: bool) -> None:
    """A writable open before the workload runs: a taken name, a read-only or full DB
    fails now, not after the workload."""
    with _opened(db) as handle:
        if handle.has_run(run) and not replace:
            raise MagnetonError(
                f"run '{run}' already exists in the DB; pick another --run name or pass --replace"
            )
        from magneton.graphdb.db import check_space

        check_space(handle.file, rewrite=replace and handle.has_run(run))


def _load_entry(script: str, entry: str, setup: str) -> tuple[Any, Callable, Any]:
    """Import the script: (its module, its entry function, its setup function or None)."""
    module = load_script(script)
    entry_fn = getattr(module, entry, None)
    if not callable(entry_fn):
        raise MagnetonError(f"{script} has no function '{entry}' (use --entry NAME)")
    setup_fn = getattr(module, setup, None) if setup else None
    if setup and setup_fn is None and setup != "setup":
        raise MagnetonError(f"{script} has no function '{setup}' (use --setup NAME)")
    return module, entry_fn, setup_fn


def _record_framework(
    framework: str,
    entry_fn: Callable,
    args: tuple,
    run: str,
    db: Any,
    opts: RecordOptions,
    script: str,
    entry: str,
    setup_fn: Any,
    phases: Phases,
) -> Profile:
    """Record a JAX or TensorFlow entry (tracer/frameworks/) in place of the PyTorch path."""
    from magneton.tracer.frameworks import program_for
    from magneton.tracer.frameworks.base import record_traced

    program = program_for(framework, entry_fn, args)
    profile = record_traced(
        program,
        run=run,
        options=opts,
        script=script,
        entry=entry,
        setup=getattr(setup_fn, "__name__", "") if callable(setup_fn) else "",
        phases=phases,
    )
    if db is not None:
        phases.phase("writing to the DB")
        save(profile, db, replace=opts.replace)
    return profile


def _workload_raised(
    e: Exception, script: str, info: RunInfo, db: DBArg, replace: bool
) -> MagnetonError:
    """The one-line error for a workload that raised, after marking its run failed."""
    if os.environ.get("MAGNETON_DEBUG"):
        traceback.print_exc()
    msg = " ".join(str(e).split()) or "(no message)"
    info.error = f"{type(e).__name__}{_user_location(e, script)}: {msg}"
    return WorkloadError(
        f"{os.path.basename(script)} raised {info.error}; "
        f"{_record_failure(info, db, replace)} (MAGNETON_DEBUG=1 shows the traceback)"
    )


def _record_failure(info: RunInfo, db: DBArg, replace: bool) -> str:
    """What a failed recording left in the DB, for the user's message: nothing (a failed
    run is not stored: it would only crowd `runs`; its error is the message), and with
    `--replace` the earlier run of that name unchanged."""
    if replace:
        return f"nothing stored (with --replace: a run '{info.name}' stored before is kept)"
    return "nothing stored, earlier runs intact"


# --------------------------------------------------------------------------------------
# Python API: record a block
# --------------------------------------------------------------------------------------


@contextlib.contextmanager
def record_block(
    run: str, db: DBArg | None = None, *, power: str = "auto", call_paths: bool = True
) -> Iterator[Profile]:
    """Record the operators of a `with` block (one pass: a block cannot be re-run).

    Timing therefore includes the structure capture's overhead; the run is marked
    `timing="combined"` so reports and diffs know its times are inflated.
    """
    from magneton.tracer.energy.session import EnergySession

    info = RunInfo(
        name=run,
        entry="<block>",
        started_at=_dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        timing="combined",
        host=socket.gethostname(),
    )
    profile = Profile(run=info)
    session = EnergySession.create(power)
    session.measure_idle()
    caller = sys._getframe(2)  # the frame running the `with` statement
    roots, sources = _roots_and_sources(lambda: None, (), {}, caller.f_globals)
    capture = StructureCapture(
        ModuleTracker(roots), sources=sources, stop_code=caller.f_code, measured=True
    )
    t0 = time.perf_counter_ns()
    session.start()
    prof = None
    profiler = call_profiler() if call_paths else contextlib.nullcontext()
    try:
        with profiler as prof, capture.modules, capture:
            yield profile
    finally:
        try:
            session.stop()
        finally:
            res = capture.finish(prof)  # before the program runs on
    info.time_s = (time.perf_counter_ns() - t0) / 1e9
    for op in res.ops:
        op.windows_ns = [(op.start_ns, op.end_ns)]
    profile.ops, profile.tensors, profile.frames = res.ops, res.tensors, res.frames
    profile.kernels, profile.modules = res.kernels, res.modules
    profile.config = snapshot()
    info.device = "cuda" if any(op.device.startswith("cuda") for op in profile.ops) else "cpu"
    session.attribute(profile)
    info.status = "ok"
    if db is not None:
        save(profile, db)
