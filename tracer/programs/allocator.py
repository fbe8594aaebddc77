"""Pin glibc malloc's thresholds before a workload allocates, so that identical code costs
the same in every process that measures it.

glibc serves an allocation above `M_MMAP_THRESHOLD` (128 KiB at start) with a fresh
`mmap`, and raises that threshold dynamically whenever such a block is freed; the heap's
top is returned to the kernel above `M_TRIM_THRESHOLD`. Which tensors then come from
reused heap pages and which from fresh, page-faulting mappings depends on the process's
whole allocation history (its imports included), and a process keeps that state. The same
recorded call therefore ran in one of two speeds per process: the channels-last /
oneDNN convolution of examples/cases/mkldnn_conv took 10.4, 13.7, 10.4, 11.5, 11.0 and
15.2 ms (median of 20 calls) in six fresh processes, and importing numpy before torch
sent it to the slow mode more often. Interleaved confirmation compares two worker
processes, so such a per-process mode is a difference no number of rounds cancels: it
hid mkldnn_conv's real 1.5x gap (the oneDNN side's worker ran in the slow mode) and is
the between-process effect behind the A/A rows judged noise.

`pin()` fixes both thresholds at process start (`mallopt`, which also turns the dynamic
adjustment off): allocations up to 32 MiB are served from the heap and reused, and the
heap is not trimmed below 1 GiB. With it the same six processes measured 10.4-10.5 ms.
It is part of the steady mode (tracer/programs/steady.py), never applied to a program
unasked: `magneton record --steady` pins before the script is imported, and the warm
workers that re-measure and re-run a steady recording pin too (tracer/timing/warm.py), so
recordings and confirmation rounds measure the same program. Where glibc is absent (macOS, musl) nothing is pinned and the
run's config says so; a larger block (above 32 MiB) is still mapped afresh each time, the
same way in every process.
"""

from __future__ import annotations

import ctypes
import ctypes.util

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_B = 32 << 20  # glibc's own upper bound for the dynamic threshold (64-bit)
TRIM_THRESHOLD_B = 1 << 30

_pinned: str | None = None


def pin() -> str:
    """Pin the thresholds (once per process); returns what was done, for the run's config."""
    global _pinned
    if _pinned is None:
        _pinned = _mallopt()
    return _pinned


def _mallopt() -> str:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return "not pinned (no glibc mallopt)"
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    ok = mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_B) == 1
    ok = mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD_B) == 1 and ok
    if not ok:
        return "not pinned (mallopt refused)"
    return f"glibc mmap_threshold={MMAP_THRESHOLD_B >> 20}MiB trim_threshold={TRIM_THRESHOLD_B >> 20}MiB"
