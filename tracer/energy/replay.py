"""Operator-level replay (paper §5.2): measure one operator's power by running it in a loop.

A board sensor refreshing every 20-100 ms, and lagging by up to hundreds of ms, cannot see a
100 µs kernel. Replaying that kernel with its recorded inputs for long enough (a trial spans
`min_window_s`, many sensor updates) turns it into a steady load whose power the sensor
reports accurately. The procedure, per selected operator:

1. `fn()` is run once under a `TorchDispatchMode`; the k-th dispatched operator is
   `profile.ops[k]` (the recorder dispatches deterministically). The names are checked as
   they go; a different sequence raises `MagnetonError` instead of measuring the wrong op.
2. Inputs the op writes (schema `alias_info.is_write`) are cloned, so the loop never
   touches program state. In-place inputs are restored from a pristine copy before every
   call (`copy_`), so every call sees the recorded input; the restore's own power is
   measured by a restore-only loop and subtracted. `out=` buffers are just cloned.
3. The loop count is calibrated so one trial spans `min_window_s` and at least
   `min_updates` sensor updates (a 0.2 s window holds only 4 updates of a 20 Hz sensor, and
   the dating jitter of those updates alone is ±2-3 % of such a window).
4. Each trial: optional cooldown, a warm-up loop of `warmup_s` (at least the sensor's lag,
   so readings inside the window already reflect the loop), the measured loop with every
   call timed, and a short tail of the same loop, so the load is steady across the whole
   window and the sensor's readings inside it all describe the loop. The window's joules
   are its duration times the mean of the fresh power readings that arrived inside it
   (`EnergySession.steady_power_w`; counter difference where a device has no power
   reading, e.g. RAPL). Averaging readings needs no knowledge of *when* the sensor
   updated, which a polling thread can only date to within its polling delay. While
   replaying, the interpreter's switch interval is lowered to 0.5 ms so the sampler thread
   is not starved by the loop.
5. Time between calls (loop overhead) is charged at the idle baseline and removed; the
   op's power is (window joules − idle·gap time) / busy time. Trials repeat until the
   relative std of the last `trials` powers is under `std_threshold` (Zeus profile's
   acceptance rule), up to `max_retries` extra trials; otherwise the median is used and the
   result is marked unstable.
6. The output of the last call is compared with the first call (torch.equal, then
   allclose for non-deterministic kernels); a changed output means the op has hidden
   state and its replay is discarded. Random ops (nondeterministic_seeded) skip the check,
   and the RNG state is restored afterwards so the program's stream is unchanged.

What is stored: `op.energy_j = replayed power × op.time_s` (the op's own time in the timing
pass, i.e. total energy including the idle floor, not above-idle) plus whatever time between
ops the attribution had charged to it, and `op.energy_method = "replayed"`. On CUDA an op's
window in the timing pass is its launch on the host, not its kernel's run (an MLP's
launches covered a fifth of its call on an H100), so there it is the loop's joules per
call, each call waited for. Every op with the
same signature (name, shapes, dtypes, scalar args, device, layout) shares one replay. With
the model source the replay only re-times the op: its numbers stay "estimated".
Per-replay details (loop count, J/call in the loop, above-idle J/call, std) go to
`profile.energy.replay`.
"""

from __future__ import annotations

import math
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from magneton.model import MagnetonError, OpRecord, Profile
from magneton.model.vocab import BOOKKEEPING_OPS
from magneton.tracer.energy.flops import ZERO_COST_OPS, fill_work
from magneton.tracer.energy.session import EnergySession

MAX_LOOP_CALLS = 5_000_000


@dataclass
class ReplayResult:
    op_idx: int
    name: str
    applied_to: list[int]
    loop_calls: int = 0
    trials_run: int = 0
    power_w: float = 0.0  # op's power while running (total, idle floor included)
    j_per_call: float = 0.0  # joules per call in the replay loop (total)
    j_per_call_above_idle: float = 0.0
    busy_s_per_call: float = 0.0
    std_pct: float = 0.0
    stable: bool = False
    output_checked: bool = False
    method: str = "replayed"
    skipped: str = ""  # reason when no energy was applied


def signature(op: OpRecord) -> tuple:
    return (
        op.name,
        op.overload,
        tuple(tuple(s) for s in op.input_shapes),
        tuple(op.input_dtypes),
        op.scalar_args,
        op.device,
        tuple(op.input_contiguous),
    )


def default_selection(profile: Profile) -> set[int]:
    """Every op that does work: not bookkeeping/views and with a measured duration."""
    return {
        op.idx
        for op in profile.ops
        if op.name not in BOOKKEEPING_OPS and op.name not in ZERO_COST_OPS and op.time_s > 0
    }


def replay_ops(
    fn: Callable[[], Any],
    profile: Profile,
    session: EnergySession,
    *,
    ops: set[int] | None = None,
    min_window_s: float = 0.2,
    trials: int = 3,
    std_threshold: float = 0.05,
    warmup_s: float | None = None,
    cooldown_s: float = 0.0,
    progress: bool = True,
    max_retries: int = 3,
    min_updates: int = 8,
) -> list[ReplayResult]:
    """Replay selected ops of `profile` (by idx; default: all working ops) and store their
    energy; one `ReplayResult` per replayed signature. `warmup_s` defaults to the sensor's
    lag plus one update period."""
    import torch  # noqa: F401  (replay needs torch; the rest of the module does not)

    fill_work(profile.ops)
    selected = default_selection(profile) if ops is None else set(ops)
    by_idx = {op.idx: op for op in profile.ops}
    unknown = selected - set(by_idx)
    if unknown:
        raise MagnetonError(f"no op with idx {min(unknown)} in run {profile.run.name!r}")
    # one replay per signature: the first occurrence in dispatch order
    groups: dict[tuple, list[int]] = {}
    for op in profile.ops:
        if op.idx in selected:
            groups.setdefault(signature(op), []).append(op.idx)
    targets = {members[0]: members for members in groups.values()}
    if warmup_s is None:
        warmup_s = session.settle_s + session.update_period_s
    if session.kind != "model" and math.isnan(session.idle_w):
        session.measure_idle(0.5)
    started_here = False
    if session.live and session.sampler is not None and not session.sampler.running:
        session.start()
        started_here = True
    window_s = max(min_window_s, min_updates * session.update_period_s)
    tail_s = 1.5 * session.update_period_s + 2 * session.interval_s if session.live else 0.0
    cfg = _LoopConfig(window_s, trials, std_threshold, warmup_s, cooldown_s, max_retries, tail_s)
    results: list[ReplayResult] = []
    # A loop holding the GIL delays the sampler thread by up to the switch interval (5 ms),
    # which dates sensor updates late and biases short windows; poll promptly while
    # replaying (our loops only), and restore the program's setting afterwards.
    switch = sys.getswitchinterval()
    sys.setswitchinterval(min(switch, 0.0005))
    try:
        results = _run_replay(fn, profile, session, targets, cfg, progress)
    finally:
        sys.setswitchinterval(switch)
        if started_here:
            session.stop()
    method = "replayed" if session.method == "measured" else "estimated"
    for res in results:
        if res.skipped:
            continue
        res.method = method
        for idx in res.applied_to:
            op = by_idx[idx]
            if op.device.startswith("cuda"):
                # a kernel's cost is its device time, not its launch window on the host
                # (what op.time_s is on CUDA): the loop's joules per call, each call
                # waited for, idle floor included
                op.energy_j = res.j_per_call
            else:
                gap = session.gap_charges.get(idx)
                op.energy_j = res.power_w * op.time_s + (gap.gap_j if gap else 0.0)
            op.energy_method = method
    _update_run(profile, session)
    profile.energy.replay = [asdict(r) for r in results]
    return results


@dataclass
class _LoopConfig:
    min_window_s: float
    trials: int
    std_threshold: float
    warmup_s: float
    cooldown_s: float
    max_retries: int
    tail_s: float = 0.0


def _update_run(profile: Profile, session: EnergySession) -> None:
    run = profile.run
    run.energy_j = float(sum(op.energy_j for op in profile.ops))
    span = session.last_span_s
    if span <= 0:
        span = profile.energy.span_s
    if span <= 0:
        span = run.time_s
    idle = run.idle_w if run.idle_w else (0.0 if math.isnan(session.idle_w) else session.idle_w)
    run.idle_w = idle
    run.energy_above_idle_j = run.energy_j - idle * span
    share: dict[str, float] = {}
    for op in profile.ops:
        share[op.energy_method] = share.get(op.energy_method, 0.0) + op.energy_j
    if share:
        run.energy_method = max(share.items(), key=lambda kv: kv[1])[0]
    if not run.power_source:
        run.power_source = session.source_name


def _run_replay(
    fn: Callable[[], Any],
    profile: Profile,
    session: EnergySession,
    targets: dict[int, list[int]],
    cfg: _LoopConfig,
    progress: bool,
) -> list[ReplayResult]:
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from magneton.tracer.capture.dispatch import RecorderMode

    thread0 = profile.ops[0].thread if profile.ops else 0
    expected = [op for op in profile.ops if op.thread == thread0]
    results: list[ReplayResult] = []
    bar = Progress(
        TextColumn("replay"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total} {task.description}"),
        TimeElapsedColumn(),
        disable=not progress,
        transient=True,
    )

    class ReplayMode(RecorderMode):
        def __init__(self):
            super().__init__()
            self.k = 0
            self.error = ""

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            k = self.k
            self.k += 1
            name = str(func._schema.name)
            if not self.error:
                if k >= len(expected):
                    self.error = (
                        f"replay diverged: the entry dispatched more than the "
                        f"{len(expected)} recorded operators (extra: {name})"
                    )
                elif expected[k].name != name:
                    self.error = (
                        f"replay diverged at operator {k}: recorded {expected[k].name}, "
                        f"replay dispatched {name}; is the entry deterministic?"
                    )
            if self.error:
                raise _Diverged(self.error)
            op = expected[k]
            if op.idx in targets:
                bar.update(task, description=op.name)
                results.append(_replay_one(func, args, kwargs, op, targets[op.idx], session, cfg))
                bar.advance(task)
            return func(*args, **kwargs)

    mode = ReplayMode()
    with bar:
        task = bar.add_task("", total=len(targets))
        try:
            with mode:
                fn()
        except _Diverged:
            raise MagnetonError(mode.error) from None
        except Exception as e:
            if mode.error:
                raise MagnetonError(mode.error) from None
            raise MagnetonError(f"the entry failed during replay: {type(e).__name__}: {e}") from e
    if mode.k != len(expected):
        raise MagnetonError(
            f"replay diverged: recorded {len(expected)} operators, the entry dispatched {mode.k}"
        )
    return results


class _Diverged(Exception):
    pass


def _replay_one(
    func,
    args: tuple,
    kwargs: dict,
    op: OpRecord,
    members: list[int],
    session: EnergySession,
    cfg: _LoopConfig,
) -> ReplayResult:
    import torch

    res = ReplayResult(op_idx=op.idx, name=op.name, applied_to=list(members))
    cpu_rng = torch.get_rng_state()
    cuda_rng = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None
    try:
        prepared = _prepare(func, args, kwargs)
        _measure(prepared, op, session, cfg, res)
    except Exception as e:  # one unreplayable op must not lose the others' results
        res.skipped = f"{type(e).__name__}: {e}"
    finally:
        torch.set_rng_state(cpu_rng)
        if cuda_rng is not None:
            torch.cuda.set_rng_state_all(cuda_rng)
    return res


@dataclass
class _Prepared:
    call: Callable[[], Any]
    restore: Callable[[], None] | None
    sync: Callable[[], None]
    random: bool
    cuda: bool


def _prepare(func, args: tuple, kwargs: dict) -> _Prepared:
    import torch

    schema = func._schema
    call_args = list(args)  # a copy: written arguments are replaced by clones
    kwargs = dict(kwargs)
    pristine: list[tuple[torch.Tensor, torch.Tensor]] = []
    tensors: list[torch.Tensor] = []

    def clone_written(v, restore: bool):
        if isinstance(v, torch.Tensor):
            c = v.detach().clone()
            if restore:
                pristine.append((c, v.detach().clone()))
            return c
        if isinstance(v, (list, tuple)):
            return type(v)(clone_written(x, restore) for x in v)
        return v

    for i, a in enumerate(schema.arguments):
        info = a.alias_info
        if info is None or not info.is_write:
            continue
        is_out = a.kwarg_only or a.name.startswith("out")
        if i < len(call_args) and not a.kwarg_only:
            call_args[i] = clone_written(call_args[i], restore=not is_out)
        elif a.name in kwargs:
            kwargs[a.name] = clone_written(kwargs[a.name], restore=not is_out)

    def collect(v):
        if isinstance(v, torch.Tensor):
            tensors.append(v)
        elif isinstance(v, (list, tuple)):
            for x in v:
                collect(x)

    for v in list(call_args) + list(kwargs.values()):
        collect(v)
    cuda = any(t.is_cuda for t in tensors)

    def call():
        return func(*call_args, **kwargs)

    restore = None
    if pristine:

        def restore():
            for buf, orig in pristine:
                buf.copy_(orig)

    sync = torch.cuda.synchronize if cuda else (lambda: None)
    random = torch.Tag.nondeterministic_seeded in func.tags
    return _Prepared(call, restore, sync, random, cuda)


def _snapshot(v):
    import torch

    if isinstance(v, torch.Tensor):
        return v.detach().clone()
    if isinstance(v, (list, tuple)):
        return type(v)(_snapshot(x) for x in v)
    return v


def _same(a, b) -> bool:
    import torch

    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        if a.is_nested or b.is_nested:  # no single shape: compare component by component
            return a.is_nested == b.is_nested and _same(a.unbind(), b.unbind())
        if a.shape != b.shape or a.dtype != b.dtype:
            return False
        if torch.equal(a, b):
            return True
        if a.is_floating_point() or a.is_complex():
            return bool(torch.allclose(a, b, rtol=1e-5, atol=1e-6, equal_nan=True))
        return False
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    try:
        return bool(a == b)
    except Exception:
        return True  # opaque objects: nothing to compare


def _timed_loop(p: _Prepared, n: int, with_op: bool = True) -> tuple[int, int, int, int, Any]:
    """Run n calls; returns (t0, t1, op_busy_ns, restore_busy_ns, last_output)."""
    pc = time.perf_counter_ns
    op_ns = 0
    rs_ns = 0
    out = None
    p.sync()
    t0 = pc()
    if p.cuda:
        # per-call timing would need a sync per call (serialising the GPU); on CUDA the
        # whole window counts as busy - launches queue up and keep the device loaded
        for _ in range(n):
            if p.restore is not None:
                p.restore()
            if with_op:
                out = p.call()
        p.sync()
        t1 = pc()
        return t0, t1, (t1 - t0) if with_op else 0, 0 if with_op else (t1 - t0), out
    for _ in range(n):
        if p.restore is not None:
            a = pc()
            p.restore()
            rs_ns += pc() - a
        if with_op:
            a = pc()
            res = p.call()
            op_ns += pc() - a
            # the previous output is freed here, outside the timed call: freeing a large
            # result is the program's bookkeeping, not this op's work
            out = res
    t1 = pc()
    return t0, t1, op_ns, rs_ns, out


def _run_for(p: _Prepared, seconds: float, n_hint: int, with_op: bool = True) -> None:
    if seconds <= 0:
        return
    end = time.perf_counter() + seconds
    step = max(1, n_hint // 20)
    while time.perf_counter() < end:
        _timed_loop(p, step, with_op)


def _measure(
    p: _Prepared, op: OpRecord, session: EnergySession, cfg: _LoopConfig, res: ReplayResult
) -> None:
    if p.restore is not None:
        p.restore()
    ref = _snapshot(p.call())
    n = _calibrated_loop_calls(p, cfg)
    res.loop_calls = n
    idle = 0.0 if math.isnan(session.idle_w) else session.idle_w
    powers: list[float] = []
    per_call_j: list[float] = []
    busy_s: list[float] = []
    last_out = None
    for attempt in range(cfg.trials + cfg.max_retries):
        e_op, busy, last_out = _one_trial(p, op, session, cfg, n, idle)
        powers.append(e_op / busy)
        per_call_j.append(e_op / n)
        busy_s.append(busy / n)
        res.trials_run = attempt + 1
        if _last_trials_agree(powers, cfg):
            res.stable = True
            break
    _settle(res, powers, per_call_j, busy_s, idle, cfg)
    if p.random:
        res.output_checked = False
    else:
        if p.restore is not None:
            p.restore()
            last_out = p.call()
        if not _same(last_out, ref):
            res.skipped = "output changed between replays (hidden state); replay discarded"
            return
        res.output_checked = True


def _calibrated_loop_calls(p: _Prepared, cfg: _LoopConfig) -> int:
    """How many calls one trial makes so that it spans cfg.min_window_s."""
    n = 1
    while True:
        t0, t1, _, _, _ = _timed_loop(p, n)
        if (t1 - t0) / 1e9 >= 0.02 or n >= MAX_LOOP_CALLS:
            break
        n *= 2
    per_call = max((t1 - t0) / 1e9 / n, 1e-9)
    return int(min(MAX_LOOP_CALLS, max(1, math.ceil(cfg.min_window_s / per_call))))


def _one_trial(
    p: _Prepared, op: OpRecord, session: EnergySession, cfg: _LoopConfig, n: int, idle: float
) -> tuple[float, float, Any]:
    """One trial of n calls: (the op's energy in J, its busy seconds, the last output)."""
    model = session.kind == "model"
    if cfg.cooldown_s > 0:
        time.sleep(cfg.cooldown_s)
    if not model:
        _run_for(p, cfg.warmup_s, n)
    t0, t1, op_ns, rs_ns, last_out = _timed_loop(p, n)
    # keep the load on past the window: both window edges then see the same sensor
    # lag and polling conditions, so the counter interpolation at t1 is not skewed
    _run_for(p, cfg.tail_s, n)
    window_s = (t1 - t0) / 1e9
    busy = op_ns / 1e9
    if busy <= 0:
        raise MagnetonError("replay loop measured no busy time")
    if model:
        m = session.model
        return n * (m.p_static_w * busy / n + m.dynamic_j(op)), busy, last_out
    e = session.steady_power_w(t0, t1) * window_s
    restore_j = _restore_energy_j(p, session, cfg, n, idle, rs_ns) if p.restore is not None else 0.0
    gap_s = max(0.0, window_s - busy - rs_ns / 1e9)
    return e - restore_j - idle * gap_s, busy, last_out


def _restore_energy_j(
    p: _Prepared, session: EnergySession, cfg: _LoopConfig, n: int, idle: float, rs_ns: int
) -> float:
    """The restores' own energy in a trial: priced by a restore-only loop of the same length."""
    _run_for(p, cfg.warmup_s, n, with_op=False)
    r0, r1, _, r_ns, _ = _timed_loop(p, n, with_op=False)
    _run_for(p, cfg.tail_s, n, with_op=False)
    e_r = session.steady_power_w(r0, r1) * (r1 - r0) / 1e9
    r_busy = r_ns / 1e9
    if r_busy <= 0:
        return 0.0
    p_restore = (e_r - idle * ((r1 - r0) / 1e9 - r_busy)) / r_busy
    return p_restore * rs_ns / 1e9


def _last_trials_agree(powers: list[float], cfg: _LoopConfig) -> bool:
    """Whether the last cfg.trials powers lie within cfg.std_threshold of their mean."""
    if len(powers) < cfg.trials:
        return False
    last = powers[-cfg.trials :]
    mean = statistics.fmean(last)
    std = statistics.stdev(last) if len(last) > 1 else 0.0
    rel = std / mean if mean > 0 else math.inf
    return rel < cfg.std_threshold


def _settle(
    res: ReplayResult,
    powers: list[float],
    per_call_j: list[float],
    busy_s: list[float],
    idle: float,
    cfg: _LoopConfig,
) -> None:
    """The result from the last trials: their mean when stable, else their median."""
    k = min(cfg.trials, len(powers))
    last_p = powers[-k:]
    avg = statistics.fmean if res.stable else statistics.median
    res.power_w = avg(last_p)
    res.j_per_call = avg(per_call_j[-k:])
    res.busy_s_per_call = avg(busy_s[-k:])
    mean = statistics.fmean(last_p)
    res.std_pct = 100.0 * (statistics.stdev(last_p) / mean if len(last_p) > 1 and mean else 0.0)
    res.j_per_call_above_idle = res.j_per_call - idle * res.busy_s_per_call
