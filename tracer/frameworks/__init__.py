"""Recorders for programs written in frameworks other than PyTorch (JAX, TensorFlow).

`magneton record script.py` reads the script's imports (`detect_framework`) before it
imports the script: a JAX or TensorFlow program is recorded by the recorder of its
framework (`jax_program.py`, `tf_program.py`), each a `TracedProgram` driven by the one
recording sequence in `base.py`. Detecting from the imports first is what turns a missing
framework into one line naming the extra to install (`require`), instead of the script's
own `ModuleNotFoundError` reported as a failure of the workload.
"""

from __future__ import annotations

from collections.abc import Callable

from magneton.model import MagnetonError

from .base import FRAMEWORKS, TracedProgram, detect_framework, require

__all__ = ["FRAMEWORKS", "TracedProgram", "detect_framework", "program_for", "require"]


def program_for(framework: str, fn: Callable, args: tuple) -> TracedProgram:
    """The `TracedProgram` of FRAMEWORK ("jax" or "tf") for `fn(*args)`."""
    if framework == "jax":
        from .jax_program import JaxProgram

        return JaxProgram(fn, args)
    if framework == "tf":
        from .tf_program import TfProgram

        return TfProgram(fn, args)
    raise MagnetonError(f"no recorder for framework {framework!r}")
