"""Steps of a JAX or TensorFlow program: `magneton record --steps W:WU:A -- python prog.py`.

A PyTorch program's step ends at each optimizer step (tracer/programs/program.py). A JAX
or TensorFlow program has no such hook, and its step runs compiled, as one call: the
step is a call of the program's **step function**, the compiled function it calls
again and again (`jax.jit`, `tf.function`, the `train_function` Keras' `fit` builds),
or the span between two `magneton.step()` markers, whose first compiled call is recorded.

`jax.jit` and `tf.function` are wrapped before the program runs, so every compiled
function the program makes reports its calls (calls made while JAX or TensorFlow traces
another function are not the program's steps and are passed through). Which function is
the step function: the one named by `--step-fn NAME`, else the first one the program
calls a second time (a training loop calls its step in every iteration; set-up code
such as parameter initialisation runs once). Its first call compiles it and is never
measured, so WAIT + WARMUP must be at least 1.

At the structure unit's call, the call's function and arguments are recorded as
`magneton record SCRIPT` records a JAX or TensorFlow entry (tracer/frameworks/base.py:
the graph, an unfused replay per timed unit — ACTIVE - 1 of them — and the fused call
timed as a whole), then the program's own call runs and the program goes on untraced.
A step that updates TensorFlow variables (a training step) has their values saved
before the recording and restored after it, so the program trains exactly as it would
have. Keras' `fit` calls its `train_function` with an iterator over the data, which a
graph cannot replay: at that step one batch is taken from the iterator, the model's
`train_step` on it is recorded, and that step is then applied once for real in place of
the program's call (the program trains on the same batches in the same order).
"""

from __future__ import annotations

import contextlib
import functools
import json
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

from magneton.model import MagnetonError, Profile
from magneton.tracer.programs.entered import ENTERED_KEY, caller_frames
from magneton.tracer.programs.onimport import when_imported


class _Counted:
    """A compiled function of the program, reporting its calls to the recorder."""

    def __init__(self, compiled: Any, recorder: StepRecorder, name: str, key: Any = None):
        self._compiled = compiled
        self._recorder = recorder
        self._name = name
        self._key = key if key is not None else id(self)
        functools.update_wrapper(self, compiled, updated=())

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._recorder.call(self, args, kwargs)

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        """A compiled method: bound to its instance, counted per instance."""
        if obj is None:
            return self
        bound = self._compiled.__get__(obj, objtype)
        return _Counted(bound, self._recorder, self._name, (self._key, id(obj)))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._compiled, name)


class StepRecorder:
    """Counts the step function's calls and records the structure unit's call."""

    def __init__(self, framework: str, spec: Any, run: str, options: Any, step_fn: str = ""):
        self.framework = framework
        self.spec = spec
        self.run = run
        self.options = options
        self.step_fn = step_fn
        self.sched = spec.schedule
        self.calls: Counter[Any] = Counter()
        self.step_key: Any = None
        self.profile: Profile | None = None
        self.done = False
        self.markers = False  # magneton.step() seen: units are the spans between markers
        self.unit = 0
        self._busy = False  # a recording (or a traced call) is running: pass through
        self._undo: list[Callable[[], None]] = []
        self.parsers: list = []  # the program's command-line parsers (programs/cmdline.py)
        self.files: list = []  # the config files it read (programs/configfiles.py)
        self.env_reads: dict[str, str | None] = {}  # the variables it read (envreads.py)
        self.unrecorded = 0  # operator calls in other threads (none are traced here)

    # -- installation ------------------------------------------------------------------

    def install(self) -> None:
        if self.framework == "jax":
            import jax

            self._wrap(jax, "jit")
        elif self.framework == "tf":
            import tensorflow as tf

            self._wrap(tf, "function")
            self._when_imported("keras", self._wrap_keras)

    def _wrap(self, module: Any, attr: str) -> None:
        original = getattr(module, attr)
        recorder = self

        @functools.wraps(original)
        def compile_(fun: Any = None, *a: Any, **k: Any) -> Any:
            if fun is None:  # used as @jax.jit(static_argnums=...) / @tf.function(...)
                return lambda f: compile_(f, *a, **k)
            name = getattr(fun, "__name__", type(fun).__name__)
            return _Counted(original(fun, *a, **k), recorder, name)

        setattr(module, attr, compile_)
        self._undo.append(lambda: setattr(module, attr, original))

    def _when_imported(self, name: str, patch: Callable[[Any], None]) -> None:
        """Apply `patch` to module `name` once the program imports it (now, if it has):
        importing Keras ahead of the program would fix its backend before the program
        chose one (`KERAS_BACKEND`)."""
        self._undo.append(when_imported(name, patch))

    def _wrap_keras(self, keras: Any) -> None:
        """Keras' `fit` steps through `model.train_function(iterator)`, which it builds in
        `make_train_function`: the built function is wrapped so its calls are steps."""
        cls = keras.Model
        original = cls.make_train_function
        recorder = self

        def make_train_function(model: Any, *a: Any, **k: Any) -> Any:
            out = original(model, *a, **k)
            fn = model.train_function
            if fn is not None and not isinstance(fn, _KerasStep):
                model.train_function = _KerasStep(fn, recorder, model)
            return out

        cls.make_train_function = make_train_function
        self._undo.append(lambda: setattr(cls, "make_train_function", original))

    def uninstall(self) -> None:
        while self._undo:
            self._undo.pop()()

    def abort(self) -> None:
        self.uninstall()

    # -- events ------------------------------------------------------------------------

    def marker(self, frame: Any = None) -> None:
        """`magneton.step()`: units are the spans between markers from now on."""
        if self.done:
            return
        self.markers = True
        self.unit += 1

    def enter_window(self, name: str, frame: Any) -> None:
        """`magneton.window()` blocks do not delimit a JAX/TensorFlow program's steps."""

    def exit_window(self, name: str) -> None:
        pass

    def call(self, w: _Counted, args: tuple, kwargs: dict) -> Any:
        if self.done or self._busy or _traced(self.framework, args, kwargs):
            return w._compiled(*args, **kwargs)
        if self._is_step(w):
            if not self.markers:
                self.unit = self.calls[w._key] - 1
            if self.unit == self.sched.wait + self.sched.warmup:
                return self._record(w, args, kwargs)
        if isinstance(w, _KerasStep):  # the compiled functions it calls are this step's
            self._busy = True
            try:
                return w._compiled(*args, **kwargs)
            finally:
                self._busy = False
        return w._compiled(*args, **kwargs)

    def _is_step(self, w: _Counted) -> bool:
        self.calls[w._key] += 1
        if self.markers:  # the first compiled call of the structure unit
            return True
        if self.step_key is None:
            named = self.step_fn and w._name == self.step_fn
            if named or (not self.step_fn and self.calls[w._key] == 2):
                self.step_key = w._key
        return w._key == self.step_key

    # -- recording ---------------------------------------------------------------------

    def _record(self, w: _Counted, args: tuple, kwargs: dict) -> Any:
        self._busy = True
        # the program's lines that entered this step (`model.fit(...)`): where a step
        # runs inside library code its operators carry no line of the script, and the
        # program's slice starts from these (diagnose/source/diffslice.py `chains_of`)
        entered = caller_frames(sys._getframe())
        try:
            if isinstance(w, _KerasStep):
                return self._record_keras(w.model, args[0])
            with _variables_kept(self.framework, w._compiled, args, kwargs):
                self.profile = self._traced(w._compiled, args, kwargs, w._name)
            return w._compiled(*args, **kwargs)
        finally:
            if self.profile is not None:
                self.profile.config[ENTERED_KEY] = json.dumps(entered)
            self._busy = False
            self.done = True
            self.uninstall()

    def _traced(self, fn: Any, args: tuple, kwargs: dict, name: str) -> Profile:
        from dataclasses import replace

        from magneton.tracer.frameworks import program_for
        from magneton.tracer.frameworks.base import record_traced
        from magneton.tracer.programs.record import Phases

        program = program_for(self.framework, fn, args, kwargs)
        opts = replace(self.options, warmup=1, repeat=max(1, self.sched.active - 1), adaptive=False)
        return record_traced(
            program,
            run=self.run,
            options=opts,
            script=self.spec.script,
            entry=name,
            setup="",
            phases=Phases(False),
        )

    def _record_keras(self, model: Any, iterator: Any) -> Any:
        """Keras' `fit`: one batch from its iterator, `train_step` on it recorded, then
        applied once for real in place of the program's call (what `fit`'s own function
        returns: the step's logs)."""
        import tensorflow as tf

        if getattr(model, "steps_per_execution", 1) != 1:
            raise MagnetonError(
                "Keras fit() with steps_per_execution > 1 runs several steps per call; "
                "record it with steps_per_execution=1"
            )
        data = iterator.get_next() if hasattr(iterator, "get_next") else next(iterator)
        jit = bool(getattr(model, "jit_compile", False))
        step = tf.function(model.train_step, jit_compile=jit)
        with _variables_kept("tf", step, (data,), {}):
            self.profile = self._traced(step, (data,), {}, "train_step")
        return (model.train_step if getattr(model, "run_eagerly", False) else step)(data)


def _traced(framework: str, args: tuple, kwargs: dict) -> bool:
    """Whether the call is made while a framework traces another function (its
    arguments are tracers or symbolic tensors): not a step of the program."""
    leaves = list(args) + list(kwargs.values())
    if framework == "jax":
        import jax

        flat = jax.tree_util.tree_leaves((args, kwargs))
        return any(isinstance(x, jax.core.Tracer) for x in flat)
    import tensorflow as tf

    return not tf.executing_eagerly() or any(
        tf.is_tensor(x) and not hasattr(x, "numpy") for x in leaves
    )


class _KerasStep(_Counted):
    """A Keras model's `train_function(iterator)`: one call, one step of `fit`. Compiled
    functions it calls inside are not steps of their own."""

    def __init__(self, compiled: Any, recorder: StepRecorder, model: Any):
        super().__init__(compiled, recorder, "train_function")
        self.model = model


@contextlib.contextmanager
def _variables_kept(framework: str, fn: Any, args: tuple, kwargs: dict) -> Iterator[None]:
    """Restore what a recorded TensorFlow step changed: its variables (the model's
    weights, the optimizer's slots and step count) keep their values from before the
    recording, which ran the step many times."""
    if framework != "tf":
        yield
        return
    import tensorflow as tf

    try:
        graph = fn.get_concrete_function(*args, **kwargs).graph
        variables = list(graph.variables)
    except Exception:  # nothing to trace: nothing the recording can change either
        variables = []
    saved = [tf.identity(v) for v in variables]
    try:
        yield
    finally:
        for v, s in zip(variables, saved, strict=True):
            v.assign(s)

    def incomplete(self) -> str:
        """Why nothing was recorded when the program ended."""
        s = self.sched
        if self.step_key is None and not self.markers:
            return (
                "the program called no compiled function (jax.jit / tf.function) twice: "
                "name its step function with --step-fn NAME, or end each step with "
                "magneton.step()"
            )
        what = "magneton.step() steps" if self.markers else "calls of its step function"
        done = self.unit if self.markers else self.calls[self.step_key]
        return (
            f"the program made {done} {what}; the window {s} needs {s.wait + s.warmup + 1} "
            "(lower --steps or run the program longer)"
        )
