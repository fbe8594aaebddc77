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

from typing import Any

# The environment torch must find when it loads (Kineto's log level; the steady mode's
# OpenMP policy when asked for) is set by the tracer's preload module; importing the
# tracer's door here, first, sets it before anything can import torch.
from magneton.tracer import api as _tracer_api  # noqa: F401

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
    "record": ("magneton.tracer.api", "record_callable"),
    "record_block": ("magneton.tracer.api", "record_block"),
    "record_script": ("magneton.tracer.api", "record_script"),
    "RecordOptions": ("magneton.tracer.api", "RecordOptions"),
    "open_db": ("magneton.graphdb", "open_db"),
    "MagnetonError": ("magneton.model", "MagnetonError"),
    "window": ("magneton.tracer.api", "window"),
    "step": ("magneton.tracer.api", "step"),
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        mod, attr = _LAZY[name]
        return getattr(importlib.import_module(mod), attr)
    raise AttributeError(f"module 'magneton' has no attribute {name!r}")
