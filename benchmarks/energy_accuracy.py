"""Accuracy of per-operator energy methods against a ground truth we control.

Paper Table 4 compares, per operator, a physical meter with Zeus (NVML begin/end counters)
and with Magneton's replay. This machine has no GPU and no meter, so the benchmark builds
the same experiment from parts whose truth is known:

* Real operators run on this CPU (aten::arange, aten::clone from `.contiguous()` of a
  permuted tensor, aten::addmm from `F.linear`, at sizes of ~1.5-5 ms on an idle
  2-core machine: large enough that the truth-marking mode's ~10 µs is noise). A bottom
  `TorchDispatchMode` marks every execution, anywhere (the recorded run, replay loops),
  on a *true power timeline*: a fixed power per op type while it runs, idle otherwise.
  The default powers are the meter readings of paper Table 4.
* A simulated NVML sensor reads that timeline the way the paper and Yang et al. (SC24)
  describe NVIDIA's: a value refreshed at 10-50 Hz (default 20 Hz), each the boxcar
  average of a short window (default 25 ms: "part-time" sampling), reported ~100 ms late,
  with 1 % noise; the total-energy counter accumulates those values.
* A fake `pynvml` module (real constants and error classes, simulated readings) is put in
  `sys.modules` before anything imports it, so Magneton's NVML source *and the Zeus
  package itself* (`zeus.monitor.ZeusMonitor`) read the simulated sensor unmodified.

Then, in one run, every method measures the same operator executions:

  point      power read at each op's begin and end, times its duration (the naive way)
  trapezoid  Magneton's side-thread sampler on the sensor's power readings (the
             instantaneous field, which the fake answers with the simulated sensor's
             value, as it does nvmlDeviceGetPowerUsage), trapezoid over each op window
  counter    the same on the total-energy counter (exact between counter updates)
  lsq        least squares per op type over sensor windows with lag search
  zeus       ZeusMonitor.begin_window / end_window around every op (paper's baseline)
  zeus-approx  the same with approx_instant_energy=True (instant power × time when the
             counter did not move inside the window)
  replay     Magneton's replay (tracer/energy/replay.py) with the counter session

Error per op type = (sum of estimated J - sum of true J) / sum of true J over all its
executions in the recorded run. `--json OUT` writes every number; `replay_abs_error_pct`
is the worst replay error over the three op types.
"""

from __future__ import annotations

import argparse
import bisect
import json
import math
import os
import statistics
import sys
import threading
import time
import types
import warnings
from dataclasses import dataclass, field

import numpy as np

TRUE_W = {"aten::arange": 266.0, "aten::clone": 317.0, "aten::addmm": 455.0}
LABEL = {
    "aten::arange": "arange",
    "aten::clone": "contiguous (aten::clone)",
    "aten::addmm": "linear (aten::addmm)",
}
OTHER_W = 120.0  # views etc. (aten::permute, aten::t): microseconds, barely matter
IDLE_W = 60.0


# ---------------------------------------------------------------------------------------
# Ground truth and the simulated sensor
# ---------------------------------------------------------------------------------------


class TruthTimeline:
    """True power: `w` watts inside each marked execution, IDLE_W elsewhere."""

    def __init__(self, idle_w: float = IDLE_W):
        self.idle_w = idle_w
        self.s: list[int] = []
        self.e: list[int] = []
        self.w: list[float] = []
        self.open: tuple[int, float] | None = None
        self.lock = threading.Lock()

    def begin(self, w: float) -> None:
        t = time.perf_counter_ns()
        with self.lock:
            self.open = (t, w)

    def end(self) -> None:
        t = time.perf_counter_ns()
        with self.lock:
            if self.open is not None:
                s, w = self.open
                self.s.append(s)
                self.e.append(t)
                self.w.append(w)
                self.open = None

    def energy_j(self, a: int, b: int) -> float:
        """True joules in [a, b] (ns)."""
        if b <= a:
            return 0.0
        with self.lock:
            covered = 0
            extra = 0.0
            i = bisect.bisect_right(self.e, a)
            while i < len(self.s) and self.s[i] < b:
                lo, hi = max(a, self.s[i]), min(b, self.e[i])
                if hi > lo:
                    covered += hi - lo
                    extra += (hi - lo) * self.w[i]
                i += 1
            if self.open is not None and self.open[0] < b:
                lo = max(a, self.open[0])
                covered += b - lo
                extra += (b - lo) * self.open[1]
        return (extra + (b - a - covered) * self.idle_w) / 1e9


class SimSensor:
    """NVML-like sensor over a TruthTimeline (see module docstring)."""

    def __init__(
        self,
        truth: TruthTimeline,
        hz: float = 20.0,
        window_s: float = 0.025,
        delay_s: float = 0.1,
        noise: float = 0.01,
        seed: int = 0,
    ):
        self.truth = truth
        self.period_ns = int(1e9 / hz)
        self.window_ns = int(window_s * 1e9)
        self.delay_ns = int(delay_s * 1e9)
        self.noise = np.random.default_rng(seed).normal(0.0, noise, 1 << 16)
        self.t0 = time.perf_counter_ns()
        self.powers: list[float] = []
        self.cum: list[float] = [0.0]  # cum[k+1]: joules counted after tick k
        self.lock = threading.Lock()

    def _advance(self, now: int) -> int:
        k_now = (now - self.t0) // self.period_ns
        with self.lock:
            while len(self.powers) <= k_now:
                k = len(self.powers)
                tau = self.t0 + k * self.period_ns
                b = tau - self.delay_ns
                a = b - self.window_ns
                p = self.truth.energy_j(a, b) / (self.window_ns / 1e9)
                p *= 1.0 + self.noise[k % len(self.noise)]
                self.powers.append(p)
                self.cum.append(self.cum[-1] + p * self.period_ns / 1e9)
        return k_now

    def power_w(self) -> float:
        k = self._advance(time.perf_counter_ns())
        return self.powers[k] if k >= 0 else self.truth.idle_w

    def energy_j(self) -> float:
        k = self._advance(time.perf_counter_ns())
        return self.cum[k + 1] if k >= 0 else 0.0


def make_fake_pynvml(sensor: SimSensor) -> types.ModuleType:
    """A `pynvml` whose constants and NVMLError are the real ones and whose readings come
    from `sensor` (one Hopper-class GPU)."""
    import pynvml as real

    fake = types.ModuleType("pynvml")
    fake.__dict__.update({k: v for k, v in real.__dict__.items() if not k.startswith("__")})
    handle = object()

    def not_supported(*_a, **_k):
        raise real.NVMLError(real.NVML_ERROR_NOT_SUPPORTED)

    fake.nvmlInit = lambda *a, **k: None
    fake.nvmlShutdown = lambda *a, **k: None
    fake.nvmlDeviceGetCount = lambda: 1
    fake.nvmlDeviceGetHandleByIndex = lambda i: handle
    fake.nvmlDeviceGetUUID = lambda h: "GPU-5e000000-0000-0000-0000-000000000000"
    fake.nvmlDeviceGetName = lambda h: "Simulated NVML sensor"
    fake.nvmlDeviceGetArchitecture = lambda h: real.NVML_DEVICE_ARCH_HOPPER
    fake.nvmlDeviceGetPowerUsage = lambda h: int(round(sensor.power_w() * 1000))
    fake.nvmlDeviceGetTotalEnergyConsumption = lambda h: int(round(sensor.energy_j() * 1000))
    fake.nvmlDeviceGetTemperatureV = lambda h, sensor_type: 40
    fake.nvmlDeviceGetTemperature = lambda h, sensor_type: 40
    fake.nvmlDeviceGetC2cModeInfoV = not_supported

    def field_values(h, fields):
        # power fields (instant/average) read the same simulated sensor
        out = []
        for _ in fields:
            v = types.SimpleNamespace(uiVal=int(round(sensor.power_w() * 1000)))
            out.append(types.SimpleNamespace(nvmlReturn=real.NVML_SUCCESS, value=v))
        return out

    fake.nvmlDeviceGetFieldValues = field_values
    fake.nvmlDeviceGetPowerManagementLimit = lambda h: 700_000
    return fake


# ---------------------------------------------------------------------------------------
# Workload
# ---------------------------------------------------------------------------------------


def build_workload(seed: int, blocks: int, quick: bool):
    """A fixed random plan of blocks; each block mixes the three ops in its own proportions
    (so least-squares windows see different mixes) and some blocks end with idle time."""
    import torch
    import torch.nn.functional as F

    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    X = torch.randn(1024, 1024)
    x = torch.randn(128, 1024)
    W = torch.randn(1024, 1024)
    bias = torch.randn(1024)
    n_arange = 3_000_000
    kinds = ["arange", "contiguous", "linear"]
    plan: list[tuple[str, float]] = []
    for _ in range(blocks):
        mix = rng.dirichlet([0.6, 0.6, 0.6])
        n = int(rng.integers(8, 20 if quick else 30))
        for _ in range(n):
            plan.append((kinds[int(rng.choice(3, p=mix))], 0.0))
        if rng.random() < 0.5:
            plan.append(("sleep", float(rng.uniform(0.01, 0.06))))

    def fn():
        out = None
        for kind, arg in plan:
            if kind == "arange":
                out = torch.arange(0, n_arange, dtype=torch.float32)
            elif kind == "contiguous":
                out = X.permute(1, 0).contiguous()
            elif kind == "linear":
                out = F.linear(x, W, bias)
            else:
                time.sleep(arg)
        return out

    return fn


# ---------------------------------------------------------------------------------------
# Benchmark
# ---------------------------------------------------------------------------------------


@dataclass
class OpObs:
    name: str
    s: int
    e: int
    point_j: float = 0.0
    zeus_j: float = float("nan")
    zeus_approx_j: float = float("nan")


@dataclass
class MethodResult:
    est_j: dict[str, float] = field(default_factory=dict)
    call_err: dict[str, float] = field(default_factory=dict)  # median |per-call error| %
    extra: dict = field(default_factory=dict)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", dest="json_out", help="write all numbers to this JSON file")
    ap.add_argument("--hz", type=float, default=20.0, help="sensor update rate (10-50)")
    ap.add_argument("--window-ms", type=float, default=25.0, help="sensor boxcar window")
    ap.add_argument("--delay-ms", type=float, default=100.0, help="sensor reporting delay")
    ap.add_argument("--noise", type=float, default=0.01, help="relative reading noise")
    ap.add_argument("--blocks", type=int, default=40, help="workload blocks")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="shorter workload (smoke test)")
    args = ap.parse_args(argv)
    t_start = time.perf_counter()

    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    truth = TruthTimeline()
    sensor = SimSensor(
        truth, args.hz, args.window_ms / 1e3, args.delay_ms / 1e3, args.noise, args.seed
    )
    sys.modules["pynvml"] = make_fake_pynvml(sensor)
    # imported only now, so they bind the simulated pynvml
    from zeus.monitor import ZeusMonitor

    from magneton.model import OpRecord, Profile, RunInfo
    from magneton.tracer.energy.lsq import solve_trace
    from magneton.tracer.energy.replay import replay_ops
    from magneton.tracer.energy.session import EnergySession, attribute_traces

    class TruthMode(TorchDispatchMode):
        """Bottom mode: every execution of every op lands on the true timeline."""

        def __torch_dispatch__(self, func, types_, args=(), kwargs=None):
            name = str(func._schema.name)
            truth.begin(TRUE_W.get(name, OTHER_W))
            try:
                return func(*args, **(kwargs or {}))
            finally:
                truth.end()

    nvml = sys.modules["pynvml"]
    h = nvml.nvmlDeviceGetHandleByIndex(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        zeus = ZeusMonitor(gpu_indices=[0], cpu_indices=[], approx_instant_energy=False)
        # Zeus's own fallback for windows shorter than a counter update: instant power × time
        zeus_approx = ZeusMonitor(gpu_indices=[0], cpu_indices=[], approx_instant_energy=True)
    obs: list[OpObs] = []

    class BenchRecorder(TorchDispatchMode):
        """The recorded run: op windows, begin/end point readings, Zeus windows."""

        def __torch_dispatch__(self, func, types_, args=(), kwargs=None):
            name = str(func._schema.name)
            wrap = name in TRUE_W
            if wrap:
                zeus.begin_window("op", sync_execution=False)
                zeus_approx.begin_window("op", sync_execution=False)
            p_b = nvml.nvmlDeviceGetPowerUsage(h) / 1000.0
            s = time.perf_counter_ns()
            out = func(*args, **(kwargs or {}))
            e = time.perf_counter_ns()
            p_e = nvml.nvmlDeviceGetPowerUsage(h) / 1000.0
            o = OpObs(name, s, e, point_j=0.5 * (p_b + p_e) * (e - s) / 1e9)
            if wrap:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    m = zeus_approx.end_window("op", sync_execution=False)
                    o.zeus_approx_j = m.gpu_energy[0]
                    o.zeus_j = zeus.end_window("op", sync_execution=False).gpu_energy[0]
            obs.append(o)
            return out

    fn = build_workload(args.seed, args.blocks if not args.quick else 8, args.quick)
    with TruthMode():
        fn()  # warm-up: allocator and thread pools

    sess_counter = EnergySession.create("nvml", interval_s=0.005, device="cuda")
    sess_power = EnergySession.create("nvml:power", interval_s=0.005, device="cuda")
    idle_c = sess_counter.measure_idle(0.5)
    idle_p = sess_power.measure_idle(0.5)
    sess_counter.start()
    sess_power.start()
    with TruthMode(), BenchRecorder():
        fn()
    time.sleep(args.delay_ms / 1e3 + 3 / args.hz)  # let the late sensor report the tail
    sess_power.stop()
    traces_c = sess_counter.traces()

    ops = []
    for i, o in enumerate(obs):
        ops.append(
            OpRecord(
                idx=i,
                name=o.name,
                device="cuda:0",
                start_ns=o.s,
                end_ns=o.e,
                windows_ns=[(o.s, o.e)],
                time_s=(o.e - o.s) / 1e9,
            )
        )
    profile = Profile(run=RunInfo(name="accuracy", repeat=1, device="cuda"), ops=ops)
    true_j = np.array([truth.energy_j(o.s, o.e) for o in obs])
    # truth inside each recorded window: the marked execution at its true power, idle for
    # the few microseconds of dispatch around it - what a perfect meter would report
    types_main = list(TRUE_W)
    by_type = {t: np.array([o.name == t for o in obs]) for t in types_main}
    truth_w = {
        t: float(sum(true_j[m]) / sum(ops[i].time_s for i in np.nonzero(m)[0]))
        for t, m in by_type.items()
    }

    results: dict[str, MethodResult] = {}

    def per_call(est: np.ndarray) -> MethodResult:
        r = MethodResult()
        for t, m in by_type.items():
            r.est_j[t] = float(est[m].sum())
            rel = np.abs(est[m] - true_j[m]) / true_j[m] * 100
            r.call_err[t] = float(np.median(rel))
        return r

    results["point"] = per_call(np.array([o.point_j for o in obs]))
    att_p = attribute_traces(ops, sess_power.traces())
    results["trapezoid"] = per_call(att_p.own_j)
    att_c = attribute_traces(ops, traces_c)
    results["counter"] = per_call(att_c.own_j)
    zeus_est = np.array([0.0 if math.isnan(o.zeus_j) else o.zeus_j for o in obs])
    results["zeus"] = per_call(zeus_est)
    zero = {t: float(np.mean(zeus_est[m] == 0.0) * 100) for t, m in by_type.items()}
    results["zeus"].extra["zero_windows_pct"] = zero
    za = np.array([0.0 if math.isnan(o.zeus_approx_j) else o.zeus_approx_j for o in obs])
    results["zeus-approx"] = per_call(za)

    lags = np.arange(0.0, 0.4, 0.005)
    sol = solve_trace(ops, traces_c[0], lags_s=lags)
    lsq_est = np.array([sol.powers_w.get(op.name, 0.0) * op.time_s for op in ops])
    results["lsq"] = per_call(lsq_est)
    results["lsq"].extra = {
        "lag_s": sol.lag_s,
        "mape_pct": sol.mape_pct,
        "windows": sol.windows,
        "powers_w": sol.powers_w,
    }

    targets = {next(i for i, op in enumerate(ops) if op.name == t) for t in types_main}
    with TruthMode():
        rep = replay_ops(
            fn, profile, sess_counter, ops=targets, min_window_s=0.2, trials=3, progress=False
        )
    sess_counter.stop()
    rep_power = {r.name: r.power_w for r in rep if not r.skipped}
    rep_est = np.array([rep_power.get(op.name, 0.0) * op.time_s for op in ops])
    results["replay"] = per_call(rep_est)
    results["replay"].extra = {
        r.name: {
            "power_w": r.power_w,
            "loop_calls": r.loop_calls,
            "trials": r.trials_run,
            "std_pct": r.std_pct,
            "stable": r.stable,
            "output_checked": r.output_checked,
            "skipped": r.skipped,
        }
        for r in rep
    }

    truth_tot = {t: float(true_j[m].sum()) for t, m in by_type.items()}
    errors = {
        name: {t: 100.0 * (r.est_j[t] - truth_tot[t]) / truth_tot[t] for t in types_main}
        for name, r in results.items()
    }
    elapsed = time.perf_counter() - t_start
    out = {
        "sensor": {
            "hz": args.hz,
            "window_ms": args.window_ms,
            "delay_ms": args.delay_ms,
            "noise": args.noise,
            "idle_w_true": IDLE_W,
            "idle_w_measured": {"counter": idle_c, "power": idle_p},
        },
        "ops": {
            t: {
                "executions": int(by_type[t].sum()),
                "mean_time_ms": float(
                    statistics.fmean(op.time_s for op, m in zip(ops, by_type[t], strict=True) if m)
                    * 1e3
                ),
                "true_w": TRUE_W[t],
                "true_w_in_window": truth_w[t],
                "true_j": truth_tot[t],
            }
            for t in types_main
        },
        "energy_error_pct": errors,
        "median_abs_call_error_pct": {n: r.call_err for n, r in results.items()},
        "estimated_j": {n: r.est_j for n, r in results.items()},
        "details": {n: r.extra for n, r in results.items() if r.extra},
        "replay_abs_error_pct": max(abs(errors["replay"][t]) for t in types_main),
        "zeus_abs_error_pct": max(abs(errors["zeus"][t]) for t in types_main),
        "zeus_approx_abs_error_pct": max(abs(errors["zeus-approx"][t]) for t in types_main),
        "elapsed_s": elapsed,
    }
    _print(out, types_main)
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump(out, f, indent=2)
    return 0


def _print(out: dict, types_main: list[str]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=max(Console().width, 150))
    s = out["sensor"]
    t = Table(
        title=(
            f"per-operator energy error vs ground truth (simulated NVML: {s['hz']:g} Hz, "
            f"{s['window_ms']:g} ms window, {s['delay_ms']:g} ms delay, {100 * s['noise']:g}% noise)"
        )
    )
    t.add_column("operator")
    t.add_column("calls", justify="right")
    t.add_column("ms/call", justify="right")
    t.add_column("true W", justify="right")
    methods = ["point", "trapezoid", "counter", "zeus", "zeus-approx", "lsq", "replay"]
    for m in methods:
        t.add_column(m, justify="right")
    for op in types_main:
        o = out["ops"][op]
        cells = [LABEL[op], str(o["executions"]), f"{o['mean_time_ms']:.2f}", f"{o['true_w']:.0f}"]
        for m in methods:
            e = out["energy_error_pct"][m][op]
            style = "green" if abs(e) <= 2 else ("yellow" if abs(e) <= 10 else "red")
            cells.append(f"[{style}]{e:+.1f}%[/]")
        t.add_row(*cells)
    console.print(t)
    z = out["details"]["zeus"]["zero_windows_pct"]
    console.print(
        "zeus: windows that read 0 J (counter not updated inside the op): "
        + ", ".join(f"{LABEL[k].split()[0]} {v:.0f}%" for k, v in z.items())
    )
    lsq = out["details"]["lsq"]
    console.print(
        f"lsq: lag {lsq['lag_s'] * 1e3:.0f} ms, {lsq['windows']} windows, "
        f"MAPE {lsq['mape_pct']:.1f}%"
    )
    console.print(
        f"replay max |error| {out['replay_abs_error_pct']:.2f}% "
        f"(paper: within 4.1% of a meter); zeus max |error| {out['zeus_abs_error_pct']:.1f}% "
        f"(paper: 72-81%); elapsed {out['elapsed_s']:.0f} s"
    )


if __name__ == "__main__":
    sys.exit(main())
