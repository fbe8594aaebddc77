"""The timing pass: timed iterations of the entry, as many as it takes to be stable.

What this prevents, each measured on a 2-core machine shared with other processes (the
numbers are in docs/energy.md, "Contention"):

* **Wall time is not this program's time.** With no power sensor, energy is priced on
  operator time. When another process holds a core, an operator's wall window grows by
  whatever the scheduler took from it (a whole time slice of 4-16 ms for a 50 µs op), so
  identical ops differed 15-150x between two recordings. Each window therefore also reads
  the *process CPU clock* (`CLOCK_PROCESS_CPUTIME_ID`: every thread's CPU time, so the
  intra-op worker threads count): time the process was preempted does not advance it.
* **Spinning is not work.** OpenMP workers spin at barriers while waiting for a preempted
  peer, which inflates even CPU time 3-5x under load. `magneton` sets
  `OMP_WAIT_POLICY=PASSIVE` before torch loads (tracer/programs/preload.py) so a waiting worker
  sleeps; then the CPU clock counts work only.
* **Three iterations are not an estimate.** Iterations continue until the 95% confidence
  half-width of the mean iteration cost is within `target_rel` of it (Zeus's
  "std under a threshold", pyperf practice), bounded by `max_iterations` and `budget_s`.
* **A collection is not the program's cost.** The cyclic GC runs where allocation
  thresholds happen to trip, i.e. at a different op in each iteration; it is collected
  before the pass (fully) and each iteration (young generation, cheap), and disabled
  inside iterations.
"""

from __future__ import annotations

import gc
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from magneton.tracer.capture.dispatch import TimingCapture, _op_name
from magneton.tracer.programs import signals as _signals

TARGET_REL = 0.02  # 95% CI half-width of the mean iteration cost, relative
MAX_ITERATIONS = 30
BUDGET_S = 5.0  # wall seconds after which the pass stops once it has its minimum
MIN_FOR_CI = 5  # below this a standard deviation says little
# a live sensor's updates the timed iterations must span at least (record.py)
MIN_SENSOR_UPDATES = 20


class CpuTimingCapture(TimingCapture):
    """`TimingCapture` that also reads the process CPU clock around each operator."""

    def __torch_dispatch__(
        self,
        func,
        types,
        args=(),
        kwargs=None,
        _clock=time.perf_counter_ns,
        _cpu=time.process_time_ns,
    ):
        if _signals.undelivered is not None:  # a discarded Ctrl-C (tracer/programs/signals.py)
            _signals.raise_undelivered()
        c0 = _cpu()
        t0 = _clock()
        out = func(*args, **kwargs) if kwargs else func(*args)
        t1 = _clock()
        self._append((func, t0, t1, c0, _cpu()))
        return out

    @property
    def events(self) -> list[tuple[str, int, int]]:
        return [(_op_name(r[0])[0], r[1], r[2]) for r in self.raw]

    @property
    def cpu_windows(self) -> list[tuple[int, int]]:
        """(cpu_start_ns, cpu_end_ns) per operator on the process CPU clock."""
        return [(r[3], r[4]) for r in self.raw]


@dataclass
class TimingPass:
    iterations: list[list[tuple[str, int, int]]] = field(default_factory=list)
    cpu_windows: list[list[tuple[int, int]]] = field(default_factory=list)  # [] for wall
    walls_s: list[float] = field(default_factory=list)
    cost_s: list[float] = field(default_factory=list)  # what the stop rule watched
    stop_reason: str = ""
    # per iteration: when the device had finished its work (after the sync; CUDA only):
    # the GPU work still queued after the last launch ends here, not at the last op
    synced_ns: list[int] = field(default_factory=list)


def relative_halfwidth(xs: list[float]) -> float:
    """95% confidence half-width of the mean of `xs`, relative to the mean (inf if < 2)."""
    n = len(xs)
    if n < 2:
        return math.inf
    mean = sum(xs) / n
    if mean <= 0:
        return math.inf
    var = sum((x - mean) ** 2 for x in xs) / (n - 1)
    return 1.96 * math.sqrt(var / n) / mean


def timed_iterations(
    call: Callable[[], Any],
    min_iterations: int,
    sync: bool,
    cpu_clock: bool,
    target_rel: float = TARGET_REL,
    max_iterations: int = MAX_ITERATIONS,
    budget_s: float = BUDGET_S,
    on_iteration: Callable[[], None] | None = None,
    min_duration_s: float = 0.0,
) -> TimingPass:
    """Run `call` under a timing capture at least `min_iterations` times and for at least
    `min_duration_s` (a sensor that updates every 100 ms cannot tell five 3 ms calls
    apart: an A/A of two such recordings differed by 19%), then until the iteration
    cost is stable (see module docstring)."""
    import torch

    out = TimingPass()
    floor = max(1, min_iterations)
    cap = max(floor, max_iterations)
    gc_was_enabled = gc.isenabled()
    gc.collect()  # a full collection once; per iteration the young generation suffices
    t_start = time.perf_counter()
    try:
        while True:
            gc.collect(0)
            gc.disable()
            tc = CpuTimingCapture() if cpu_clock else TimingCapture()
            w0 = time.perf_counter_ns()
            c0 = time.process_time_ns()
            with tc:
                call()
            if sync:
                torch.cuda.synchronize()
            w1 = time.perf_counter_ns()
            if sync:
                out.synced_ns.append(w1)
            c1 = time.process_time_ns()
            if gc_was_enabled:
                gc.enable()
            out.iterations.append(tc.events)
            out.walls_s.append((w1 - w0) / 1e9)
            if isinstance(tc, CpuTimingCapture):  # that is, cpu_clock
                out.cpu_windows.append(tc.cpu_windows)
                out.cost_s.append((c1 - c0) / 1e9)
            else:
                out.cost_s.append((w1 - w0) / 1e9)
            n = len(out.walls_s)
            if on_iteration is not None:  # a progress display, outside the timed window
                on_iteration()
            if n < floor or time.perf_counter() - t_start < min_duration_s:
                continue
            if n >= MIN_FOR_CI and relative_halfwidth(out.cost_s) <= target_rel:
                out.stop_reason = "stable"
            elif n >= cap:
                out.stop_reason = "max-iterations"
            elif time.perf_counter() - t_start > budget_s and n >= max(floor, 2):
                out.stop_reason = "budget"
            else:
                continue
            return out
    finally:
        if gc_was_enabled:
            gc.enable()
