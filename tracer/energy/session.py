"""Per-operator energy: the session the recorder drives, and the attribution rules.

The recorder creates an `EnergySession`, measures the idle baseline, starts the session
around its timing pass, stops it, and calls `attribute(profile)`. Attribution fills, for
every operator, `flops`, `bytes`, `energy_j` (joules per entry call, mean over the timing
pass iterations) and `energy_method`, and for the run the totals, idle baseline, source and
method, plus a compact `profile.power` trace.

Rules, and the failure each one prevents:

* Energy, not power, is integrated over each window: each window's joules are the integral of the
  sampled trace over the window - trapezoid rule on power readings, exact differences on
  energy counters (RAPL `energy_uj`, NVML total energy). Reading power at begin/end gives
  stale or even negative numbers for sub-sample ops.
* Counters are de-duplicated to their update instants before use: a counter that updates
  every 100 ms but is polled every 5 ms would otherwise dump a whole update's joules into the
  5 ms slice that happened to see the change.
* Operators overlapping on one device share equally (Smaragdine's multiplicity rule); a
  board-level sensor cannot say which of two concurrent ops drew which watt.
* Time between operators (Python, hooks, launch overhead) is charged to the *nearest*
  operator: each gap is split at its midpoint, the first half to the op that just ended and
  the second half to the op about to start. Every instant of an iteration is then charged to
  exactly one op (or shared equally), so the per-op energies sum to the iteration's energy -
  the invariant `sum(op.energy_j) == run.energy_j` holds by construction, and the
  Python overhead of a five-op region stays inside that region instead of being smeared
  across unrelated ops (the proportional alternative).
* An iteration spans its first operator's start to its last operator's end; time between
  iterations belongs to the harness and is not charged.
* Sensor errors leave gaps (`PowerSeries.gaps`); across a gap, power is interpolated
  linearly between the last good and next good readings (counters still give the exact
  total across the gap). The gap is recorded so reports can flag it.
* The model source has no trace: each op costs `P_static·t + e_flop·FLOPs + e_byte·bytes`,
  gaps cost `P_static` per second, and the result is labelled "estimated". `t` is the
  process CPU time the op consumed when the timing pass read that clock
  (`attribute_cpu_time`; tracer/timing/passes.py): wall time grows with whatever another process
  takes, and priced as energy it made identical ops differ 15-150x between recordings.
  There the CPU time between two ops is the interpreter's and is kept apart as the next
  op's `interp_j` (reports show it as python rows), not split at a midpoint.
* Every iteration's per-op energies are kept (`Profile.energy.op_samples_j`) with the run's
  spread over iterations: detection derives each region's uncertainty from them.

`method="lsq"` solves per-operator-type power from coarse sensor windows (tracer/energy/lsq.py) and
uses it to split the measured total (labelled "solved"); use it when operators are much
shorter than the sensor's update period.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import numpy as np

from magneton.model import EnergySpread, MagnetonError, OpRecord, PowerSeries, Profile
from magneton.tracer.energy.flops import fill_work
from magneton.tracer.energy.power import (
    ChannelSamples,
    MeterSource,
    ModelCoefficients,
    NvmlSource,
    PowerSource,
    RaplSource,
    Sampler,
    estimate_meter_offset,
    load_model,
    meter_to_perf_ns,
    model_op_power_w,
    parse_meter_spec,
    read_meter_csv,
)
from magneton.tracer.timing.timeline import (
    GAP_TYPE,
    MAX_STORED_SAMPLES,
    Trace,
    downsample,
    op_type,
    op_windows,
    tile,
)

if TYPE_CHECKING:  # only the type: passes.py imports torch (through capture.dispatch)
    from magneton.tracer.timing.passes import TimingPass


def _device_key(device: str) -> str:
    """Map an op device ("cuda:0", "cpu") onto a series device family ("gpu:0", "cpu")."""
    d = device or "cpu"
    if d.startswith("cuda"):
        return "gpu:" + (d.split(":", 1)[1] if ":" in d else "0")
    return d.split(":", 1)[0]


def _series_family(series_device: str) -> str:
    if series_device.startswith("gpu:"):
        return series_device
    if series_device.startswith("cpu"):
        return "cpu"
    return ""  # "model", "meter": whole machine


@dataclass
class Attribution:
    """Result of charging one or more traces to ops (all per iteration, mean over iterations)."""

    energy_j: np.ndarray  # per op: own share + gap share
    own_j: np.ndarray  # per op: energy inside its own windows only
    charged_s: np.ndarray  # per op: seconds charged (own share + gap share)
    own_s: np.ndarray  # per op: seconds of its own windows (shared by overlap)
    run_energy_j: float
    span_s: float  # mean iteration span
    iterations: int
    # per timed iteration, per op: the energy charged in that iteration (what gives
    # every region an uncertainty); shape (iterations, ops), empty when unknown
    samples_j: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    interp_j: np.ndarray | None = None  # per op: interpreter share of energy_j
    # per timed iteration, per op: the interpreter's share in that iteration
    interp_samples_j: np.ndarray | None = None

    def head(self, n: int) -> Attribution:
        """The attribution of the first `n` ops only (the step's graph, without the work
        outside it): its span is the time charged to them."""
        charged = self.charged_s[:n]
        return Attribution(
            energy_j=self.energy_j[:n],
            own_j=self.own_j[:n],
            charged_s=charged,
            own_s=self.own_s[:n],
            run_energy_j=float(self.energy_j[:n].sum()),
            span_s=float(charged.sum()),
            iterations=self.iterations,
            samples_j=self.samples_j[:, :n] if self.samples_j.size else self.samples_j,
            interp_j=None if self.interp_j is None else self.interp_j[:n],
            interp_samples_j=(
                None if self.interp_samples_j is None else self.interp_samples_j[:, :n]
            ),
        )


def attribute_traces(
    ops: list[OpRecord],
    traces: list[Trace],
    extra_own_j: np.ndarray | None = None,
    reduce: str = "mean",
    synced_ns: list[int] | None = None,
    kernel_s: list[float] | None = None,
) -> Attribution:
    """Charge each trace's energy over every iteration to the ops on its device.

    A trace whose device matches no op's device (e.g. a whole-machine meter, or a GPU
    sensor for a CPU-only run) is charged to all ops. `extra_own_j` (per op, per iteration)
    is added on top - the model's dynamic energy.

    `reduce` turns the per-iteration charges into per-call figures: "mean" (a sensor's
    energy, which must add up to what it measured) or "min" (each op's cheapest
    iteration; for the time-based model, where another process stealing the core only
    ever adds time: see `EnergySession._attribute_model`).

    `synced_ns` (CUDA): when each iteration's device work had finished. An operator's
    window is its launch on the host; the GPU runs the queued kernels after it, and a
    GPU-bound call's last launch came at a fifth of the call (an H100, an MLP: the ops
    summed to 20% of the NVML counter's energy). The energy between the last launch and
    the sync is the queued work's: it is shared among the iteration's ops by their
    kernels' device time (`kernel_s`, from the structure pass), else by their windows.
    """
    if reduce not in ("mean", "min"):
        raise ValueError(f"reduce must be 'mean' or 'min', not {reduce!r}")
    n = len(ops)
    iters, wins = op_windows(ops)
    acc = np.zeros((4, n))  # per op: energy, own energy, charged s, own s
    span_total = 0.0
    # per iteration (energy, own, charged, own_s); NaN where an op has no window
    per_iter: list[np.ndarray] = []
    fam = np.array([_device_key(op.device) for op in ops])
    op_fams = {_device_key(op.device).split(":")[0] for op in ops}
    for k in range(iters):
        present = [(i, wk) for i, w in enumerate(wins) if len(w) > k and (wk := w[k]) is not None]
        if not present:
            continue
        idx = np.array([i for i, _ in present], dtype=int)
        before = acc.copy()
        s = np.array([w[0] for _, w in present], dtype=np.int64)
        e = np.array([w[1] for _, w in present], dtype=np.int64)
        span_total += _charge_iteration(acc, idx, s, e, traces, fam, op_fams)
        if synced_ns is not None and k < len(synced_ns) and synced_ns[k] > e.max():
            span_total += _charge_queued(acc, idx, s, e, int(synced_ns[k]), traces, kernel_s)
        step = acc - before
        absent = np.ones(n, bool)
        absent[idx] = False
        step[:, absent] = np.nan
        per_iter.append(step)
    extra = np.zeros(n) if extra_own_j is None else np.asarray(extra_own_j, float)
    samples = np.zeros((0, n))
    if per_iter:
        cube_e = np.stack(per_iter)[:, 0]  # (iterations, ops)
        samples = np.where(np.isnan(cube_e), 0.0, cube_e + extra)
    if reduce == "min" and per_iter:
        return _cheapest_iterations(per_iter, wins, iters, extra_own_j, samples)
    energy, own, charged, own_s = acc
    if extra_own_j is not None:
        counted = np.array([sum(x is not None for x in w) for w in wins], dtype=float)
        energy += extra_own_j * counted
        own += extra_own_j * counted
    if iters:
        energy /= iters
        own /= iters
        charged /= iters
        own_s /= iters
        span_total /= iters
    return Attribution(
        energy_j=energy,
        own_j=own,
        charged_s=charged,
        own_s=own_s,
        run_energy_j=float(energy.sum()),
        span_s=span_total,
        iterations=iters,
        samples_j=samples,
    )


def _charge_iteration(
    acc: np.ndarray,
    idx: np.ndarray,
    s: np.ndarray,
    e: np.ndarray,
    traces: list[Trace],
    fam: np.ndarray,
    op_fams: set[str],
) -> float:
    """Add one iteration's charges to `acc` (energy, own, charged s, own s per op) for the
    ops `idx` with windows [s, e) in ns; returns the iteration's span in seconds."""
    energy, own, charged, own_s = acc
    # time accounting is trace-independent: use the tiling of all ops
    pcs = tile(idx, s, e)
    dur = (pcs.b - pcs.a) / 1e9 * pcs.weight
    np.add.at(charged, pcs.op, dur)
    np.add.at(own_s, pcs.op[pcs.own], dur[pcs.own])
    for tr in traces:
        f = _series_family(tr.device)
        sel = np.ones(len(idx), bool)
        if f and (f in set(fam[idx]) or f.split(":")[0] in op_fams):
            sel = fam[idx] == f
            if not sel.any():
                continue
        p = pcs if sel.all() else tile(idx[sel], s[sel], e[sel])
        ej = tr.energy_j(p.a, p.b) * p.weight
        np.add.at(energy, p.op, ej)
        np.add.at(own, p.op[p.own], ej[p.own])
    return float((e.max() - s.min()) / 1e9)


def _charge_queued(
    acc: np.ndarray,
    idx: np.ndarray,
    s: np.ndarray,
    e: np.ndarray,
    synced: int,
    traces: list[Trace],
    kernel_s: list[float] | None,
) -> float:
    """Charge the energy from an iteration's last launch to its sync (the device's queued
    work, see `attribute_traces`) to its ops; returns that time in seconds."""
    energy, _, charged, _ = acc
    a = int(e.max())
    known = kernel_s or []
    weights = np.asarray([known[i] if i < len(known) else 0.0 for i in idx], float)
    if weights.sum() <= 0:
        weights = np.maximum(e - s, 0).astype(float)
    if weights.sum() <= 0:
        weights = np.ones(len(idx))
    share = weights / weights.sum()
    tail_s = (synced - a) / 1e9
    for tr in traces:
        ej = float(tr.energy_j(np.array([a]), np.array([synced]))[0])
        np.add.at(energy, idx, ej * share)
    np.add.at(charged, idx, tail_s * share)
    return tail_s


def _cheapest_iterations(
    per_iter: list[np.ndarray],
    wins: list[list[tuple[int, int] | None]],
    iters: int,
    extra_own_j: np.ndarray | None,
    samples: np.ndarray,
) -> Attribution:
    """reduce="min": each op's cheapest iteration, judged by its charged energy; its time
    goes with it. An op that ran in only some iterations (tracer/timing/alignment.py) is
    priced per iteration: its cheapest run times the share of iterations it ran in."""
    n = len(wins)
    cube = np.stack(per_iter)  # (iterations, 4, ops)
    e_k = np.where(np.isnan(cube[:, 0]), np.inf, cube[:, 0])
    best = np.argmin(e_k, axis=0)
    pick = cube[best, :, np.arange(n)].T  # (4, ops)
    ran = np.array([sum(x is not None for x in w) for w in wins], dtype=float)
    counted = ran / max(1, iters)  # 1 for an op every iteration ran
    pick = np.nan_to_num(pick, nan=0.0) * counted
    energy, own, charged, own_s = pick
    if extra_own_j is not None:
        energy = energy + extra_own_j * counted
        own = own + extra_own_j * counted
    return Attribution(
        energy_j=energy,
        own_j=own,
        charged_s=charged,
        own_s=own_s,
        run_energy_j=float(energy.sum()),
        # the picks tile a synthetic iteration: keeps energy − P_static·span equal to
        # the priced work, as with "mean"
        span_s=float(charged.sum()),
        iterations=iters,
        samples_j=samples,
    )


def attribute_cpu_time(
    ops: list[OpRecord], cpu_ns: np.ndarray, p_static_w: float, dyn_j: np.ndarray
) -> Attribution:
    """The model priced on the CPU time the process consumed (tracer/timing/passes.py says why).

    `cpu_ns[k, i]` is op i's (start, end) on the process CPU clock in iteration k. Op i is
    charged its own CPU time plus the CPU time between the previous op's end and its start:
    that is the interpreter running the Python code that led to this call (the frame its
    recorded stack ends in), kept apart as `interp_j` so reports show it as python rows,
    not as the op's cost. Each op is priced on its cheapest iteration (the expected
    cheapest of 5, `expected_min`, so the count of iterations does not move it): contention also
    inflates CPU time (a busy hyper-thread sibling, evicted caches, lower clocks), never
    deflates it. Over two recordings of the eager-attention script on a loaded machine,
    the per-op minimum over 30 iterations gave run energies within 1.05x of each other
    where the median gave 1.10x and the mean 1.12x. Op times are CPU times too (own CPU
    time of the cheapest iteration): detection's "no more than 1% slower" rule compared
    wall windows, and a recording next to a busy process turned fused kernels into
    "trade-offs". With one intra-op thread CPU time is the latency; with several it is
    their sum on both sides alike.
    """
    own = np.maximum(0, cpu_ns[:, :, 1] - cpu_ns[:, :, 0]) / 1e9
    gap = np.zeros_like(own)
    gap[:, 1:] = np.maximum(0, cpu_ns[:, 1:, 0] - cpu_ns[:, :-1, 1]) / 1e9
    samples = p_static_w * (own + gap) + dyn_j
    charged = expected_min(own + gap)
    energy = p_static_w * charged + dyn_j
    interp = np.minimum(p_static_w * expected_min(gap), energy - dyn_j)
    return Attribution(
        energy_j=energy,
        own_j=energy - interp,
        charged_s=charged,
        own_s=expected_min(own),
        run_energy_j=float(energy.sum()),
        span_s=float(charged.sum()),
        iterations=int(cpu_ns.shape[0]),
        samples_j=samples,
        interp_j=interp,
        interp_samples_j=p_static_w * gap,
    )


MIN_OF = 5  # the timing pass's fewest iterations (tracer/timing/passes.py)


def expected_min(x: np.ndarray, k: int = MIN_OF) -> np.ndarray:
    """Per column of `x` (iterations, ops): the expected minimum of `k` iterations drawn
    without replacement from the rows, from the order statistics (the i-th smallest of n
    is the minimum of C(n - i, k - 1) of the C(n, k) draws). A plain minimum falls as the
    timing pass runs more iterations, and it runs more on a noisy machine: of three A/A
    recordings of the eager-attention script under load, the one that ran 24 iterations
    came out 0.90x of the two that ran 5 (spread 1.115). This estimate has the same
    meaning whatever the count; with fewer than `k` rows it is the minimum."""
    n = x.shape[0]
    k = max(1, min(k, n))
    ranks = np.arange(1, n + 1)
    w = np.array([math.comb(n - i, k - 1) for i in ranks], float) / math.comb(n, k)
    return np.tensordot(w, np.sort(x, axis=0), axes=(0, 0))


def model_attribution(
    ops: list[OpRecord], m: ModelCoefficients, cpu_ns: np.ndarray | None
) -> Attribution:
    """The model's price of the ops' timed iterations: on the process CPU clock when the
    timing pass read it (`cpu_ns`, (iterations, ops, 2)), else on their wall windows
    (`op.windows_ns`). The recorder and interleaved confirmation (diagnose/matching/confirm.py)
    both price through here, so a re-measured region costs what a recorded one would."""
    dyn = np.array([m.dynamic_j(op) for op in ops])
    if cpu_ns is not None:
        return attribute_cpu_time(ops, cpu_ns, m.p_static_w, dyn)
    static = Trace(np.array([0, 1]), np.array([m.p_static_w, m.p_static_w]), device="model")
    # Min over iterations: the model's P_static·t term turns any time another process
    # took from this one into energy, so a busy neighbour during one recording made
    # identical code look 10-300% costlier (seen in CI: a 1 ms SDPA call took 5-8 ms in 3
    # of 5 iterations while tests ran). Load only ever adds time, so each op's cheapest
    # iteration is the estimate least affected by it (the reason timeit reports the
    # minimum).
    return attribute_traces(ops, [static], extra_own_j=dyn, reduce="min")


def spread_of(samples_j: np.ndarray, timing=None) -> EnergySpread:
    """Repeatability of the run's energy: spread of the per-iteration run totals."""
    totals = samples_j.sum(axis=1) if samples_j.size else np.zeros(0)
    n = len(totals)
    if n == 0:
        return EnergySpread()
    mean = float(totals.mean())
    std = float(totals.std(ddof=1)) if n > 1 else 0.0
    return EnergySpread(
        iterations=n,
        mean_j=mean,
        std_j=std,
        cv=std / mean if mean > 0 else 0.0,
        min_j=float(totals.min()),
        max_j=float(totals.max()),
        stop_reason=getattr(timing, "stop_reason", "") or "",
    )


# ---------------------------------------------------------------------------------------
# Session
# ---------------------------------------------------------------------------------------


# How far over its source's power limit a run's average power may be before its pricing
# is called wrong (EnergySession.power_bound_error).
BOUND_MARGIN = 1.5


@dataclass
class GapCharge:
    """What attribution charged an op beyond its own window (replay keeps it)."""

    gap_j: float
    charged_s: float


class EnergySession:
    """One run's energy measurement: source, idle baseline, sampler, attribution.

    spec: "auto" | "nvml" | "nvml:power" | "rapl" | "meter:FILE[@OFFSET_S]" | "model" |
    "model:PROFILE" (a built-in name or a TOML/JSON file).
    """

    def __init__(
        self,
        kind: str,
        source: PowerSource | None,
        model: ModelCoefficients,
        interval_s: float,
        device: str,
        note: str = "",
        meter_path: str = "",
        meter_offset_s: float | None = None,
    ):
        self.kind = kind
        self.source = source
        self.model = model
        self.interval_s = interval_s
        self.device = device
        self.note = note
        self.meter_path = meter_path
        self.meter_offset_s = meter_offset_s
        self.sampler = Sampler(source, interval_s) if source is not None else None
        self.idle_w: float = float("nan")
        self.idle_window_ns: tuple[int, int] | None = None
        self.gap_charges: dict[int, GapCharge] = {}
        self.last_span_s: float = 0.0
        self.meter_offset_used_s: float | None = None
        # the recorder's timing pass (tracer/timing/passes.py), with process-CPU windows when
        # `prices_cpu_time` said so; None for hand-built profiles and record_block
        self.timing: TimingPass | None = None
        # the clock pair that maps a meter's Unix timestamps onto perf_counter_ns
        self.epoch_at_start_s = time.time()
        self.perf_at_start_ns = time.perf_counter_ns()

    # -- construction ------------------------------------------------------------------

    @classmethod
    def create(
        cls, spec: str = "auto", interval_s: float = 0.005, device: str = "cpu"
    ) -> EnergySession:
        spec = (spec or "auto").strip()
        kind, _, arg = spec.partition(":")
        kind = kind.lower()
        src: PowerSource
        if kind == "auto":
            reasons = []
            if device.startswith("cuda"):
                try:
                    src = NvmlSource(device)
                    return cls("nvml", src, load_model("", device), interval_s, device)
                except MagnetonError as e:
                    reasons.append(str(e))
            try:
                src = RaplSource()
                return cls("rapl", src, load_model("", device), interval_s, device)
            except MagnetonError as e:
                if "permission denied" in str(e):
                    reasons.append(str(e))
            note = "no power sensor on this machine"
            if reasons:
                note = "no readable power sensor (" + reasons[0] + ")"
            return cls("model", None, load_model("", device), interval_s, device, note=note)
        if kind == "nvml":
            src = NvmlSource(device if device.startswith("cuda") else "cuda")
            if arg.lower() == "power":
                src.force_power()
            elif arg:
                raise MagnetonError(f"unknown NVML option {arg!r}: use nvml or nvml:power")
            return cls("nvml", src, load_model("", device), interval_s, device)
        if kind == "rapl":
            src = RaplSource(arg or None)
            return cls("rapl", src, load_model("", device), interval_s, device)
        if kind == "meter":
            path, offset = parse_meter_spec(spec)
            return cls(
                "meter",
                MeterSource(path),
                load_model("", device),
                interval_s,
                device,
                meter_path=str(path),
                meter_offset_s=offset,
            )
        if kind == "model":
            note = "model requested (--power " + spec + ")"
            return cls("model", None, load_model(arg, device), interval_s, device, note=note)
        raise MagnetonError(
            f"unknown power source {spec!r}: use auto, nvml, rapl, meter:FILE[@OFFSET_S], "
            "model or model:PROFILE"
        )

    # -- labels ----------------------------------------------------------------------

    @property
    def source_name(self) -> str:
        if self.kind == "model":
            return f"model:{self.model.name}"
        if self.kind == "meter":
            return f"meter:{os.path.basename(self.meter_path)}"
        return self.source.name if self.source is not None else self.kind

    @property
    def method(self) -> str:
        return "estimated" if self.kind == "model" else "measured"

    @property
    def power_signal(self) -> str:
        """Which reading the source's power channels carry (NVML: instantaneous or the
        1 s average), "" where the source has no choice."""
        return self.source.power_signal if self.source is not None else ""

    @property
    def settle_s(self) -> float:
        return self.source.settle_s if self.source is not None else 0.0

    @property
    def update_period_s(self) -> float:
        return self.source.update_period_s if self.source is not None else 0.0

    @property
    def max_power_w(self) -> float:
        """The most power the priced devices can draw: the model's TDP, a sensor's power
        limits; 0 when unknown (a meter's)."""
        if self.kind == "model":
            return self.model.tdp_w
        return self.source.max_power_w if self.source is not None else 0.0

    def power_bound_error(self, profile: Profile, outside_j: float = 0.0) -> str:
        """Why `profile`'s pricing cannot be right, "" when it can: its energy per unit
        (the step's graph plus the work outside it) over its wall time is a power above
        what the source allows (`BOUND_MARGIN` over the limit: a busy turbo may pass a
        nominal TDP, a timing that missed the priced work passes it many times over)."""
        run, bound = profile.run, self.max_power_w
        if bound <= 0 or run.time_s <= 0:
            return ""
        w = (run.energy_j + outside_j) / run.time_s
        if w <= bound * BOUND_MARGIN:
            return ""
        return (
            f"priced at {w:.0f} W ({run.energy_j + outside_j:.4g} J in {run.time_s:.4g} s), "
            f"above the {bound:.0f} W {self.source_name} allows: the priced windows do not "
            "match the measured time"
        )

    def prices_cpu_time(self, sync: bool) -> bool:
        """Whether the timing pass should read the process CPU clock: only where time is
        priced by the model on the CPU (a sensor measures energy itself; a GPU's time is
        not the host process's CPU time)."""
        return self.kind == "model" and not sync and not self.device.startswith("cuda")

    @property
    def live(self) -> bool:
        return self.sampler is not None and not isinstance(self.source, MeterSource)

    # -- lifecycle -------------------------------------------------------------------

    def measure_idle(self, seconds: float = 0.5) -> float:
        """Idle baseline (W) before the run. The model returns its P_static."""
        if self.kind == "model":
            self.idle_w = self.model.p_static_w
            return self.idle_w
        if self.kind == "meter":
            t0 = time.perf_counter_ns()
            time.sleep(seconds)
            self.idle_window_ns = (t0, time.perf_counter_ns())
            self.idle_w = self._meter_idle_now()
            return self.idle_w
        assert self.sampler is not None
        self.sampler.start()
        time.sleep(self.settle_s)  # let a lagging sensor stop reporting earlier activity
        t0 = time.perf_counter_ns()
        time.sleep(seconds)
        t1 = time.perf_counter_ns()
        time.sleep(self.interval_s * 2)
        self.idle_window_ns = (t0, t1)
        self.idle_w = self._window_mean_power(t0, t1)
        return self.idle_w

    def start(self) -> None:
        if self.sampler is not None and self.live:
            self.sampler.start()

    def stop(self) -> None:
        if self.sampler is not None and self.live:
            self.sampler.stop()

    def close(self) -> None:
        self.stop()
        if self.source is not None:
            self.source.close()

    # -- live windows (replay) -------------------------------------------------------

    def traces(self) -> list[Trace]:
        if self.kind == "meter":
            return [self._meter_trace(estimate=False)]
        if self.sampler is None:
            return []
        return [Trace.from_samples(s) for s in self.sampler.snapshot() if s.t_ns and not s.aux]

    def _window_mean_power(self, a_ns: int, b_ns: int) -> float:
        total = 0.0
        for tr in self.traces():
            total += tr.mean_power_w(a_ns, b_ns)
        return total

    def _wait_past(self, b_ns: int) -> None:
        """Wait until the sampler holds readings past `b_ns` (a counter needs its next
        update to know how much of the current interval was spent)."""
        assert self.sampler is not None
        if not self.sampler.running:
            self.sampler.start()
        deadline = time.perf_counter() + max(0.5, 3 * self.update_period_s)
        pad = int(max(self.update_period_s, self.interval_s) * 1.5e9)
        while time.perf_counter() < deadline:
            snap = self.sampler.snapshot()
            if all(s.t_ns and s.t_ns[-1] >= b_ns + pad for s in snap):
                return
            time.sleep(self.interval_s)

    def window_energy(self, a_ns: int, b_ns: int) -> float:
        """Joules the sensor saw in [a_ns, b_ns], summed over devices (live sources)."""
        if self.kind == "meter":
            return self._meter_window_energy(a_ns, b_ns)
        if self.sampler is None:
            raise MagnetonError("the model source has no sensor windows")
        self._wait_past(b_ns)
        total = 0.0
        for tr in self.traces():
            total += float(tr.energy_j(np.array([a_ns]), np.array([b_ns]))[0])
        return total

    def steady_power_w(self, a_ns: int, b_ns: int) -> float:
        """Mean power (W, summed over devices) during [a_ns, b_ns] of a *steady* load.

        Where a device has power readings, this is the mean of the fresh readings that
        arrived inside the window: the load is the same before, during and after (replay's
        warm-up and tail), so every such reading describes it and no update timing is
        needed. Counter-only devices (RAPL) use the counter difference over the window.
        """
        if self.kind == "meter":
            return self._meter_window_energy(a_ns, b_ns) / ((b_ns - a_ns) / 1e9)
        if self.sampler is None:
            raise MagnetonError("the model source has no sensor windows")
        self._wait_past(b_ns)
        by_dev: dict[str, list[ChannelSamples]] = {}
        for s in self.sampler.snapshot():
            if s.t_ns:
                by_dev.setdefault(s.device, []).append(s)
        total = 0.0
        for chans in by_dev.values():
            power = next((c for c in chans if not c.counter), None)
            if power is not None:
                t = np.asarray(power.t_ns, np.int64)
                v = np.asarray(power.values, float)
                fresh = np.ones(len(v), bool)
                fresh[1:] = v[1:] != v[:-1]
                sel = fresh & (t >= a_ns) & (t <= b_ns)
                if sel.sum() >= 2:
                    total += float(v[sel].mean())
                    continue
            prim = next(c for c in chans if not c.aux)
            total += Trace.from_samples(prim).mean_power_w(a_ns, b_ns)
        return total

    # -- attribution -----------------------------------------------------------------

    def attribute(
        self, profile: Profile, method: str = "auto", outside: list[OpRecord] | None = None
    ) -> list[float]:
        """Fill op energies and run totals (see module docstring for the rules).

        method: "auto" (the source's own: measured or estimated), "trace" (same as auto
        for sensors), "lsq" (least-squares per-type power splitting the measured total,
        labelled "solved"; needs a sensor).

        `outside`: the timed units' operators outside the step's common work
        (tracer/timing/alignment.py). They are charged with the step's operators, so
        their time is theirs and not their neighbours', but the run's figures are the
        step's graph only; returns their energies (per unit), [] without them.
        """
        n = len(profile.ops)
        work = profile if not outside else replace(profile, ops=[*profile.ops, *outside])
        att_all, op_method = self._attribution(work, method)
        profile.power = work.power
        att = att_all.head(n) if outside else att_all
        ops = profile.ops
        for i, op in enumerate(ops):
            op.energy_j = float(att.energy_j[i])
            op.energy_method = op_method
        self.gap_charges = {
            op.idx: GapCharge(
                gap_j=float(att.energy_j[i] - att.own_j[i]), charged_s=float(att.charged_s[i])
            )
            for i, op in enumerate(ops)
        }
        self.last_span_s = att.span_s
        run = profile.run
        idle = 0.0 if math.isnan(self.idle_w) else self.idle_w
        run.energy_j = float(att.energy_j.sum())
        span = att.span_s if att.span_s > 0 else run.time_s
        run.energy_above_idle_j = run.energy_j - idle * span
        run.idle_w = idle
        run.power_source = self.source_name
        run.energy_method = op_method
        self._write_config(profile, att)
        return [float(x) for x in att_all.energy_j[n:]]

    def _attribution(self, profile: Profile, method: str) -> tuple[Attribution, str]:
        """The attribution of `profile`'s ops, and the method its figures carry."""
        ops = profile.ops
        fill_work(ops)
        if method not in ("auto", "trace", "lsq"):
            raise MagnetonError(f"unknown attribution method {method!r}: auto, trace or lsq")
        if self.kind == "model":
            if method == "lsq":
                raise MagnetonError("least squares needs a power sensor; the model has none")
            att = self._attribute_model(profile)
            op_method = "estimated"
            if att.iterations > 1:
                # the time that goes with the priced iteration, so E = P_static·t + work
                # holds per op and detection compares times as robust as the energies
                for i, op in enumerate(ops):
                    if op.windows_ns:
                        op.time_s = float(att.own_s[i])
        else:
            if self.kind == "meter":
                traces = [self._meter_trace(ops=ops)]
            else:
                traces = self.traces()
            if not traces:
                raise MagnetonError(f"{self.source_name} produced no readings during the run")
            if method == "lsq":
                att = self._attribute_lsq(profile, traces)
                op_method = "solved"
            else:
                att = attribute_traces(
                    ops,
                    traces,
                    synced_ns=getattr(self.timing, "synced_ns", None),
                    kernel_s=profile.energy.kernel_s or None,
                )
                op_method = "measured"
            profile.power = [tr.to_series(self.kind) for tr in traces]
            if math.isnan(self.idle_w) and self.kind == "meter":
                self.idle_w = self._meter_idle_from(traces[0])
        return att, op_method

    def _attribute_model(self, profile: Profile) -> Attribution:
        ops = profile.ops
        m = self.model
        iters, _ = op_windows(ops)
        cpu = self._cpu_windows(profile)
        if cpu is not None or iters:
            att = model_attribution(ops, m, cpu)
        else:
            # no windows at all (hand-built profile): price each op on its mean time
            e = np.array([m.op_energy_j(op, op.time_s) for op in ops])
            t = np.array([op.time_s for op in ops])
            att = Attribution(e, e, t, t, float(e.sum()), float(t.sum()), 1)
        profile.power = [self._model_series(profile)]
        if math.isnan(self.idle_w):
            self.idle_w = m.p_static_w
        return att

    def _model_series(self, profile: Profile) -> PowerSeries:
        """Synthesized trace of the first timing iteration: a step per op, P_static between."""
        m = self.model
        _, wins = op_windows(profile.ops)
        items = sorted(
            (w[0][0], w[0][1], model_op_power_w(m, op))
            for op, w in zip(profile.ops, wins, strict=True)
            if w and w[0] is not None
        )
        t: list[int] = []
        p: list[float] = []
        for s, e, w in items:
            if t and s > t[-1]:
                t.append(t[-1])
                p.append(m.p_static_w)
                t.append(s)
                p.append(m.p_static_w)
            t += [s, e]
            p += [w, w]
        t_arr, p_arr = downsample(np.asarray(t, np.int64), np.asarray(p, float), MAX_STORED_SAMPLES)
        return PowerSeries(
            device="model",
            source="model",
            t_ns=[int(x) for x in t_arr],
            watts=[float(x) for x in p_arr],
        )

    def _attribute_lsq(self, profile: Profile, traces: list[Trace]) -> Attribution:
        from magneton.tracer.energy.lsq import solve_trace

        ops = profile.ops
        base = attribute_traces(ops, traces)
        # the solution's per-type power times each op's own time gives its share; gap time
        # is priced at the solved "(between ops)" power; shares then split the measured total
        total_w: dict[str, float] = {}
        sols = []
        for tr in traces:
            sol = solve_trace(ops, tr, lags_s=_lag_grid(self.settle_s))
            sols.append(sol)
            for k, v in sol.powers_w.items():
                total_w[k] = total_w.get(k, 0.0) + v
        gap_w = total_w.get(GAP_TYPE, 0.0)
        shares = np.array(
            [
                total_w.get(op_type(op), 0.0) * base.own_s[i]
                + gap_w * (base.charged_s[i] - base.own_s[i])
                for i, op in enumerate(ops)
            ]
        )
        if shares.sum() <= 0:
            return base
        energy = shares / shares.sum() * base.run_energy_j
        own = np.array([total_w.get(op_type(op), 0.0) * base.own_s[i] for i, op in enumerate(ops)])
        own = own / shares.sum() * base.run_energy_j
        self.lsq_solutions = sols
        ratio = np.divide(energy, base.energy_j, out=np.zeros(len(ops)), where=base.energy_j > 0)
        return Attribution(
            energy,
            own,
            base.charged_s,
            base.own_s,
            base.run_energy_j,
            base.span_s,
            base.iterations,
            samples_j=base.samples_j * ratio if base.samples_j.size else base.samples_j,
        )

    def _cpu_windows(self, profile: Profile) -> np.ndarray | None:
        """(iterations, ops, 2) process-CPU windows aligned with the ops, or None when the
        timing pass did not read the CPU clock or its ops are not the profile's."""
        tp = self.timing
        if tp is None or not tp.cpu_windows or profile.run.timing != "separate":
            return None
        if any(len(w) != len(profile.ops) for w in tp.cpu_windows):
            return None
        return np.asarray(tp.cpu_windows, dtype=np.int64).reshape(-1, len(profile.ops), 2)

    def _write_config(self, profile: Profile, att: Attribution) -> None:
        cfg = profile.config
        cfg["energy.source"] = self.source_name
        cfg["energy.method"] = profile.run.energy_method
        if self.power_signal:
            cfg["energy.power_signal"] = self.power_signal
        cpu = self.kind == "model" and self._cpu_windows(profile) is not None
        cfg["energy.gap_rule"] = (
            "interpreter time before an op charged to it (shown as python rows)"
            if cpu
            else "nearest-op (gaps split at midpoint)"
        )
        cfg["energy.iterations"] = str(att.iterations)
        e = profile.energy
        e.note = self.note
        e.clock = "process-cpu" if cpu else "wall"
        e.span_s = float(att.span_s)
        # per-op seconds charged (own window + share of the gaps), for average power
        e.charged_s = [float(x) for x in att.charged_s]
        e.interp_j = [] if att.interp_j is None else [float(x) for x in att.interp_j]
        e.interp_samples_j = (
            []
            if att.interp_samples_j is None
            else [[float(x) for x in row] for row in att.interp_samples_j]
        )
        e.op_samples_j = [[float(x) for x in row] for row in att.samples_j]
        e.spread = spread_of(att.samples_j, self.timing)
        if self.kind == "model":
            m = self.model
            e.model = {
                "name": m.name,
                "p_static_w": m.p_static_w,
                "e_flop_pj": m.e_flop_pj,
                "e_byte_pj": m.e_byte_pj,
                "citation": m.citation,
                "formula": "E = P_static*t + e_flop*FLOPs + e_byte*bytes",
            }
        gaps = sum(len(s.gaps) for s in profile.power)
        if gaps:
            cfg["energy.sensor_gaps"] = str(gaps)
        if self.sampler is not None and self.sampler.errors:
            cfg["energy.sensor_errors"] = "; ".join(self.sampler.errors[:3])
        if self.meter_offset_used_s is not None:
            cfg["energy.meter_offset_s"] = repr(self.meter_offset_used_s)
            cfg["energy.meter_alignment"] = (
                "given" if self.meter_offset_s is not None else "cross-correlation"
            )
        sols = getattr(self, "lsq_solutions", None)
        if profile.run.energy_method == "solved" and sols:
            e.lsq = [s.to_json() for s in sols]

    # -- meter -------------------------------------------------------------------------

    def _meter_raw(self):
        assert isinstance(self.source, MeterSource)
        return read_meter_csv(self.source.path)

    def _meter_idle_now(self) -> float:
        try:
            tr = self._meter_trace(estimate=False)
        except MagnetonError:
            return float("nan")
        return self._meter_idle_from(tr)

    def _meter_idle_from(self, tr: Trace) -> float:
        if self.idle_window_ns is None:
            return float("nan")
        a, b = self.idle_window_ns
        if not tr.covers(a, b):
            return float("nan")
        return tr.mean_power_w(a, b)

    def _meter_trace(self, ops: list[OpRecord] | None = None, estimate: bool = True) -> Trace:
        """The meter's trace on the recording clock. Offset: the one given in the spec,
        else estimated by cross-correlation with the ops' activity (when `ops` are given),
        else the last one used, else 0."""
        raw = self._meter_raw()
        if self.meter_offset_s is not None:
            offset = self.meter_offset_s
        elif estimate and ops:
            offset = self._estimate_offset(raw, ops)
        elif self.meter_offset_used_s is not None:
            offset = self.meter_offset_used_s
        else:
            offset = 0.0
        if estimate or self.meter_offset_s is not None:
            self.meter_offset_used_s = offset
        t = meter_to_perf_ns(raw.t_s, offset, self.epoch_at_start_s, self.perf_at_start_ns)
        return Trace(t, raw.watts, counter=False, device="meter")

    def _meter_window_energy(self, a_ns: int, b_ns: int, wait_s: float = 5.0) -> float:
        # the meter may still be writing: poll the file until it covers the window
        deadline = time.perf_counter() + wait_s
        while True:
            tr = self._meter_trace(estimate=False)
            if tr.covers(a_ns, b_ns) or time.perf_counter() > deadline:
                break
            time.sleep(0.05)
        return float(tr.energy_j(np.array([a_ns]), np.array([b_ns]))[0])

    def _estimate_offset(self, raw, ops: list[OpRecord]) -> float:
        t_nominal = meter_to_perf_ns(raw.t_s, 0.0, self.epoch_at_start_s, self.perf_at_start_ns)
        tpl_t, tpl_w = activity_template(ops, self.model)
        if self.idle_window_ns is not None and len(tpl_t):
            # the idle measurement is part of the expected shape: flat, before the run
            a, _ = self.idle_window_ns
            tpl_t = np.concatenate([[a], tpl_t])
            tpl_w = np.concatenate([[0.0], tpl_w])
        return estimate_meter_offset(t_nominal, raw.watts, tpl_t, tpl_w)


def activity_template(
    ops: list[OpRecord], model: ModelCoefficients
) -> tuple[np.ndarray, np.ndarray]:
    """Expected above-idle power shape of the run (step per op window, 0 between ops)."""
    _, wins = op_windows(ops)
    pts = []
    for op, ws in zip(ops, wins, strict=True):
        w = max(0.0, model_op_power_w(model, op) - model.p_static_w) + 1.0
        for win in ws:
            if win is not None:
                pts.append((win[0], win[1], w))
    pts.sort()
    t, p = [], []
    for a, b, w in pts:
        t += [a - 1, a, b, b + 1]
        p += [0.0, w, w, 0.0]
    if not t:
        return np.zeros(0, np.int64), np.zeros(0)
    return np.asarray(t, np.int64), np.asarray(p, float)


def _lag_grid(settle_s: float) -> np.ndarray:
    hi = max(0.0, settle_s)
    if hi <= 0.005:
        return np.array([0.0])
    return np.arange(0.0, hi + 1e-9, max(0.0025, hi / 80))


@dataclass
class RunEnergySummary:
    """Convenience view used by reports."""

    energy_j: float
    above_idle_j: float
    idle_w: float
    source: str
    method: str
    note: str = ""
    extras: dict[str, str] = field(default_factory=dict)


def summarize(profile: Profile) -> RunEnergySummary:
    r = profile.run
    return RunEnergySummary(
        energy_j=r.energy_j,
        above_idle_j=r.energy_above_idle_j,
        idle_w=r.idle_w,
        source=r.power_source,
        method=r.energy_method,
        note=profile.energy.note,
        extras={k: v for k, v in profile.config.items() if k.startswith("energy.")},
    )
