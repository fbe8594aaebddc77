"""Least-squares per-type power from coarse windows."""

from __future__ import annotations

import numpy as np
import pytest

from magneton.model import MagnetonError, OpRecord, Profile, RunInfo
from magneton.tracer.energy.lsq import build_windows, solve, solve_trace, validate
from magneton.tracer.energy.session import GAP_TYPE, EnergySession, Trace

TRUE = {"aten::mm": 300.0, "aten::add": 120.0, "aten::softmax": 200.0}
IDLE = 50.0


def _synthetic_run(seed: int, n_ops: int = 3000):
    """Random short ops (0.2-2 ms) in blocks of varying mix, gaps at idle power."""
    rng = np.random.default_rng(seed)
    names = list(TRUE)
    t = 0
    ops = []
    for block in range(n_ops // 30):
        mix = rng.dirichlet([0.5, 0.5, 0.5])
        for _ in range(30):
            name = names[int(rng.choice(3, p=mix))]
            d = int(rng.uniform(0.2e6, 2e6))
            op = OpRecord(idx=len(ops), name=name, windows_ns=[(t, t + d)])
            op.time_s = d / 1e9
            ops.append(op)
            t += d + int(rng.uniform(0.01e6, 0.3e6))
        t += int(rng.uniform(0, 20e6)) if block % 3 == 0 else 0
    return ops, t


def _true_power(ops, t_ns):
    p = np.full(len(t_ns), IDLE)
    s = np.array([op.windows_ns[0][0] for op in ops])
    e = np.array([op.windows_ns[0][1] for op in ops])
    w = np.array([TRUE[op.name] for op in ops])
    i = np.searchsorted(s, t_ns, side="right") - 1
    ok = (i >= 0) & (t_ns < e[np.clip(i, 0, None)])
    p[ok] = w[i[ok]]
    return p


def _sensor_counter(ops, end_ns, period_s=0.02, delay_s=0.0):
    """An energy counter updated every `period_s`, reporting `delay_s` late."""
    fine = np.arange(-int(0.5e9), end_ns + int(0.5e9), 20_000)  # 20 µs grid
    cum = np.concatenate([[0.0], np.cumsum(_true_power(ops, fine[:-1]) * 20e-6)])
    ticks = np.arange(fine[0] + int(delay_s * 1e9), fine[-1], int(period_s * 1e9))
    values = np.interp(ticks - int(delay_s * 1e9), fine, cum)
    return Trace(ticks, values, counter=True)


def test_solve_recovers_known_powers_from_exact_windows():
    rng = np.random.default_rng(0)
    A = rng.uniform(0, 0.01, size=(200, 3))
    p = np.array([300.0, 120.0, 50.0])
    sol = solve(A, A @ p, ["mm", "add", GAP_TYPE])
    assert [sol.powers_w[k] for k in ("mm", "add", GAP_TYPE)] == pytest.approx(p, rel=1e-3)
    assert sol.mape_pct < 0.1 and sol.residual_j < 0.01 * np.linalg.norm(A @ p)


def test_powers_recovered_from_sensor_windows_and_validated_on_second_run():
    ops, end = _synthetic_run(seed=1)
    sol = solve_trace(ops, _sensor_counter(ops, end, period_s=0.02))
    for name, w in TRUE.items():
        assert sol.powers_w[name] == pytest.approx(w, rel=0.03)
    assert sol.powers_w[GAP_TYPE] == pytest.approx(IDLE, rel=0.1)
    assert sol.mape_pct < 2.0
    # the solution predicts another run's windows
    ops2, end2 = _synthetic_run(seed=2)
    other = build_windows(ops2, _sensor_counter(ops2, end2, period_s=0.02))
    assert validate(sol, other) < 2.0


def test_lag_search_finds_a_late_sensor():
    ops, end = _synthetic_run(seed=3)
    trace = _sensor_counter(ops, end, period_s=0.02, delay_s=0.1)
    naive = solve_trace(ops, trace, lags_s=[0.0])
    found = solve_trace(ops, trace, lags_s=np.arange(0.0, 0.2, 0.01))
    assert found.lag_s == pytest.approx(0.1, abs=0.011)
    assert found.mape_pct < naive.mape_pct / 3
    assert found.powers_w["aten::mm"] == pytest.approx(300.0, rel=0.05)


def test_session_lsq_method_labels_ops_solved():
    ops, end = _synthetic_run(seed=4, n_ops=1500)
    trace = _sensor_counter(ops, end, period_s=0.02)
    s = EnergySession.create("model")  # replace its source with a recorded trace
    s.kind = "rapl"
    s.traces = lambda: [trace]  # type: ignore[method-assign]
    p = Profile(run=RunInfo(name="l"), ops=ops)
    s.attribute(p, method="lsq")
    assert p.run.energy_method == "solved"
    assert {op.energy_method for op in ops} == {"solved"}
    assert sum(op.energy_j for op in ops) == pytest.approx(p.run.energy_j, rel=1e-9)
    mm = [op for op in ops if op.name == "aten::mm"]
    add = [op for op in ops if op.name == "aten::add"]
    # per-second energy follows the solved powers (gap shares aside)
    assert sum(o.energy_j for o in mm) / sum(o.time_s for o in mm) > 1.8 * (
        sum(o.energy_j for o in add) / sum(o.time_s for o in add)
    )
    assert p.energy.lsq


def test_lsq_needs_windows():
    op = OpRecord(idx=0, name="aten::mm", windows_ns=[(0, 1000)])
    with pytest.raises(MagnetonError, match="least squares|sensor"):
        solve_trace([op], Trace(np.array([0]), np.array([0.0]), counter=True))
