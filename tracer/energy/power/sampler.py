"""The side-thread sampler: polls every live source on a fixed cadence on the recording
clock, and records a sensor error as a gap instead of raising into the workload.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from magneton.tracer.energy.power.base import PowerSource, SensorError


@dataclass
class ChannelSamples:
    device: str
    counter: bool
    aux: bool = False
    t_ns: list[int] = field(default_factory=list)
    values: list[float] = field(default_factory=list)
    gaps: list[tuple[int, int]] = field(default_factory=list)


class Sampler:
    """Polls a source on a daemon thread every `interval_s` and keeps every reading.

    Errors become gaps: the span from the first failed read to the next good one. The
    lock only guards list appends, so `snapshot()` can be taken while sampling continues
    (replay measures windows live).
    """

    def __init__(self, source: PowerSource, interval_s: float = 0.005):
        self.source = source
        self.interval_s = max(1e-4, float(interval_s))
        self.channels = [ChannelSamples(c.device, c.counter, c.aux) for c in source.channels]
        self.errors: list[str] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._gap_start: int | None = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def sample_once(self) -> None:
        t0 = time.perf_counter_ns()
        try:
            vals = self.source.read()
        except SensorError as e:
            with self._lock:
                if self._gap_start is None:
                    self._gap_start = t0
                if len(self.errors) < 20:
                    self.errors.append(str(e))
            return
        t1 = time.perf_counter_ns()
        t = (t0 + t1) // 2  # the read happened somewhere in [t0, t1]
        with self._lock:
            if self._gap_start is not None:
                for ch in self.channels:
                    ch.gaps.append((self._gap_start, t))
                self._gap_start = None
            for ch, v in zip(self.channels, vals, strict=True):
                ch.t_ns.append(t)
                ch.values.append(float(v))

    def _loop(self) -> None:
        next_t = time.perf_counter()
        while not self._stop.is_set():
            self.sample_once()
            next_t += self.interval_s
            delay = next_t - time.perf_counter()
            if delay < 0:  # fell behind (GIL, suspend): resynchronise, never burst
                next_t = time.perf_counter()
                delay = 0
            self._stop.wait(delay)

    def start(self) -> None:
        if self.running:
            return
        self._stop.clear()
        self.sample_once()
        self._thread = threading.Thread(target=self._loop, name="magneton-power", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join(timeout=5.0)
            self._thread = None
        self.sample_once()
        with self._lock:
            if self._gap_start is not None:
                end = time.perf_counter_ns()
                for ch in self.channels:
                    ch.gaps.append((self._gap_start, end))
                self._gap_start = None

    def snapshot(self) -> list[ChannelSamples]:
        with self._lock:
            return [
                ChannelSamples(
                    c.device, c.counter, c.aux, list(c.t_ns), list(c.values), list(c.gaps)
                )
                for c in self.channels
            ]
