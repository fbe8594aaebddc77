"""Recorders for programs written in frameworks other than PyTorch (JAX, TensorFlow).

`magneton record script.py` reads the script's imports (`detect_framework`) before it
imports the script: a JAX or TensorFlow program is recorded by the recorder its registry
entry names (model/frameworks.py: `jax_program.py`, `tf_program.py`), each a
`TracedProgram` driven by the one recording sequence in `base.py`. Adding a framework is
its recorder module here plus its registry entry. Detecting from the imports first is what
turns a missing framework into one line naming the extra to install (`require`), instead
of the script's own `ModuleNotFoundError` reported as a failure of the workload.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from magneton.model import MagnetonError
from magneton.model.frameworks import BY_KEY

from .base import TracedProgram, detect_framework, require

__all__ = ["TracedProgram", "detect_framework", "program_for", "require"]


def program_for(
    framework: str, fn: Callable, args: tuple, kwargs: dict | None = None
) -> TracedProgram:
    """The `TracedProgram` of FRAMEWORK (its registry entry's recorder) for
    `fn(*args, **kwargs)`."""
    fw = BY_KEY.get(framework)
    if fw is None or not fw.recorder:
        raise MagnetonError(f"no graph recorder for framework {framework!r}")
    module, _, cls = fw.recorder.partition(":")
    return getattr(importlib.import_module(module), cls)(fn, args, kwargs)
