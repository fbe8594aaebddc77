"""The tracer's one door: what the front ends (the CLI, `magneton.hf`, the package root)
use of recording, and nothing else of the tracer.

Importing it runs `programs/preload.py` first (the environment torch must find when it
loads, in the steady mode only), and nothing more: every other name is imported when
first used, so `magneton --help`, `runs` or `diff` never pay for torch. The names and where they live are listed
once, in `_LAZY`; the `TYPE_CHECKING` block gives type checkers (and the layering test)
the same imports.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from magneton.tracer.programs import preload as _preload  # noqa: F401  (before torch)

if TYPE_CHECKING:
    from magneton.tracer.capture.kineto import (
        KEPT_CATS,
        HostEvents,
        ImportStats,
        TraceFile,
        estimate_energy,
        find_trace_files,
        meter_energy,
        profile_from_trace,
        read_trace,
    )
    from magneton.tracer.capture.validate import check_profile
    from magneton.tracer.distributed.launch import JobSpec, record_distributed
    from magneton.tracer.distributed.merge import merge_shards
    from magneton.tracer.distributed.rankenv import rank_env
    from magneton.tracer.distributed.shards import Shard, find_shards, read_shard
    from magneton.tracer.frameworks.base import fused_line
    from magneton.tracer.programs.addrspace import check_torch_fits
    from magneton.tracer.programs.program import (
        MIN_TIMED_UNITS,
        ProgramSpec,
        parse_command,
        record_program,
        step,
        suggested_steps,
        timed_units,
        window,
    )
    from magneton.tracer.programs.record import (
        RecordOptions,
        check_run_name,
        record_block,
        record_callable,
        record_script,
        unrecorded_thread_warning,
    )
    from magneton.tracer.programs.signals import defer_sigint, interruptible, stop_message
    from magneton.tracer.programs.steady import request as request_steady
    from magneton.tracer.timing.warm import WarmHold, WarmWorker

__all__ = [
    "HostEvents",
    "ImportStats",
    "JobSpec",
    "KEPT_CATS",
    "MIN_TIMED_UNITS",
    "ProgramSpec",
    "RecordOptions",
    "Shard",
    "TraceFile",
    "WarmHold",
    "WarmWorker",
    "check_profile",
    "check_run_name",
    "check_torch_fits",
    "defer_sigint",
    "estimate_energy",
    "find_shards",
    "find_trace_files",
    "fused_line",
    "interruptible",
    "merge_shards",
    "meter_energy",
    "parse_command",
    "profile_from_trace",
    "rank_env",
    "read_shard",
    "read_trace",
    "record_block",
    "record_callable",
    "record_distributed",
    "record_program",
    "record_script",
    "request_steady",
    "step",
    "stop_message",
    "suggested_steps",
    "timed_units",
    "unrecorded_thread_warning",
    "window",
]

_LAZY = {
    **dict.fromkeys(
        (
            "KEPT_CATS",
            "HostEvents",
            "ImportStats",
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
    "request_steady": "magneton.tracer.programs.steady",
    "check_torch_fits": "magneton.tracer.programs.addrspace",
    **dict.fromkeys(("WarmHold", "WarmWorker"), "magneton.tracer.timing.warm"),
}
_RENAMED = {"request_steady": "request"}  # names that read better at this door


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), _RENAMED.get(name, name))
