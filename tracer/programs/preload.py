"""The environment torch must find when it first loads, set before it does.

`magneton/__init__.py` imports this module before anything else (through
`magneton.tracer.api`), so importing any part of Magneton runs it. It changes nothing the
program can notice unless asked: Kineto's log level only silences the profiler's own
stderr lines, and the steady mode (tracer/programs/steady.py) is applied only when
`MAGNETON_STEADY` is set (`magneton record --steady` sets it).
"""

from __future__ import annotations

import os

from magneton.tracer.programs import steady

# Kineto (the profiler behind the structure pass) prints "USDT ... profiler_start" lines
# on stderr at its default level; they would bury Magneton's one-line errors. It reads
# this once, when torch is first imported, so it has to be set before that.
os.environ.setdefault("KINETO_LOG_LEVEL", "99")
if steady.requested():
    steady.apply()
