"""Which NVML power reading Magneton reads, on a fake Hopper board (tests/fakes.py
`HopperNvml`): `nvmlDeviceGetPowerUsage` a 1 s boxcar average, the instantaneous field
`NVML_FI_DEV_POWER_INSTANT` the power now, the energy counter in 100 ms steps.

Where the board answers the field, the power timeline (`nvml:power`) and replay's power
reading (`EnergySession.steady_power_w`) see a 50 ms burst and a load step at their true
level; where it does not (the field's nvmlReturn is not NVML_SUCCESS, or pynvml is too old
to name it), both read the 1 s average, and the run says which it was.
"""

from __future__ import annotations

import sys
import time

import pytest
from fakes import HopperNvml

from magneton.model import OpRecord, Profile, RunInfo
from magneton.render.report import method_line
from magneton.tracer.energy.power import SensorError
from magneton.tracer.energy.power.nvml import AVERAGE_SIGNAL, INSTANT_SIGNAL
from magneton.tracer.energy.session import EnergySession

BASE_W, BURST_W, BURST_S = 100.0, 600.0, 0.05
BOARDS = {  # name -> (HopperNvml arguments, the signal it must be read through)
    "instant": ({}, INSTANT_SIGNAL),
    "field not supported": ({"instant": False}, AVERAGE_SIGNAL),
    "old pynvml": ({"old_pynvml": True}, AVERAGE_SIGNAL),
}


@pytest.fixture
def hopper(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)

    def install(**kw) -> HopperNvml:
        f = HopperNvml(base_w=BASE_W, **kw)
        monkeypatch.setitem(sys.modules, "pynvml", f.module)
        return f

    return install


def _sleep_until(t: float) -> None:
    while (left := t - time.perf_counter()) > 0:
        time.sleep(min(left, 0.01))


def _ns(t: float) -> int:
    """A perf_counter instant (s) on the perf_counter_ns clock the sampler stamps with."""
    return int(t * 1e9)


@pytest.mark.parametrize("board", list(BOARDS))
def test_probe_chooses_signal_and_labels_it(hopper, board):
    kw, signal = BOARDS[board]
    f = hopper(**kw)
    s = EnergySession.create("nvml", device="cuda:0")
    assert s.power_signal == signal
    # the counter for totals, the chosen power reading beside it for replay
    assert [(c.device, c.counter, c.aux) for c in s.source.channels] == [
        ("gpu:0", True, False),
        ("gpu:0", False, True),
    ]
    f.segments = [(0.0, 1e12, 350.0)]  # a load steady for long: both readings agree on it
    _, power = s.source.read()
    assert power == pytest.approx(350.0, rel=0.02)
    if board == "instant":
        # probed once at start; each power read is one field call for the instant field
        probes = len(f.field_calls)
        s.source.read()
        assert f.field_calls[-1] == [f.real.NVML_FI_DEV_POWER_INSTANT]
        assert len(f.field_calls) == probes + 1


def test_mixed_boards_say_which_gpu_reads_which(hopper):
    hopper(instant=[True, False], gpus=2)
    s = EnergySession.create("nvml", device="cuda")
    assert s.power_signal == f"gpu:0 {INSTANT_SIGNAL}, gpu:1 {AVERAGE_SIGNAL}"


@pytest.mark.parametrize("board", list(BOARDS))
def test_power_timeline_sees_a_short_burst_at_its_level(hopper, board):
    """`nvml:power`: a 50 ms burst of 600 W on 100 W. The instant field shows it at 600 W
    and the burst's operator gets its 30 J; the 1 s average shows it as a 25 W bump
    spread over a second, 5.6 J inside the burst."""
    kw, signal = BOARDS[board]
    f = hopper(**kw)
    s = EnergySession.create("nvml:power", device="cuda:0", interval_s=0.002)
    assert [(c.counter, c.aux) for c in s.source.channels] == [(False, False)]
    t = time.perf_counter()
    b0, b1 = t + 0.25, t + 0.25 + BURST_S
    f.segments = [(b0, b1, BURST_W)]
    s.start()
    _sleep_until(t + 0.5)
    s.stop()
    windows = [(t + 0.05, b0), (b0, b1), (b1, t + 0.45)]
    names = ["aten::add", "aten::mm", "aten::relu"]
    ops = [
        OpRecord(idx=i, name=name, device="cuda:0", windows_ns=[(_ns(a), _ns(b))])
        for i, (name, (a, b)) in enumerate(zip(names, windows, strict=True))
    ]
    for op, (a, b) in zip(ops, windows, strict=True):
        op.time_s = b - a
    p = Profile(run=RunInfo(name="burst", device="cuda"), ops=ops)
    s.attribute(p)
    (series,) = p.power
    peak = max(series.watts)
    burst_j = ops[1].energy_j
    if signal == INSTANT_SIGNAL:
        assert peak == pytest.approx(BURST_W, rel=0.05)
        assert burst_j == pytest.approx(BURST_W * BURST_S, rel=0.2)
    else:
        assert peak < BASE_W + (BURST_W - BASE_W) * BURST_S * 1.2  # at most ~125 W
        assert burst_j < 0.3 * BURST_W * BURST_S
    assert p.config["energy.power_signal"] == signal
    assert f"power readings: {signal}" in method_line(p)


@pytest.mark.parametrize("board", list(BOARDS))
def test_replay_power_after_a_load_step(hopper, board):
    """Replay's reading of a steady loop (`steady_power_w`, the mean of fresh power
    readings inside its window): a load stepping from 100 to 400 W, measured after the
    warm-up replay waits (settle + one update, 0.4 s). The instant field gives 400 W; the
    1 s average is still climbing there (mean ~265 W)."""
    kw, signal = BOARDS[board]
    f = hopper(**kw)
    s = EnergySession.create("nvml", device="cuda:0", interval_s=0.002)
    t = time.perf_counter()
    step = t + 0.1
    f.segments = [(step, 1e12, 400.0)]
    s.start()
    warm = s.settle_s + s.update_period_s
    a, b = step + warm, step + warm + 0.3
    _sleep_until(b + 0.05)
    w = s.steady_power_w(_ns(a), _ns(b))
    s.stop()
    if signal == INSTANT_SIGNAL:
        assert w == pytest.approx(400.0, rel=0.02)
    else:
        assert w == pytest.approx(100.0 + 300.0 * (warm + 0.15), rel=0.06)
        assert w < 300.0


def test_totals_still_come_from_the_counter(hopper):
    """With a counter the run's joules are the counter's (100 ms steps), whichever power
    reading sits beside it: the instant field's burst is seen on the power channel."""
    f = hopper()
    s = EnergySession.create("nvml", device="cuda:0", interval_s=0.002)
    t = time.perf_counter()
    b0 = t + 0.3
    f.segments = [(b0, b0 + BURST_S, BURST_W)]
    s.start()
    _sleep_until(t + 0.85)
    s.stop()
    a, b = t + 0.05, t + 0.65
    op = OpRecord(idx=0, name="aten::mm", device="cuda:0", windows_ns=[(_ns(a), _ns(b))])
    op.time_s = b - a
    p = Profile(run=RunInfo(name="c", device="cuda"), ops=[op])
    s.attribute(p)
    assert p.run.energy_j == pytest.approx(f.energy_j(a, b), rel=0.05)
    (series,) = p.power  # the stored timeline is the counter's, not the aux channel
    assert series.device == "gpu:0"
    aux = next(c for c in s.sampler.snapshot() if c.aux)
    assert max(aux.values) == pytest.approx(BURST_W, rel=0.05)
    assert p.config["energy.power_signal"] == INSTANT_SIGNAL


def test_instant_field_failing_mid_run_is_a_sensor_error(hopper):
    f = hopper()
    s = EnergySession.create("nvml:power", device="cuda:0")
    assert s.source.read() == [pytest.approx(BASE_W, rel=0.02)]
    f.field_fail = True
    with pytest.raises(SensorError):
        s.source.read()


def test_recorded_run_says_which_power_reading_it_used(hopper, tmp_path):
    """A real recording (`record_callable`, `--power nvml --replay`) on the fake board:
    the run and its report line name the instant field."""
    import torch

    from magneton.tracer.programs.record import RecordOptions, record_callable

    f = hopper()
    f.segments = [(0.0, 1e12, 250.0)]
    torch.manual_seed(0)
    x, w = torch.randn(64, 128), torch.randn(128, 96)
    opts = RecordOptions(power="nvml", replay=True, call_paths=False, warmup=1, repeat=2)
    p = record_callable(lambda x, w: torch.relu(x @ w).sum(), (x, w), run="r", options=opts)
    assert p.run.power_source == "nvml:gpu0"
    assert p.config["energy.power_signal"] == INSTANT_SIGNAL
    line = method_line(p)
    assert line.startswith("replayed per operator with nvml:gpu0")
    assert line.endswith(f"power readings: {INSTANT_SIGNAL}")
    reps = [r for r in p.energy.replay if not r["skipped"]]
    assert reps and all(r["power_w"] == pytest.approx(250.0, rel=0.05) for r in reps)
