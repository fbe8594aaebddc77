"""Magneton: differential energy debugging for PyTorch programs.

Public API (imported lazily so `magneton --help` does not pay for importing torch):

    import magneton
    profile = magneton.record(fn, args, run="a", db="prof")      # a callable, two passes
    with magneton.record_block("b", db="prof"):                   # a block, one pass
        model(x)
    db = magneton.open_db("prof")                                 # the Kùzu profile DB

Markers for `magneton record ... -- python train.py ARGS` (no-ops when not recording):

    with magneton.window("decode"):                               # a block to record
        ...
    magneton.step()                                               # end of a training step
"""

from __future__ import annotations

import os
import sys
from typing import Any

# Kineto (the profiler behind the structure pass) prints "USDT ... profiler_start" lines
# on stderr at its default level; they would bury Magneton's one-line errors. It reads
# this once, when torch is first imported, so it has to be set before that.
os.environ.setdefault("KINETO_LOG_LEVEL", "99")
# OpenMP workers waiting at a barrier for a preempted peer spin by default, burning CPU
# time that is no work: with another process on the machine this inflated the process
# CPU time that prices operators 3-5x (tracer/timing.py). Passive waiting sleeps instead.
# libgomp reads it once, when torch loads, so it too is set before that. A program that
# imported torch before magneton keeps the spinning default, and its spin after every
# parallel region is priced as CPU time (a gelu measured 0.7 J per call against 0.05 J):
# recordings say so (tracer/record.py `_warn_if_omp_spins`, the run's config).
OMP_POLICY_TOO_LATE = "torch" in sys.modules and "OMP_WAIT_POLICY" not in os.environ
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

__all__ = [
    "record",
    "record_block",
    "record_script",
    "open_db",
    "RecordOptions",
    "MagnetonError",
    "window",
    "step",
]

_LAZY = {
    "record": ("magneton.tracer.record", "record_callable"),
    "record_block": ("magneton.tracer.record", "record_block"),
    "record_script": ("magneton.tracer.record", "record_script"),
    "RecordOptions": ("magneton.tracer.record", "RecordOptions"),
    "open_db": ("magneton.graphdb", "open_db"),
    "MagnetonError": ("magneton.graphdb.model", "MagnetonError"),
    "window": ("magneton.tracer.program", "window"),
    "step": ("magneton.tracer.program", "step"),
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        mod, attr = _LAZY[name]
        return getattr(importlib.import_module(mod), attr)
    raise AttributeError(f"module 'magneton' has no attribute {name!r}")
