"""The tracer's one door: what the front ends (the CLI, `magneton.hf`, the package root)
use of recording, and nothing else of the tracer.

Importing it runs `programs/preload.py` first (the environment torch must find when it
loads), and nothing more: every other name is imported when first used, so `magneton
--help`, `runs` or `diff` never pay for torch. The names and where they live are listed
once, in `_LAZY`; the `TYPE_CHECKING` block gives type checkers (and the layering test)
the same imports.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from magneton.tracer.programs.preload import OMP_POLICY_TOO_LATE  # noqa: F401

if TYPE_CHECKING:
    pass

_LAZY = {
    **dict.fromkeys(
        (
            "KEPT_CATS",
            "HostEvents",
            "TraceFile",
            "estimate_energy",
            "find_trace_files",
            "meter_energy",
            "profile_from_trace",
            "read_trace",
        ),
        "magneton.tracer.capture.kineto",
    ),
    "check_profile": "magneton.tracer.capture.validate",
    "JobSpec": "magneton.tracer.distributed.launch",
    "record_distributed": "magneton.tracer.distributed.launch",
    "merge_shards": "magneton.tracer.distributed.merge",
    "rank_env": "magneton.tracer.distributed.rankenv",
    **dict.fromkeys(("Shard", "find_shards", "read_shard"), "magneton.tracer.distributed.shards"),
    "fused_line": "magneton.tracer.frameworks.base",
    **dict.fromkeys(
        (
            "MIN_TIMED_UNITS",
            "ProgramSpec",
            "parse_command",
            "record_program",
            "step",
            "suggested_steps",
            "timed_units",
            "window",
        ),
        "magneton.tracer.programs.program",
    ),
    **dict.fromkeys(
        (
            "RecordOptions",
            "check_run_name",
            "record_block",
            "record_callable",
            "record_script",
            "unrecorded_thread_warning",
        ),
        "magneton.tracer.programs.record",
    ),
    **dict.fromkeys(
        ("defer_sigint", "interruptible", "stop_message"), "magneton.tracer.programs.signals"
    ),
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
