"""Recorders for programs written in frameworks other than PyTorch (JAX, TensorFlow).

`magneton record script.py` reads the script's imports (`detect_framework`) before it
imports the script: a JAX or TensorFlow program is recorded by the recorder of its
framework (`jax_program.py`, `tf_program.py`), each a `TracedProgram` driven by the one
recording sequence in `base.py`. Detecting from the imports first is what turns a missing
framework into one line naming the extra to install (`require`), instead of the script's
own `ModuleNotFoundError` reported as a failure of the workload.
"""

from __future__ import annotations

from .base import FRAMEWORKS, detect_framework, require

__all__ = ["FRAMEWORKS", "detect_framework", "require"]
