"""A run's time line: power traces over time, and which operator each instant is charged to.

`Trace` turns a sensor's samples into energy over any window (trapezoid rule on power
readings, exact differences on energy counters, see tracer/energy/session.py for why); `tile`
charges every instant of an iteration to the operator running then, or to the nearest one
across a gap; `op_windows` gives each operator's timed windows.

This module is torch-free and needs nothing else of the tracer at run time: attribution
(tracer/energy/session.py), the least-squares split (tracer/energy/lsq.py) and diagnosis (which re-tiles
a stored run to get the seconds its energies cover) all build on it. It was part of
energy.py; lsq.py needed it while energy.py needed lsq.py, an import loop.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from magneton.model import OpRecord, PowerSeries

if TYPE_CHECKING:  # a sampler's output type only; power/'s sources are not needed here
    from magneton.tracer.energy.power.sampler import ChannelSamples

MAX_STORED_SAMPLES = 4000

# ---------------------------------------------------------------------------------------
# Traces
# ---------------------------------------------------------------------------------------


class Trace:
    """A device's energy as a function of time, built from samples.

    `counter=False`: `values` are watts; energy is the trapezoid integral of the linear
    interpolation between samples. `counter=True`: `values` are cumulative joules;
    unchanged (stale) readings are dropped and power is constant between update instants.
    Outside the sampled range the nearest sample's power is extended.
    """

    def __init__(
        self,
        t_ns,
        values,
        counter: bool = False,
        gaps: list[tuple[int, int]] | None = None,
        device: str = "",
    ):
        t = np.asarray(t_ns, dtype=np.int64)
        v = np.asarray(values, dtype=float)
        if len(t) == 0:
            raise ValueError("empty power trace")
        order = np.argsort(t, kind="stable")
        t, v = t[order], v[order]
        self.device = device
        self.counter = counter
        self.gaps = list(gaps or [])
        self.t_ref = int(t[0])
        if counter:
            # keep update instants only. When polls outpace the counter (NVML: updates
            # every 20-100 ms, polled every 5 ms) a change is preceded by stale repeats and
            # happened somewhere between the last unchanged poll and the first changed
            # one: take the midpoint, since a poll delayed by a busy interpreter (GIL)
            # would otherwise date the update late and bias windows whose edges saw
            # different delays. When every poll sees a change (RAPL, ~1 ms updates), the
            # value is fresh at the poll and the poll time is kept.
            changed = np.ones(len(v), dtype=bool)
            changed[1:] = v[1:] != v[:-1]
            idx = np.nonzero(changed)[0]
            tk = t[idx].copy()
            after_stale = (idx >= 2) & ~changed[np.maximum(idx - 1, 0)]
            j = idx[after_stale]
            tk[after_stale] = (t[j - 1] + t[j]) // 2
            t, v = tk, v[idx]
        self.t_ns = t
        self.ts = (t - self.t_ref) / 1e9
        if counter:
            self.cum = v - v[0]
            if len(t) >= 2:
                seg = np.diff(self.ts)
                seg[seg <= 0] = 1e-12
                self.seg_w = np.diff(self.cum) / seg
            else:
                self.seg_w = np.zeros(0)
        else:
            self.p = v
            if len(t) >= 2:
                dt = np.diff(self.ts)
                self.cum = np.concatenate([[0.0], np.cumsum(0.5 * (v[:-1] + v[1:]) * dt)])
            else:
                self.cum = np.zeros(1)

    @classmethod
    def from_samples(cls, s: ChannelSamples) -> Trace:
        return cls(s.t_ns, s.values, counter=s.counter, gaps=s.gaps, device=s.device)

    @classmethod
    def from_series(cls, s: PowerSeries) -> Trace:
        return cls(s.t_ns, s.watts, counter=False, gaps=s.gaps, device=s.device)

    def cum_j(self, t_ns) -> np.ndarray:
        """Energy (J) from the first sample to each time in `t_ns` (negative before it)."""
        x = (np.asarray(t_ns, dtype=np.int64) - self.t_ref) / 1e9
        ts, n = self.ts, len(self.ts)
        if n == 1:
            p0 = 0.0 if self.counter else float(self.p[0])
            return p0 * (x - ts[0])
        i = np.clip(np.searchsorted(ts, x, side="right") - 1, 0, n - 2)
        dt = x - ts[i]
        if self.counter:
            out = self.cum[i] + self.seg_w[i] * dt
            last = x > ts[-1]
            out[last] = self.cum[-1] + self.seg_w[-1] * (x[last] - ts[-1])
            return out
        p = self.p
        seg = ts[i + 1] - ts[i]
        seg = np.where(seg <= 0, 1e-12, seg)
        slope = (p[i + 1] - p[i]) / seg
        inside = self.cum[i] + p[i] * dt + 0.5 * slope * dt * dt
        before = p[0] * (x - ts[0])
        after = self.cum[-1] + p[-1] * (x - ts[-1])
        return np.where(x < ts[0], before, np.where(x > ts[-1], after, inside))

    def energy_j(self, a_ns, b_ns) -> np.ndarray:
        return self.cum_j(b_ns) - self.cum_j(a_ns)

    def mean_power_w(self, a_ns: int, b_ns: int) -> float:
        if b_ns <= a_ns:
            return float("nan")
        return float(self.energy_j(np.array([a_ns]), np.array([b_ns]))[0]) / ((b_ns - a_ns) / 1e9)

    def covers(self, a_ns: int, b_ns: int) -> bool:
        return bool(self.t_ns[0] <= a_ns and self.t_ns[-1] >= b_ns)

    def power_points(self) -> tuple[np.ndarray, np.ndarray]:
        """(t_ns, watts) for display/storage: readings, or counter-derived step powers."""
        if not self.counter:
            return self.t_ns.copy(), self.p.copy()
        if len(self.t_ns) < 2:
            return self.t_ns.copy(), np.zeros(len(self.t_ns))
        w = np.append(self.seg_w, self.seg_w[-1])
        return self.t_ns.copy(), w

    def to_series(self, source: str, max_samples: int = MAX_STORED_SAMPLES) -> PowerSeries:
        t, w = self.power_points()
        t, w = downsample(t, w, max_samples)
        return PowerSeries(
            device=self.device,
            source=source,
            t_ns=[int(x) for x in t],
            watts=[float(x) for x in w],
            gaps=[(int(a), int(b)) for a, b in self.gaps],
        )


def downsample(t: np.ndarray, w: np.ndarray, max_samples: int) -> tuple[np.ndarray, np.ndarray]:
    """Average into at most `max_samples` equal-count bins (keeps the first/last instants)."""
    n = len(t)
    if n <= max_samples or max_samples < 2:
        return t, w
    edges = np.linspace(0, n, max_samples + 1).astype(int)
    tb = np.add.reduceat(t.astype(float), edges[:-1]) / np.diff(edges)
    wb = np.add.reduceat(w.astype(float), edges[:-1]) / np.diff(edges)
    tb[0], tb[-1] = t[0], t[-1]
    return tb.astype(np.int64), wb


# ---------------------------------------------------------------------------------------
# Tiling: which op is charged for each instant of an iteration
# ---------------------------------------------------------------------------------------


@dataclass
class Pieces:
    """Time pieces charged to ops: op `op[i]` gets `weight[i]` of the energy in [a[i], b[i]].
    `own[i]` is False for gap pieces (time between ops charged to the nearest op)."""

    op: np.ndarray
    a: np.ndarray
    b: np.ndarray
    weight: np.ndarray
    own: np.ndarray


def tile(op_ids: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> Pieces:
    """Charge every instant of [min start, max end] to the op(s) running or nearest."""
    n = len(op_ids)
    if n == 0:
        e = np.zeros(0)
        return Pieces(e.astype(int), e.astype(np.int64), e.astype(np.int64), e, e.astype(bool))
    ends = np.maximum(ends, starts)
    order = np.lexsort((ends, starts))
    ids, s, e = op_ids[order], starts[order], ends[order]
    running_max = np.maximum.accumulate(e)
    if n == 1 or np.all(s[1:] >= running_max[:-1]):
        return _tile_sequential(ids, s, e)
    return _tile_general(ids, s, e)


def _tile_sequential(ids, s, e) -> Pieces:
    # No overlap: own windows, plus each gap split at its midpoint between neighbours.
    gap_a, gap_b = e[:-1], s[1:]
    mid = gap_a + (gap_b - gap_a) // 2
    has_gap = gap_b > gap_a
    left = np.nonzero(has_gap)[0]
    op = np.concatenate([ids, ids[left], ids[left + 1]])
    a = np.concatenate([s, gap_a[left], mid[left]])
    b = np.concatenate([e, mid[left], gap_b[left]])
    own = np.concatenate([np.ones(len(ids), bool), np.zeros(2 * len(left), bool)])
    return Pieces(op, a, b, np.ones(len(op)), own)


def _tile_general(ids, s, e) -> Pieces:
    # Sweep over elementary segments; overlapping ops share equally, gaps go to the ops
    # that ended at the gap's start (first half) and those starting at its end (second half).
    bounds = np.unique(np.concatenate([s, e]))
    starts_at: dict[int, list[int]] = {}
    ends_at: dict[int, list[int]] = {}
    for k in range(len(ids)):
        if e[k] == s[k]:
            continue
        starts_at.setdefault(int(s[k]), []).append(k)
        ends_at.setdefault(int(e[k]), []).append(k)
    out_op, out_a, out_b, out_w, out_own = [], [], [], [], []
    active: set[int] = set()
    last_ended: list[int] = []
    for j in range(len(bounds) - 1):
        t0, t1 = int(bounds[j]), int(bounds[j + 1])
        ended = ends_at.get(t0, [])
        for k in ended:
            active.discard(k)
        if ended:
            last_ended = list(ended)
        for k in starts_at.get(t0, []):
            active.add(k)
        if active:
            w = 1.0 / len(active)
            for k in active:
                out_op.append(ids[k])
                out_a.append(t0)
                out_b.append(t1)
                out_w.append(w)
                out_own.append(True)
        else:
            nxt = starts_at.get(t1, [])
            left = last_ended or nxt
            right = nxt or last_ended
            mid = t0 + (t1 - t0) // 2
            for group, a, b in ((left, t0, mid), (right, mid, t1)):
                if not group or b <= a:
                    continue
                w = 1.0 / len(group)
                for k in group:
                    out_op.append(ids[k])
                    out_a.append(a)
                    out_b.append(b)
                    out_w.append(w)
                    out_own.append(False)
    return Pieces(
        np.asarray(out_op, dtype=int),
        np.asarray(out_a, dtype=np.int64),
        np.asarray(out_b, dtype=np.int64),
        np.asarray(out_w, dtype=float),
        np.asarray(out_own, dtype=bool),
    )


def op_windows(ops: list[OpRecord]) -> tuple[int, list[list[tuple[int, int] | None]]]:
    """(iterations, per-op windows, one per iteration: None where the op did not run in
    that iteration, tracer/timing/alignment.py). Falls back to (start_ns, end_ns) when the
    recorder gave no per-iteration windows; ops without any timing get no window."""
    wins: list[list[tuple[int, int] | None]] = []
    for op in ops:
        if op.windows_ns:
            wins.append([None if w is None else (int(w[0]), int(w[1])) for w in op.windows_ns])
        elif op.end_ns > op.start_ns or op.start_ns:
            wins.append([(int(op.start_ns), int(op.end_ns))])
        else:
            wins.append([])
    iters = max((len(w) for w in wins), default=0)
    return iters, wins


GAP_TYPE = "(between ops)"


def op_type(op: OpRecord) -> str:
    return op.name
