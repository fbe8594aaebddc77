"""The steady mode: what Magneton changes about the measured process, and only when asked.

By default a recording measures the program as the user runs it, in the user's own
environment. The steady mode (`magneton record --steady`, or `MAGNETON_STEADY=1`) makes
two changes that make repeated measurements agree more closely, at the price of measuring
a slightly different program; the run's config says which mode it was recorded in
(`magneton.mode`), and so does `record`'s output:

* `OMP_WAIT_POLICY=PASSIVE` (unless the user set a policy): OpenMP workers that wait at
  a barrier sleep instead of spinning. Spinning is real work the user's program does
  (on a 2-core machine a BERT training step took 1.33-1.53 s with the default policy
  and 0.70 s with PASSIVE), so it is left on by default: `record` says how much of the
  run's CPU time other threads burned while Python ran between operators
  (`spin_share`, the omp-busy-wait rule), and a diff of a default and a steady
  recording shows the difference as a finding. Under load, spinning peers also inflate
  the process CPU time the model prices by 3-5x, which is what steadiness buys.
* glibc malloc's thresholds pinned (tracer/programs/allocator.py): the same code then
  costs the same in every process, where the default dynamic threshold put one
  convolution in one of two speeds per process.

libgomp reads the policy once, when torch loads, so the mode is applied before torch is
imported (tracer/programs/preload.py); a process that imported torch first keeps the
policy it had, and the run's config says so.
"""

from __future__ import annotations

import os
import sys

ENV = "MAGNETON_STEADY"  # "1": steady mode (re-runs of a steady recording inherit it)
CONFIG_KEY = "magneton.mode"


def requested() -> bool:
    return os.environ.get(ENV, "") not in ("", "0")


def request() -> None:
    """Ask for the steady mode in this process and its children (before torch loads)."""
    os.environ[ENV] = "1"
    apply()


def apply() -> None:
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    from magneton.tracer.programs import allocator

    allocator.pin()


def describe() -> str:
    """The run's `magneton.mode` config row: how the process was measured."""
    policy = os.environ.get("OMP_WAIT_POLICY", "")
    if not requested():
        return f"as run (OMP_WAIT_POLICY {policy or 'unset'}, malloc not pinned)"
    from magneton.tracer.programs import allocator

    late = "torch" in sys.modules and not _policy_before_torch
    how = (
        f"OMP_WAIT_POLICY={policy or 'unset'}"
        + (" (set after torch loaded: not in effect)" if late and policy else "")
        + f", malloc {allocator.pin()}"
    )
    return f"steady ({how})"


# whether the policy was in the environment before torch was imported (libgomp reads it
# once, when torch loads it)
_policy_before_torch = "torch" not in sys.modules or "OMP_WAIT_POLICY" in os.environ
