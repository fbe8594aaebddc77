"""The environment torch must find when it first loads, set before it does.

`magneton/__init__.py` imports this module before anything else, so importing any part of
Magneton sets it. It lives in the tracer (which records) rather than in the package root
so that the recorder reads `OMP_POLICY_TOO_LATE` from its own stage: the root is the CLI's
stage, above the tracer (docs/architecture.md, Stages).
"""

from __future__ import annotations

import os
import sys

# Kineto (the profiler behind the structure pass) prints "USDT ... profiler_start" lines
# on stderr at its default level; they would bury Magneton's one-line errors. It reads
# this once, when torch is first imported, so it has to be set before that.
os.environ.setdefault("KINETO_LOG_LEVEL", "99")
# OpenMP workers waiting at a barrier for a preempted peer spin by default, burning CPU
# time that is no work: with another process on the machine this inflated the process
# CPU time that prices operators 3-5x (tracer/timing/passes.py). Passive waiting sleeps instead.
# libgomp reads it once, when torch loads, so it too is set before that. A program that
# imported torch before magneton keeps the spinning default, and its spin after every
# parallel region is priced as CPU time (a gelu measured 0.7 J per call against 0.05 J):
# recordings say so (tracer/programs/record.py `_warn_if_omp_spins`, the run's config).
OMP_POLICY_TOO_LATE = "torch" in sys.modules and "OMP_WAIT_POLICY" not in os.environ
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
