"""Record a window of an unmodified program: `magneton record ... -- python train.py ARGS`.

The program runs as `__main__` (runpy) with its own `sys.argv`, in the recording process,
and Magneton records one *window* of it. Windows are counted in *units*:

* step mode (`--steps WAIT:WARMUP:ACTIVE`): a unit is one training step, ended by each
  `torch.optim.Optimizer.step()` (a global optimizer step post-hook) or, once the program
  calls it, by the explicit marker `magneton.step()` (which `magneton.hf.MagnetonCallback`
  calls at the end of every HF Trainer step). Unit 0 runs from program start to the first
  marker, unit k from marker k to marker k+1, as in torch.profiler's `schedule`.
* window mode (the program marks a block `with magneton.window("decode"):`): a unit is
  one execution of the outermost block of the chosen name (`--window NAME`, default the
  first name entered); nested blocks inside it are part of it. `--steps` then counts
  executions; without it one execution (0:0:1) is recorded.

The units map onto the same passes as `magneton record SCRIPT` drives for calls of
`main()`, so the recording is indistinguishable from one of those downstream:

    WAIT units       untraced (model construction, data loading, compilation)
    WARMUP units     untraced, like `--warmup` calls (allocator, oneDNN caches settle)
    1st ACTIVE unit  the structure pass: StructureCapture + profiler (dataflow, stacks,
                     call paths), exactly `run_structure_pass` split at the unit's edges
    other ACTIVE     the timing pass, one TimingCapture per unit while the power sampler
                     runs; energy is attributed from these windows only. With ACTIVE=1
                     there is no timing unit and the run is "combined" (like
                     `magneton.record_block`), its times inflated by the capture.

After the last active unit every hook is removed and the rest of the program runs
untraced. The recording is saved when the program exits; a program that exits before the
window completes fails with a one-line reason and nothing half-recorded is stored.

The command line, working directory and window spec are stored in the run's config
snapshot (`program.*` keys), so the key-variable re-run (`run_program_window`) reproduces
the same window in a fresh process.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import importlib.util
import json
import os
import runpy
import socket
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from magneton.model import MagnetonError, Profile, RunInfo, WorkloadError
from magneton.tracer.programs.entered import ENTERED_KEY, caller_frames

if TYPE_CHECKING:
    from magneton.graphdb.store import DBArg

# The one recorder active in this process (a program is recorded once per process).
_ACTIVE: Any = None  # a _Controller, or a JAX/TF program's StepRecorder


# --------------------------------------------------------------------------------------
# What to run and which window to record
# --------------------------------------------------------------------------------------


@dataclass
class Schedule:
    """torch.profiler-style schedule, counted in units (steps or window executions)."""

    wait: int = 0
    warmup: int = 0
    active: int = 1

    @classmethod
    def parse(cls, text: str) -> Schedule:
        parts = text.split(":")
        try:
            wait, warmup, active = (int(p) for p in parts)
        except ValueError:
            raise MagnetonError(
                f"--steps {text!r}: expected WAIT:WARMUP:ACTIVE, three integers like 1:1:3"
            ) from None
        if wait < 0 or warmup < 0 or active < 1:
            raise MagnetonError(f"--steps {text!r}: WAIT, WARMUP >= 0 and ACTIVE >= 1")
        return cls(wait, warmup, active)

    def __str__(self) -> str:
        return f"{self.wait}:{self.warmup}:{self.active}"

    @property
    def total(self) -> int:
        return self.wait + self.warmup + self.active


# Timed units a program run needs for a usable estimate. A script's timing pass adds
# calls until the 95% interval of its mean is within 2% (up to 30); a program's steps
# come from the program, so the schedule fixes their number in advance. Two timed steps
# (`--steps 1:1:3`) gave spreads of ±49% and ±22% on a 2-core machine and no finding
# could clear a 10% threshold; with 8 the t-interval's factor drops from 12.7 (1 degree
# of freedom) to 2.4 (7), which is what a diff's interval rests on.
MIN_TIMED_UNITS = 8


def timed_units(s: Schedule) -> int:
    """Timing-pass units of a schedule: the active units after the structure unit."""
    return max(0, s.active - 1)


def suggested_steps(s: Schedule) -> Schedule:
    """The schedule to re-record with: the same WAIT and WARMUP, and enough ACTIVE units
    for `MIN_TIMED_UNITS` timed ones (at least double the current timed ones)."""
    timed = max(MIN_TIMED_UNITS, 2 * timed_units(s))
    return Schedule(s.wait, s.warmup, timed + 1)


@dataclass
class ProgramSpec:
    """A program run: `python [-m MODULE | SCRIPT] ARGS` and the window to record."""

    script: str  # absolute path of the script (for -m: the module's file)
    args: list[str] = field(default_factory=list)  # sys.argv[1:]
    module: str = ""  # set for `-m MODULE`
    cwd: str = ""
    steps: Schedule | None = None  # None: window mode, one execution
    window: str = ""  # window name; "" = the first one entered (window mode)
    step_fn: str = ""  # JAX/TensorFlow: the compiled function whose calls are steps

    @property
    def mode(self) -> str:
        return "window" if self.window or self.steps is None else "steps"

    @property
    def schedule(self) -> Schedule:
        return self.steps or Schedule()

    def describe(self) -> str:
        unit = f"window {self.window!r}" if self.window else self.mode
        return f"{unit} {self.schedule}"

    def command(self, steps: Schedule | None = None, run: str = "RUN", db: str = "DB") -> str:
        """The `magneton record` command line that records this program again (with
        `steps` instead of its schedule when given): what advice prints, so it works
        when pasted."""
        import shlex

        sched = steps or self.steps
        target = ["-m", self.module] if self.module else [_as_typed(self.script, self.cwd)]
        parts = ["magneton", "record", "--db", db, "--run", run]
        if sched is not None:
            parts += ["--steps", str(sched)]
        if self.mode == "window":  # --steps alone would count optimizer steps instead
            parts += ["--window", self.window or "NAME"]
        return shlex.join([*parts, "--", "python", *target, *self.args])

    def python_command(self, args: list[str] | None = None) -> str:
        """`python SCRIPT ARGS` (or `python -m MOD ARGS`) as typed in the recorded working
        directory, with `args` in place of the recorded arguments when given."""
        import shlex

        target = ["-m", self.module] if self.module else [_as_typed(self.script, self.cwd)]
        return shlex.join(["python", *target, *(self.args if args is None else args)])

    def to_config(self) -> dict[str, str]:
        return {
            "program.script": self.script,
            "program.module": self.module,
            "program.args": json.dumps(self.args),
            "program.cwd": self.cwd,
            "program.steps": str(self.steps) if self.steps else "",
            "program.window": self.window,
            "program.step_fn": self.step_fn,
        }

    @classmethod
    def from_config(cls, config: dict[str, str]) -> ProgramSpec | None:
        """The spec stored with a program run; None for a `setup()`/`main()` run."""
        if not config.get("program.script"):
            return None
        steps = config.get("program.steps", "")
        return cls(
            script=config["program.script"],
            args=json.loads(config.get("program.args", "[]")),
            module=config.get("program.module", ""),
            cwd=config.get("program.cwd", ""),
            steps=Schedule.parse(steps) if steps else None,
            window=config.get("program.window", ""),
            step_fn=config.get("program.step_fn", ""),
        )


def _as_typed(path: str, cwd: str) -> str:
    """A script path relative to the working directory it was run from, when inside it."""
    rel = os.path.relpath(path, cwd) if cwd else path
    return path if rel.startswith("..") else rel


def parse_command(
    command: list[str], *, steps: str | None = None, window: str = "", step_fn: str = ""
) -> ProgramSpec:
    """`["python", "train.py", "--lr", "3e-4"]` or `["python", "-m", "pkg.mod", ...]`
    (the leading `python` may be left out) → a ProgramSpec with absolute paths."""
    cmd = list(command)
    if cmd and os.path.basename(cmd[0]).startswith("python") and not cmd[0].endswith(".py"):
        cmd = cmd[1:]
    if not cmd:
        raise MagnetonError("nothing to run after `--`: expected `python SCRIPT ARGS` or `-m MOD`")
    sched = Schedule.parse(steps) if steps else None
    if cmd[0] == "-m":
        if len(cmd) < 2:
            raise MagnetonError("`-m` needs a module name")
        module = cmd[1]
        try:
            found = importlib.util.find_spec(module)
        except (ImportError, ValueError):
            found = None
        if found is None or not found.origin or not os.path.isfile(found.origin):
            raise MagnetonError(f"no module named {module!r} (run from its project directory)")
        origin = found.origin
        if found.submodule_search_locations:  # a package: `python -m pkg` runs pkg.__main__
            main = os.path.join(os.path.dirname(origin), "__main__.py")
            if not os.path.isfile(main):
                raise MagnetonError(f"package {module!r} has no __main__.py to run")
            origin = main
        return ProgramSpec(
            os.path.abspath(origin), cmd[2:], module, os.getcwd(), sched, window, step_fn
        )
    if cmd[0].startswith("-"):
        raise MagnetonError(f"unsupported python option {cmd[0]!r}: use `python SCRIPT` or `-m`")
    script = os.path.abspath(cmd[0])
    if not os.path.isfile(script):
        raise MagnetonError(f"no such script: {script}")
    return ProgramSpec(script, cmd[1:], "", os.getcwd(), sched, window, step_fn)


# --------------------------------------------------------------------------------------
# Markers the user's code may call (no-ops when nothing is recording)
# --------------------------------------------------------------------------------------


def step() -> None:
    """Mark the end of a training step. Once called, optimizer steps no longer count."""
    if _ACTIVE is not None:
        _ACTIVE.marker(sys._getframe(1))


@contextlib.contextmanager
def window(name: str) -> Iterator[None]:
    """Mark a block as a window that `magneton record ... --window NAME -- python ...`
    can record; nestable. Outside a recording it does nothing."""
    ctl = _ACTIVE
    if ctl is None:
        yield
        return
    ctl.enter_window(name, sys._getframe(2))
    try:
        yield
    finally:
        ctl.exit_window(name)


class _WindowDone(BaseException):
    """Raised by a re-run to stop the program once its window has run."""


def _sync_device() -> None:
    """Wait for queued GPU work, so a timing unit's end includes its kernels."""
    import torch

    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


# --------------------------------------------------------------------------------------
# The controller: units -> passes
# --------------------------------------------------------------------------------------


def _user_frame(frame: Any) -> Any:
    """The innermost frame outside torch and Magneton that holds an nn.Module (where the
    model lives), else the innermost frame outside them."""
    import torch

    from magneton.tracer.capture.dispatch import _SELF_DIRS

    torch_dir = os.path.dirname(torch.__file__) + os.sep
    first = None
    f = frame
    while f is not None:
        fn = f.f_code.co_filename
        if not (fn.startswith(torch_dir) or fn.startswith(_SELF_DIRS)):
            first = first or f
            names = {**f.f_globals, **f.f_locals}
            if any(isinstance(v, torch.nn.Module) for v in names.values()):
                return f
        f = f.f_back
    return first or frame


class _Controller:
    """Turns unit boundaries into the recorder's passes. Subclasses say what a pass does:
    `_Recorder` records, `_Rerun` switches the key-variable tracer on and off."""

    def __init__(self, spec: ProgramSpec):
        self.spec = spec
        self.sched = spec.schedule
        self.unit = 0  # index of the unit now running
        self.window_name = spec.window
        self.depth = 0  # nesting depth of the selected window
        self.markers = False  # magneton.step() seen: optimizer steps stop counting
        self.started = False  # a traced unit has begun
        self.done = False
        self._hook: Any = None

    # -- installation ------------------------------------------------------------------

    def install(self) -> None:
        global _ACTIVE
        _ACTIVE = self
        if self.spec.mode == "steps":
            from torch.optim.optimizer import register_optimizer_step_post_hook

            self._hook = register_optimizer_step_post_hook(self._on_optimizer_step)
            self.begin(0, None)

    def uninstall(self) -> None:
        global _ACTIVE
        if self._hook is not None:
            self._hook.remove()
            self._hook = None
        _ACTIVE = None

    # -- events ------------------------------------------------------------------------

    def _on_optimizer_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if not self.markers:
            self.boundary(sys._getframe(1))

    def marker(self, frame: Any) -> None:
        if self.spec.mode != "steps" or self.done:
            return
        if not self.markers:
            # The first explicit marker takes over from optimizer steps, and counting
            # restarts: a HF Trainer step ends with an optimizer step *and* the callback,
            # which must not count as two. Whatever the optimizer hook began is dropped.
            self.markers = True
            if self.unit > 0:
                if self.sched.wait + self.sched.warmup == 0:
                    raise MagnetonError(
                        "magneton.step() is first called after an optimizer step, which "
                        "already began the window; use --steps with WAIT >= 1"
                    )
                self.reset()
                self.unit = 1
                self.begin(1, frame)
                return
        self.boundary(frame)

    def boundary(self, frame: Any) -> None:
        if self.done:
            return
        self.end(self.unit)
        self.unit += 1
        if not self.done:
            self.begin(self.unit, frame)

    def enter_window(self, name: str, frame: Any) -> None:
        if self.spec.mode != "window" or self.done:
            return
        if not self.window_name:
            self.window_name = name
        if name != self.window_name:
            return
        self.depth += 1
        if self.depth == 1:
            self.begin(self.unit, frame)

    def exit_window(self, name: str) -> None:
        if self.spec.mode != "window" or self.done or name != self.window_name:
            return
        self.depth -= 1
        if self.depth == 0:
            self.end(self.unit)
            self.unit += 1

    # -- unit kinds --------------------------------------------------------------------

    def kind(self, unit: int) -> str:
        s = self.sched
        if unit < s.wait + s.warmup:
            return "untraced"
        if unit == s.wait + s.warmup:
            return "structure"
        if unit < s.total:
            return "timing"
        return "after"

    def begin(self, unit: int, frame: Any) -> None:
        k = self.kind(unit)
        if k == "structure":
            self.started = True
            self.begin_structure(frame)
        elif k == "timing":
            self.begin_timing(unit)
        elif k == "untraced":
            self.begin_untraced()

    def end(self, unit: int) -> None:
        k = self.kind(unit)
        if k == "structure":
            self.end_structure()
        elif k == "timing":
            self.end_timing(unit)
        elif k == "untraced":
            self.end_untraced()
        if unit == self.sched.total - 1:
            self.done = True
            self.uninstall()
            self.finish()

    def reset(self) -> None:
        """Drop whatever has been captured so far (counting restarts)."""
        self.started = False

    def begin_structure(self, frame: Any) -> None: ...

    def begin_untraced(self) -> None: ...

    def end_untraced(self) -> None: ...
    def end_structure(self) -> None: ...
    def begin_timing(self, unit: int) -> None: ...
    def end_timing(self, unit: int) -> None: ...
    def finish(self) -> None: ...

    def incomplete(self) -> str:
        """Why the window did not complete (the program exited first)."""
        s, mode = self.sched, self.spec.mode
        if mode == "window" and not self.window_name:
            return (
                "the program exited without entering a magneton.window() block; pass "
                "--steps WAIT:WARMUP:ACTIVE to record training steps instead"
            )
        what = (
            "optimizer/magneton.step() steps"
            if mode == "steps"
            else (f"executions of window {self.window_name!r}")
        )
        return (
            f"the program exited after {self.unit} {what}; the window {s} needs "
            f"{s.total} (lower --steps or run the program longer)"
        )


class _Recorder(_Controller):
    def __init__(self, spec: ProgramSpec, info: RunInfo, options: Any):
        super().__init__(spec)
        from magneton.tracer.energy.session import EnergySession

        self.info = info
        self.opts = options
        import torch

        # The program has not built its model yet: pick the sensor for the GPU if one is
        # visible, as `magneton record SCRIPT` does from where setup() put the model.
        device = "cuda" if torch.cuda.is_available() else "cpu"
        self.session = EnergySession.create(
            options.power, interval_s=options.interval_s, device=device
        )
        self.profile: Profile | None = None
        self.iterations: list = []
        self.cpu_windows: list = []
        self.walls: list[float] = []
        # wall seconds of the untraced units the program ran whole (WAIT, WARMUP): what
        # a unit costs without the recorder, the bound its traced operators must keep
        self.plain_walls: list[float] = []
        self._plain_t0 = 0
        self._stack: contextlib.ExitStack | None = None
        self._capture: Any = None
        self._prof: Any = None
        self._timing_open = False
        self._t0 = 0
        self._elsewhere = [0]
        self.unrecorded = 0  # operator calls other threads ran in the structure unit
        # the program's command-line parsers, as they parsed its arguments (cmdline.py),
        # and the config files it read (configfiles.py)
        self.parsers: list = []
        self.files: list = []
        self.env_reads: dict[str, str | None] = {}  # the variables it read (envreads.py)
        self.entered_from: list[list] = []  # `caller_frames` of the structure unit

    def begin_structure(self, frame: Any) -> None:
        from magneton.tracer.capture.dispatch import ModuleTracker, StructureCapture, call_profiler
        from magneton.tracer.programs.record import _other_threads, _roots_and_sources

        user = _user_frame(frame) if frame is not None else None
        self.entered_from = caller_frames(user)
        names = {**user.f_globals, **user.f_locals} if user is not None else {}
        roots, sources = _roots_and_sources(lambda: None, (), {}, names)
        self._capture = StructureCapture(
            ModuleTracker(roots),
            sources=sources,
            stop_code=user.f_code if user is not None else None,
            measured=self.sched.active == 1,  # no timing unit: this one is priced
        )
        self._stack = contextlib.ExitStack()
        if self.opts.call_paths:
            self._prof = self._stack.enter_context(call_profiler())
        self._stack.enter_context(self._capture.modules)
        self._stack.enter_context(self._capture)
        # threads the program starts during the unit: their operators are not traced
        # (the capture is per thread); count them as `record SCRIPT` does
        self._elsewhere = [0]
        self._stack.enter_context(_other_threads(self._elsewhere))
        if self.sched.active == 1:  # no timing unit: sample power over this one
            self.session.start()
            self._stack.callback(self.session.stop)
        self._t0 = time.perf_counter_ns()

    def end_structure(self) -> None:
        from magneton.tracer.capture.config import snapshot
        from magneton.tracer.programs.record import note_unrecorded_threads

        wall = (time.perf_counter_ns() - self._t0) / 1e9
        stack, self._stack = self._stack, None
        assert stack is not None  # begin_structure opened it
        try:
            stack.close()
        finally:
            res = self._capture.finish(self._prof)  # before the program runs on
        config = snapshot(self.spec.script)
        config.update(self.spec.to_config())
        config[ENTERED_KEY] = json.dumps(self.entered_from)
        if self.spec.mode == "window" and not self.spec.window and self.window_name:
            # the block recorded by default (the first entered) is named, so a command
            # rebuilt from the config (`ProgramSpec.command`) records the same block
            # even when it adds --steps (which alone would switch to step mode)
            config["program.window"] = self.window_name
        self.profile = Profile(
            run=self.info,
            ops=res.ops,
            tensors=res.tensors,
            modules=res.modules,
            frames=res.frames,
            kernels=res.kernels,
            config=config,
        )
        self.unrecorded = max(res.other_thread_ops, self._elsewhere[0])
        note_unrecorded_threads(self.profile, self.unrecorded)
        self.info.device = "cuda" if any(op.device.startswith("cuda") for op in res.ops) else "cpu"
        self.structure_wall_s = wall

    def begin_untraced(self) -> None:
        self._plain_t0 = time.perf_counter_ns()

    def end_untraced(self) -> None:
        if self._plain_t0:
            self.plain_walls.append((time.perf_counter_ns() - self._plain_t0) / 1e9)
        self._plain_t0 = 0

    def begin_timing(self, unit: int) -> None:
        from magneton.tracer.timing.passes import CpuTimingCapture

        if not self.iterations and not self.walls:
            self.session.start()
        # the process CPU clock too: not to price (a program is priced on wall time),
        # to tell how busy other threads were between operators (alignment.py)
        self._capture = CpuTimingCapture()
        self._capture.__enter__()
        self._timing_open = True
        self._t0 = time.perf_counter_ns()

    def end_timing(self, unit: int) -> None:
        self._capture.__exit__(None, None, None)
        self._timing_open = False
        _sync_device()
        self.walls.append((time.perf_counter_ns() - self._t0) / 1e9)
        self.iterations.append(self._capture.events)
        self.cpu_windows.append(self._capture.cpu_windows)

    def finish(self) -> None:
        from magneton.tracer.timing.alignment import note_slowed_units, price_timed_units

        profile, info = self.profile, self.info
        assert profile is not None  # the structure unit, the first, has ended
        if not profile.ops:  # nothing to price; `record_program` says so after the run
            if self.iterations:
                self.session.stop()
            return
        if not self.iterations:  # ACTIVE=1: the structure unit is all there is
            for op in profile.ops:
                op.windows_ns = [(op.start_ns, op.end_ns)]
            info.timing, info.time_s, info.repeat = "combined", self.structure_wall_s, 1
            self.session.attribute(profile)
            info.status = "ok"
            return
        self.session.stop()
        info.time_s = sum(self.walls) / len(self.walls)
        info.repeat = len(self.iterations)
        price_timed_units(profile, self.session, self.iterations, self.cpu_windows)
        note_slowed_units(profile, self.plain_walls)
        if info.status == "incomparable":  # stored as a graph, never priced
            info.error += (
                ". Mark the steps to compare with magneton.step() or "
                "`with magneton.window(NAME):` (docs/programs.md)"
            )

    def _unwind(self) -> None:
        if self._stack is not None:
            stack, self._stack = self._stack, None
            with contextlib.suppress(Exception):
                stack.close()
        elif self._timing_open:
            with contextlib.suppress(Exception):
                self._capture.__exit__(None, None, None)
        self._timing_open = False
        with contextlib.suppress(Exception):
            self.session.stop()

    def reset(self) -> None:
        super().reset()
        self._unwind()
        self.profile, self.iterations, self.walls, self.cpu_windows = None, [], [], []

    def abort(self) -> None:
        """Unwind whatever capture is open (the program raised mid-window)."""
        self._unwind()
        self.uninstall()


# --------------------------------------------------------------------------------------
# Running the program
# --------------------------------------------------------------------------------------


@contextlib.contextmanager
def _as_main(spec: ProgramSpec) -> Iterator[None]:
    """sys.argv, sys.path[0] and the working directory as `python ...` would set them."""
    old_argv, old_path, old_cwd = sys.argv, list(sys.path), os.getcwd()
    sys.argv = [spec.script, *spec.args]
    if spec.cwd:
        os.chdir(spec.cwd)
    # `python -m` puts the working directory first on sys.path, `python FILE` its folder
    sys.path.insert(0, (spec.cwd or os.getcwd()) if spec.module else os.path.dirname(spec.script))
    try:
        yield
    finally:
        sys.argv, sys.path[:] = old_argv, old_path
        os.chdir(old_cwd)


def _run(spec: ProgramSpec) -> None:
    """Run the program as `__main__`; a `sys.exit(0)` is a normal end."""
    try:
        if spec.module:
            runpy.run_module(spec.module, run_name="__main__", alter_sys=True)
        else:
            runpy.run_path(spec.script, run_name="__main__")
    except SystemExit as e:
        from magneton.tracer.programs.record import WorkloadExited

        if isinstance(e, WorkloadExited) and e.code:
            raise  # `record_program` words it (where, and whether the window was done)
        if e.code not in (None, 0):
            raise WorkloadError(f"the program exited with status {e.code}") from None


def _program_run_info(spec: ProgramSpec, run: str) -> RunInfo:
    """The run's identity, marked failed until the window is recorded and saved."""
    from magneton.tracer.capture.config import sha256_file

    return RunInfo(
        name=run,
        script=spec.script,
        script_sha256=sha256_file(spec.script),
        entry="__main__",
        started_at=_dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        warmup=spec.schedule.warmup,
        repeat=max(1, spec.schedule.active - 1),
        host=socket.gethostname(),
        status="failed",
    )


def record_program(spec: ProgramSpec, *, db: DBArg, run: str, options: Any = None) -> Profile:
    """What `magneton record ... -- python ...` does. Raises MagnetonError (one line) on
    any failure, after marking the run failed in the DB."""
    from magneton.tracer.programs.cmdline import observed_parsers
    from magneton.tracer.programs.configfiles import observed_config_files
    from magneton.tracer.programs.envreads import observed_env
    from magneton.tracer.programs.record import (
        RecordOptions,
        _interruptible,
        _no_exit,
        _opened,
        check_run_name,
        no_operator_error,
        own_objects_frozen,
        save,
    )

    global _ACTIVE
    opts = options or RecordOptions()
    check_run_name(run)
    if opts.replay:
        raise MagnetonError("--replay needs a re-callable entry; it is not available for programs")
    if _ACTIVE is not None:
        raise MagnetonError("a program is already being recorded in this process")
    info = _program_run_info(spec, run)
    framework = _framework_of(spec)  # refusals come before the program runs
    # opened briefly, as `record_script` does: fails before the program runs, and other
    # commands can read the DB while it does
    with _opened(db) as handle:
        if handle.has_run(run) and not opts.replace:
            raise MagnetonError(
                f"run '{run}' already exists in the DB; pick another --run name or pass --replace"
            )
    rec = _recorder_for(framework, spec, info, opts)
    try:
        rec.install()
        _ACTIVE = rec  # what magneton.step() and magneton.window() report to
        # SIGTERM and os._exit as `record SCRIPT` handles them (tracer/programs/record.py): a
        # message and nothing stored instead of a silent exit
        with (
            own_objects_frozen(),
            _interruptible(),
            _no_exit(),
            _as_main(spec),
            observed_parsers() as rec.parsers,
            observed_config_files() as rec.files,
            observed_env() as rec.env_reads,
        ):
            _run(spec)
        if not rec.done:
            raise MagnetonError(rec.incomplete())
        if not rec.profile.ops:
            raise no_operator_error(f"the recorded {spec.describe()}", None, rec.unrecorded)
    except BaseException as e:
        if _window_recorded(rec):  # what failed came after the window: keep the run
            rec.uninstall()
            save(_finished(rec, spec), db, replace=opts.replace)
            raise _after_window(e, spec, run) from None
        _raise_failure(e, rec, spec, info, db, opts)
    finally:
        rec.uninstall()
        _ACTIVE = None
    save(_finished(rec, spec), db, replace=opts.replace)
    return rec.profile


def _raise_failure(
    e: BaseException, rec: Any, spec: ProgramSpec, info: RunInfo, db: Any, opts: Any
) -> None:
    """Raise a recording's failure as the one-line error the CLI prints."""
    from magneton.tracer.programs.record import (
        Terminated,
        _exit_reason,
        _record_failure,
        _workload_raised,
    )

    rec.abort()
    if isinstance(e, MagnetonError):
        info.error = str(e)
        raise MagnetonError(f"{e}; {_record_failure(info, db, opts.replace)}") from None
    if isinstance(e, KeyboardInterrupt):
        how = "terminated (SIGTERM)" if isinstance(e, Terminated) else "interrupted (Ctrl-C)"
        info.error = f"{how} while recording"
        raise MagnetonError(
            f"{how}; {_record_failure(info, db, opts.replace)}",
            exit_code=143 if isinstance(e, Terminated) else 130,
        ) from None
    if isinstance(e, SystemExit):  # os._exit(n != 0) in the program (see `_run`)
        info.error = _exit_reason(
            e, spec.script, "the program", "" if rec.done else "before the window was recorded"
        )
        raise WorkloadError(f"{info.error}; {_record_failure(info, db, opts.replace)}") from None
    if isinstance(e, Exception):
        raise _workload_raised(e, spec.script, info, db, opts.replace) from None
    raise e


def _window_recorded(rec: Any) -> bool:
    return bool(rec.done and rec.profile is not None and rec.profile.ops)


def _after_window(e: BaseException, spec: ProgramSpec, run: str) -> MagnetonError:
    """The error of a program that failed after its window was recorded (the run is
    stored: nothing of the recording is lost to a crash at the end of a training run)."""
    from magneton.tracer.programs.record import Terminated, _exit_reason, _user_location

    stored = f"run '{run}' was recorded before that and is stored"
    if isinstance(e, KeyboardInterrupt):
        how = "terminated (SIGTERM)" if isinstance(e, Terminated) else "interrupted (Ctrl-C)"
        return MagnetonError(
            f"{how} after the window; {stored}", exit_code=143 if isinstance(e, Terminated) else 130
        )
    if isinstance(e, SystemExit):
        return WorkloadError(f"{_exit_reason(e, spec.script, 'the program', '')}; {stored}")
    if isinstance(e, MagnetonError):
        return WorkloadError(f"{e}; {stored}")
    msg = " ".join(str(e).split()) or "(no message)"
    where = _user_location(e, spec.script)
    return WorkloadError(
        f"the program raised {type(e).__name__}{where} after the window: {msg}; {stored}"
    )


def _framework_of(spec: ProgramSpec) -> str:
    """The program's framework, from its imports; a JAX or TensorFlow program's window
    must be steps of its step function (tracer/frameworks/steps.py), said before it runs."""
    from magneton.model.frameworks import framework_name
    from magneton.tracer.frameworks import detect_framework, require

    framework = detect_framework(spec.script)
    if framework == "torch":
        return framework
    require(framework)
    name = framework_name(framework)
    if spec.mode == "window":
        raise MagnetonError(
            f"a {name} program's window is its training steps: record it with --steps "
            "WAIT:WARMUP:ACTIVE (a step is a call of its compiled step function, or ends "
            "at magneton.step()); magneton.window() blocks are for PyTorch programs"
        )
    s = spec.schedule
    if s.wait + s.warmup < 1:
        raise MagnetonError(
            f"a {name} program's first step compiles its step function and is never "
            f"measured: use --steps with WAIT+WARMUP >= 1 (e.g. 1:1:{s.active})"
        )
    return framework


def _recorder_for(framework: str, spec: ProgramSpec, info: RunInfo, opts: Any) -> Any:
    if framework == "torch":
        rec = _Recorder(spec, info, opts)
        rec.session.measure_idle()  # before any of the program's work
        return rec
    from magneton.tracer.frameworks.steps import StepRecorder

    return StepRecorder(framework, spec, info.name, opts, spec.step_fn)


def _finished(rec: Any, spec: ProgramSpec) -> Profile:
    """The recorded profile with the program's command line, its parsers and the config
    files it read in its config (a JAX or TensorFlow step's profile was made by the
    framework's recorder)."""
    from magneton.tracer.programs import cmdline, configfiles, envreads

    profile = rec.profile
    for key, value in spec.to_config().items():  # the recorder's own (a named window) win
        profile.config.setdefault(key, value)
    profile.config.update(cmdline.to_config(rec.parsers))
    profile.config.update(configfiles.to_config(rec.files))
    profile.config.update(envreads.to_config(rec.env_reads))
    return profile


# --------------------------------------------------------------------------------------
# Re-running the same window (key-variable analysis)
# --------------------------------------------------------------------------------------


class _Rerun(_Controller):
    def __init__(self, spec: ProgramSpec, on_begin: Callable[[], None], on_end: Callable[[], None]):
        super().__init__(spec)
        self.on_begin, self.on_end = on_begin, on_end

    def begin_structure(self, frame: Any) -> None:
        self.on_begin()

    def reset(self) -> None:
        super().reset()
        self.on_end()

    def end_structure(self) -> None:
        self.on_end()
        # The watched lines ran in the same unit the structure pass recorded; the rest
        # of the program is not needed.
        self.done = True
        self.uninstall()
        raise _WindowDone


def run_program_window(
    config: dict[str, str], on_begin: Callable[[], None], on_end: Callable[[], None]
) -> None:
    """Re-run a recorded program run (its `program.*` config) and call `on_begin` /
    `on_end` around the unit its structure pass recorded; the program stops there.
    Raises MagnetonError if the config is not a program run's or the window never ran."""
    _run_until_window_done(_Rerun(_spec_of(config), on_begin, on_end))


def _spec_of(config: dict[str, str]) -> ProgramSpec:
    spec = ProgramSpec.from_config(config)
    if spec is None:
        raise MagnetonError("not a program run (no program.* config)")
    return spec


def _run_until_window_done(ctl: _Controller) -> None:
    """Run the controller's program until it raises `_WindowDone`; MagnetonError when
    the program ends before its window does."""
    ctl.install()
    try:
        with _as_main(ctl.spec):
            _run(ctl.spec)
    except _WindowDone:
        return
    finally:
        ctl.uninstall()
    raise MagnetonError(ctl.incomplete())


# --------------------------------------------------------------------------------------
# Timing the same window again (interleaved confirmation)
# --------------------------------------------------------------------------------------


class _Timer(_Controller):
    """The recorded window again, timed as the recording timed it: the WAIT and WARMUP
    units and the structure unit run untraced (the structure unit's position is kept, so
    the timed units are the same steps of the program: its learning-rate schedule, its
    data order), each timing unit runs under the recorder's `TimingCapture`, and the
    program stops once the window is done."""

    def __init__(self, spec: ProgramSpec):
        super().__init__(spec)
        self.units: list[list[tuple[str, int, int]]] = []
        self._capture: Any = None

    def begin_timing(self, unit: int) -> None:
        from magneton.tracer.capture.dispatch import TimingCapture

        self._capture = TimingCapture()
        self._capture.__enter__()

    def end_timing(self, unit: int) -> None:
        capture, self._capture = self._capture, None
        capture.__exit__(None, None, None)
        _sync_device()
        self.units.append(capture.events)

    def reset(self) -> None:
        super().reset()
        if self._capture is not None:
            capture, self._capture = self._capture, None
            capture.__exit__(None, None, None)
        self.units = []

    def finish(self) -> None:
        raise _WindowDone


def time_window(spec: dict) -> dict:
    """A warm worker's job (diagnose/matching/confirm.py): run the recorded program once
    (`spec["program"]`: its `program.*` config; `spec["env"]`: its environment) and
    return the operator windows of each timing unit, `{"units": [{"names": [...],
    "wall": [[start_ns, end_ns], ...]}, ...]}`. Raises MagnetonError when the program
    ends before the window does."""
    os.environ.update(spec.get("env", {}))
    ctl = _Timer(_spec_of(spec["program"]))
    _run_until_window_done(ctl)
    return {
        "units": [
            {"names": [e[0] for e in u], "wall": [[e[1], e[2]] for e in u]} for u in ctl.units
        ]
    }


def env_of(config: dict[str, str]) -> dict[str, str]:
    """The recorded environment variables: non-empty `env.*` snapshot entries, and the
    values a program read of its own variables (envreads.py), so that a re-run reads
    what its recording read even when the process that re-runs it has another value
    (`magneton advise` re-runs a variant that differs from its base by one variable)."""
    from magneton.tracer.programs.envreads import CONFIG_KEY

    out = {k[4:]: v for k, v in config.items() if k.startswith("env.") and v}
    try:
        reads = json.loads(config.get(CONFIG_KEY) or "{}")
    except ValueError:
        reads = {}
    if isinstance(reads, dict):
        out.update(
            (k, v)
            for k, v in reads.items()
            if isinstance(v, str) and v and not k.startswith("MAGNETON")
        )
    return out


def program_config(config: dict[str, str]) -> dict[str, str]:
    """The `program.*` entries of a run's config ({} for a `setup()`/`main()` run): what a
    re-run needs to reproduce the window, small enough to pass in a JSON spec."""
    return {k: v for k, v in config.items() if k.startswith("program.")}


# --------------------------------------------------------------------------------------
# Command-line origins (for the backward data-flow)
# --------------------------------------------------------------------------------------


@dataclass
class CommandLineOrigin:
    """Where a program's `args.NAME` came from: an argparse option and its value."""

    dest: str  # "attn_implementation"
    option: str  # "--attn-implementation"
    value: str  # the value this run used, as typed ("eager"), or the default's source
    given: bool  # True: on the command line; False: the add_argument default
    file: str  # the script holding the add_argument call
    line: int  # its line (0: not found in the script, e.g. an HfArgumentParser field)

    def defined(self) -> str:
        """Where the option is defined, in words."""
        return f"add_argument at line {self.line}" if self.line else "the program's parser"


def command_line_origin(config: dict[str, str], dest: str) -> CommandLineOrigin | None:
    """For a program run, trace `args.DEST` to its option and to the value the run's
    command line gave it (else the option's default).

    The value and whether it was given come from the program's own parser as recorded
    (tracer/programs/cmdline.py); where the option is defined (the `add_argument` line a
    patch of its default edits) is read from the script with `ast`, never run. A run
    recorded without its parser (or a parser the script does not define, such as
    `HfArgumentParser`'s) keeps what is known of the two. None when the run is not a
    program run or no option of that dest is found.
    """
    from magneton.tracer.programs import cmdline

    spec = ProgramSpec.from_config(config)
    if spec is None:
        return None
    static = _static_option(spec, dest)
    rec = cmdline.parser_for(config, dest)
    if rec is None:
        return static
    spans = cmdline.occurrences(rec, spec.args, dest)
    # the option by its first long name (`--use-cache`, whether the run typed it or
    # `--no-use-cache`): one name per option on both sides of a diff
    strings = [o for a in rec.actions_of(dest) for o in a.option_strings]
    longs = [o for o in strings if o.startswith("--")] or strings
    option = longs[0] if longs else dest
    value = _shown(rec.values.get(dest, "None"))
    file, line = (static.file, static.line) if static else (spec.script, 0)
    if static is None and rec.library == "click":
        line = _click_option_line(spec.script, strings, dest)
    return CommandLineOrigin(dest, option, value, bool(spans), file, line)


def _click_option_line(script: str, strings: list[str], dest: str) -> int:
    """Where a click or typer option is declared: the call naming one of its option
    strings (`click.option("--fused-adam")`, `typer.Option(True, "--flash/--no-flash")`),
    else the command function's parameter `dest`; 0 when neither is found."""
    import ast

    try:
        with open(script, encoding="utf-8") as f:
            tree = ast.parse(f.read(), script)
    except (OSError, SyntaxError, UnicodeDecodeError):
        return 0
    wanted = set(strings)
    params = 0
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            for a in node.args:
                if isinstance(a, ast.Constant) and isinstance(a.value, str):
                    if wanted & {w.strip() for w in a.value.split("/")}:
                        return node.lineno
        elif isinstance(node, ast.arg) and node.arg == dest and not params:
            params = node.lineno
    return params


def _shown(text: str) -> str:
    """A recorded value as a person reads it: `'eager'` -> eager, `True` -> True."""
    import ast

    try:
        v = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text
    return v if isinstance(v, str) else repr(v)


def _static_option(spec: ProgramSpec, dest: str) -> CommandLineOrigin | None:
    """The option of `dest` as the script's `add_argument` calls define it, and the value
    its recorded arguments give it (runs recorded without their parser)."""
    import ast

    try:
        with open(spec.script, encoding="utf-8") as f:
            tree = ast.parse(f.read(), spec.script)
    except (OSError, SyntaxError):
        return None
    for node in ast.walk(tree):
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "add_argument"
        ):
            continue
        flags = [
            a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)
        ]
        kw = {k.arg: k.value for k in node.keywords if k.arg}
        longs = [f for f in flags if f.startswith("--")] or [f for f in flags if f.startswith("-")]
        explicit = kw.get("dest")
        name = (
            explicit.value
            if isinstance(explicit, ast.Constant)
            else (longs[0].lstrip("-").replace("-", "_") if longs else (flags[0] if flags else ""))
        )
        if name != dest:
            continue
        option = longs[0] if longs else (flags[0] if flags else dest)
        action = kw.get("action")
        switch = action.value if isinstance(action, ast.Constant) else None
        if switch in ("store_true", "store_false"):
            # a switch takes no value: the word after it is the next option
            given = any(a in flags for a in spec.args[: _end_of_options(spec.args)])
            value = str(switch == "store_true") if given else None
        else:
            value = _option_value(spec.args, flags)
        if value is not None:
            return CommandLineOrigin(dest, option, value, True, spec.script, node.lineno)
        default = kw.get("default")
        shown = ast.unparse(default) if default is not None else "None"
        if default is None and switch in ("store_true", "store_false"):
            shown = str(switch == "store_false")
        return CommandLineOrigin(dest, option, shown, False, spec.script, node.lineno)
    return None


def _end_of_options(args: list[str]) -> int:
    return args.index("--") if "--" in args else len(args)


def _option_value(args: list[str], flags: list[str]) -> str | None:
    """The last value given for any of `flags` (`--x v` or `--x=v`), as argparse would."""
    value = None
    for i, a in enumerate(args):
        if a == "--":
            break
        for f in flags:
            if a == f and i + 1 < len(args):
                value = args[i + 1]
            elif f.startswith("--") and a.startswith(f + "="):
                value = a[len(f) + 1 :]
    return value
