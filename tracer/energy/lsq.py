"""Per-operator-type power by least squares over coarse sensor windows.

When operators last microseconds and the sensor refreshes every 20-100 ms, no single reading
belongs to one operator. But every sensor window contains a known *mix* of operator time, so
with many windows the system

    A[w, type] · P[type] = b[w]      (seconds of each type in window w, joules measured in w)

is overdetermined and the per-type power P can be solved for. Magneton solves it with
non-negative least squares on a ridge-augmented system

    [ A            ]       [ b             ]
    [ sqrt(λ)·D    ] P  =  [ sqrt(λ)·D·P0  ],   P >= 0

where D scales each column by its norm (so λ is a relative weight, independent of units)
and P0 is the mean power of the run: types with little data are pulled toward the mean
instead of to zero (plain ridge would bias rarely-seen types low), and the
non-negativity keeps collinear types from trading +/- hundreds of watts.

Time not covered by any op is its own column (`GAP_TYPE`), so idle/Python time is solved
too rather than assumed. A sensor that reports late (NVML: ~100 ms, paper §5.2) is handled
by `solve_trace(lags_s=...)`: the windows are shifted by each candidate lag and the lag with
the smallest residual wins. Quality is reported as MAPE over windows and the residual norm;
`validate` applies a solution to another run's windows (the portability check: a solution
that only fits its own run is overfitted).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import nnls

from magneton.model import MagnetonError, OpRecord
from magneton.tracer.timing.timeline import GAP_TYPE, Trace, op_type, op_windows


@dataclass
class Windows:
    """A linear system: rows are sensor windows, columns operator types."""

    A: np.ndarray  # seconds of each type in each window
    b: np.ndarray  # joules measured in each window
    types: list[str]
    t0_ns: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    t1_ns: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))


@dataclass
class LsqSolution:
    powers_w: dict[str, float]  # solved power per type (W), including GAP_TYPE
    mape_pct: float  # mean absolute percentage error over the fitted windows
    residual_j: float  # ||A·P - b||_2
    windows: int
    types: list[str]
    ridge: float
    lag_s: float = 0.0
    prior_w: float = 0.0
    seconds_by_type: dict[str, float] = field(default_factory=dict)

    def predict(self, w: Windows) -> np.ndarray:
        p = np.array([self.powers_w.get(t, 0.0) for t in w.types])
        return w.A @ p

    def to_json(self) -> dict:
        return {
            "powers_w": self.powers_w,
            "mape_pct": self.mape_pct,
            "residual_j": self.residual_j,
            "windows": self.windows,
            "lag_s": self.lag_s,
            "ridge": self.ridge,
        }


def mape_pct(b: np.ndarray, pred: np.ndarray) -> float:
    ok = np.abs(b) > 1e-12
    if not ok.any():
        return float("nan")
    return float(100.0 * np.mean(np.abs(b[ok] - pred[ok]) / np.abs(b[ok])))


def solve(
    A: np.ndarray,
    b: np.ndarray,
    types: list[str],
    ridge: float = 1e-4,
    prior_w: float | None = None,
) -> LsqSolution:
    """Non-negative, ridge-regularised least squares for per-type power."""
    A = np.asarray(A, float)
    b = np.asarray(b, float)
    if A.ndim != 2 or A.shape[0] != len(b) or A.shape[1] != len(types):
        raise ValueError("A must be windows x types, b one energy per window")
    if A.shape[0] == 0:
        raise MagnetonError("least squares needs at least one sensor window")
    used = A.sum(axis=0) > 0
    if prior_w is None:
        tot_t = A.sum()
        prior_w = float(b.sum() / tot_t) if tot_t > 0 else 0.0
    Au = A[:, used]
    norms = np.linalg.norm(Au, axis=0)
    D = np.diag(np.sqrt(ridge) * norms)
    A_aug = np.vstack([Au, D])
    b_aug = np.concatenate([b, D @ np.full(Au.shape[1], prior_w)])
    x_used, _ = nnls(A_aug, b_aug, maxiter=50 * max(1, Au.shape[1]))
    x = np.zeros(len(types))
    x[used] = x_used
    pred = A @ x
    return LsqSolution(
        powers_w={t: float(v) for t, v, u in zip(types, x, used, strict=True) if u},
        mape_pct=mape_pct(b, pred),
        residual_j=float(np.linalg.norm(pred - b)),
        windows=int(A.shape[0]),
        types=[t for t, u in zip(types, used, strict=True) if u],
        ridge=ridge,
        prior_w=float(prior_w),
        seconds_by_type={t: float(s) for t, s in zip(types, A.sum(axis=0), strict=True) if s > 0},
    )


def validate(solution: LsqSolution, other: Windows) -> float:
    """MAPE (%) of `solution` predicting another run's windows (types it never saw get 0 W)."""
    return mape_pct(other.b, solution.predict(other))


class _TypeTime:
    """Seconds of one type's intervals before time t, vectorised and overlap-safe:
    F(t) = sum_i clip(t - s_i, 0, d_i) = sum_{s_i<=t}(t - s_i) - sum_{e_i<=t}(t - e_i)."""

    def __init__(self, starts: np.ndarray, ends: np.ndarray):
        self.s = np.sort(starts.astype(float))
        self.e = np.sort(ends.astype(float))
        self.cs = np.concatenate([[0.0], np.cumsum(self.s)])
        self.ce = np.concatenate([[0.0], np.cumsum(self.e)])

    def __call__(self, t: np.ndarray) -> np.ndarray:
        t = t.astype(float)
        ns = np.searchsorted(self.s, t, side="right")
        ne = np.searchsorted(self.e, t, side="right")
        return (ns * t - self.cs[ns]) - (ne * t - self.ce[ne])


def _update_instants(trace: Trace) -> np.ndarray:
    """Times at which the sensor delivered a fresh value (stale repeats dropped)."""
    if trace.counter:
        return trace.t_ns
    p = trace.p
    keep = np.ones(len(p), bool)
    keep[1:] = p[1:] != p[:-1]
    return trace.t_ns[keep]


def build_windows(
    ops: list[OpRecord],
    trace: Trace,
    lag_s: float = 0.0,
    key=op_type,
    min_window_s: float = 0.0,
) -> Windows:
    """One row per sensor update interval: b = energy the sensor reported in it, A = seconds
    each op type ran in the same interval shifted back by `lag_s` (what the sensor saw).

    Windows overlapping a sensor gap, or outside the recorded activity, are dropped.
    Consecutive updates are merged until a window lasts `min_window_s`.
    """
    _, wins = op_windows(ops)
    by_type: dict[str, tuple[list[int], list[int]]] = {}
    all_s, all_e = [], []
    for op, ws in zip(ops, wins, strict=True):
        k = key(op)
        ss, ee = by_type.setdefault(k, ([], []))
        for w in ws:
            if w is None:
                continue
            start, end = w
            if end > start:
                ss.append(start)
                ee.append(end)
                all_s.append(start)
                all_e.append(end)
    if not all_s:
        raise MagnetonError("no timed operators to build least-squares windows from")
    u = _update_instants(trace)
    if min_window_s > 0 and len(u) > 2:
        keep = [0]
        for i in range(1, len(u)):
            if (u[i] - u[keep[-1]]) / 1e9 >= min_window_s:
                keep.append(i)
        u = u[keep]
    if len(u) < 2:
        raise MagnetonError("the power trace has fewer than two sensor updates")
    t0, t1 = u[:-1], u[1:]
    lag_ns = int(lag_s * 1e9)
    a0, a1 = t0 - lag_ns, t1 - lag_ns
    lo, hi = min(all_s), max(all_e)
    sel = (a1 > lo) & (a0 < hi)
    for g0, g1 in trace.gaps:
        sel &= ~((t0 < g1) & (t1 > g0))
    t0, t1, a0, a1 = t0[sel], t1[sel], a0[sel], a1[sel]
    types = sorted(by_type)
    A = np.zeros((len(t0), len(types) + 1))
    for j, t in enumerate(types):
        ss, ee = by_type[t]
        F = _TypeTime(np.asarray(ss, np.int64), np.asarray(ee, np.int64))
        A[:, j] = (F(a1) - F(a0)) / 1e9
    span = (a1 - a0) / 1e9
    # the gap column only counts time inside the run's activity: outside it the sensor sees
    # idle/other work that no op-type power should absorb
    lo_c = np.clip(a0, lo, hi)
    hi_c = np.clip(a1, lo, hi)
    inside = np.maximum(0, hi_c - lo_c) / 1e9
    A[:, -1] = np.maximum(0.0, inside - A[:, :-1].sum(axis=1))
    covered = inside / np.where(span > 0, span, 1)
    full = covered > 0.999  # windows partly outside the run would mix in unknown idle
    b = trace.energy_j(t0, t1)
    return Windows(A[full], b[full], types + [GAP_TYPE], t0[full], t1[full])


def solve_trace(
    ops: list[OpRecord],
    trace: Trace,
    lags_s=(0.0,),
    ridge: float = 1e-4,
    key=op_type,
    min_window_s: float = 0.0,
) -> LsqSolution:
    """Solve per-type power from one trace, picking the sensor lag with least residual."""
    best: LsqSolution | None = None
    last_err: Exception | None = None
    for lag in lags_s:
        try:
            w = build_windows(ops, trace, lag_s=float(lag), key=key, min_window_s=min_window_s)
        except MagnetonError as e:
            last_err = e
            continue
        if len(w.b) < 2:
            continue
        sol = solve(w.A, w.b, w.types, ridge=ridge)
        sol.lag_s = float(lag)
        # compare lags by residual per window: a lag drops windows at the edges
        if best is None or sol.residual_j / max(1, sol.windows) < best.residual_j / max(
            1, best.windows
        ):
            best = sol
    if best is None:
        raise MagnetonError(
            "not enough sensor windows inside the run for least squares"
            + (f" ({last_err})" if last_err else "")
            + ": record more iterations (--repeat) so the run spans many sensor updates"
        )
    return best
