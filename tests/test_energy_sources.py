"""Power sources: RAPL on a fake powercap tree, NVML through a fake pynvml, meter CSVs.

This machine has neither RAPL files nor an NVIDIA GPU, so these are the only tests that
fake hardware: a powercap directory tree in tmp_path (with a writer thread playing the
kernel's role) and a `pynvml` module in sys.modules whose constants and errors are the
real nvidia-ml-py ones.
"""

from __future__ import annotations

import sys
import time
import types
from pathlib import Path

import numpy as np
import pynvml as real_nvml
import pytest
from fakes import MAX_UJ, RaplKernel, make_rapl_tree

from magneton.model import MagnetonError, OpRecord, Profile, RunInfo
from magneton.tracer.energy.power import RaplSource, estimate_meter_offset, parse_meter_spec
from magneton.tracer.energy.session import EnergySession


def test_rapl_reads_package_and_dram_only(tmp_path):
    src = RaplSource(make_rapl_tree(tmp_path))
    assert src.name == "rapl:package-0+dram"
    assert [c.device for c in src.channels] == ["cpu:package-0", "cpu:dram-0"]
    assert all(c.counter for c in src.channels)
    assert src.read() == pytest.approx([1.0, 0.5])


def test_rapl_counter_wraparound_keeps_energy_increasing(tmp_path):
    root = make_rapl_tree(tmp_path, pkg_uj=MAX_UJ - 2_000_000)
    src = RaplSource(root)
    before = src.read()[0]
    (root / "intel-rapl:0" / "energy_uj").write_text("3000000\n")  # wrapped past the max
    after = src.read()[0]
    assert after - before == pytest.approx(5.0, abs=1e-6)  # 2 J to the top + 3 J after


def test_rapl_permission_denied_names_file_and_fix(tmp_path, monkeypatch):
    root = make_rapl_tree(tmp_path)
    real_read = Path.read_text

    def deny(self, *a, **k):
        if self.name == "energy_uj":
            raise PermissionError(13, "Permission denied", str(self))
        return real_read(self, *a, **k)

    monkeypatch.setattr(Path, "read_text", deny)
    with pytest.raises(MagnetonError) as e:
        EnergySession.create(f"rapl:{root}")
    msg = str(e.value)
    assert "\n" not in msg
    assert str(root / "intel-rapl:0" / "energy_uj") in msg
    assert "sudo chmod o+r" in msg and "root" in msg
    # auto falls back to the model and says why
    monkeypatch.setenv("MAGNETON_RAPL_ROOT", str(root))
    s = EnergySession.create("auto")
    assert s.source_name == "model:cpu-default" and s.method == "estimated"
    assert "permission denied" in s.note


def test_rapl_missing_tree_is_one_line_error(tmp_path):
    with pytest.raises(MagnetonError, match="no RAPL"):
        EnergySession.create(f"rapl:{tmp_path / 'nope'}")


def test_rapl_session_attributes_measured_energy(tmp_path):
    root = make_rapl_tree(tmp_path, dram_uj=0)
    t0 = time.perf_counter_ns()
    sec = lambda x: t0 + int(x * 1e9)  # noqa: E731
    busy = (sec(0.6), sec(1.0))

    def energy_j_at(t):  # 20 W always, +60 W inside `busy`
        inside = max(0, min(t, busy[1]) - busy[0])
        return 20.0 * (t - t0) / 1e9 + 60.0 * inside / 1e9

    with RaplKernel(root, energy_j_at):
        s = EnergySession.create(f"rapl:{root}", interval_s=0.002)
        s.start()
        time.sleep(1.45)
        s.stop()
    ops = [
        OpRecord(idx=0, name="aten::mul", windows_ns=[(sec(0.3), sec(0.6))]),
        OpRecord(idx=1, name="aten::mm", windows_ns=[busy]),
        OpRecord(idx=2, name="aten::add", windows_ns=[(sec(1.0), sec(1.3))]),
    ]
    for op in ops:
        op.time_s = (op.windows_ns[0][1] - op.windows_ns[0][0]) / 1e9
    p = Profile(run=RunInfo(name="r"), ops=ops)
    s.attribute(p)
    assert p.run.power_source == "rapl:package-0+dram"
    assert p.run.energy_method == "measured"
    assert all(op.energy_method == "measured" for op in ops)
    # 20 W for 0.3 s, 80 W for 0.4 s, 20 W for 0.3 s
    assert [op.energy_j for op in ops] == pytest.approx([6.0, 32.0, 6.0], rel=0.08)
    assert sum(op.energy_j for op in ops) == pytest.approx(p.run.energy_j, rel=1e-9)
    assert p.run.energy_j == pytest.approx(44.0, rel=0.03)
    assert {ps.device for ps in p.power} == {"cpu:package-0", "cpu:dram-0"}
    assert all(len(ps.t_ns) <= 4000 for ps in p.power)


# ---------------------------------------------------------------------------------------
# NVML
# ---------------------------------------------------------------------------------------


class FakeNvml:
    """Three physical GPUs with distinct constant power; errors on demand."""

    UUIDS = [
        "GPU-aaaaaaaa-0000-0000-0000-000000000000",
        "GPU-bbbbbbbb-0000-0000-0000-000000000000",
        "GPU-cccccccc-0000-0000-0000-000000000000",
    ]

    def __init__(self, counter: bool = True, power_error=None):
        self.fail = False
        self.calls = 0
        self.counter = counter
        self.power_error = power_error
        self.t0 = time.perf_counter()
        mod = types.ModuleType("pynvml")
        mod.__dict__.update({k: v for k, v in real_nvml.__dict__.items() if not k.startswith("__")})
        mod.nvmlInit = lambda: None
        mod.nvmlShutdown = lambda: None
        mod.nvmlDeviceGetCount = lambda: 3
        mod.nvmlDeviceGetHandleByIndex = lambda i: ("h", i)
        mod.nvmlDeviceGetUUID = lambda h: self.UUIDS[h[1]]
        mod.nvmlDeviceGetPowerUsage = self.power_mw
        mod.nvmlDeviceGetTotalEnergyConsumption = self.energy_mj
        self.module = mod

    def watts(self, h) -> float:
        return 100.0 * (h[1] + 1)

    def check(self):
        self.calls += 1
        if self.fail:
            raise real_nvml.NVMLError(real_nvml.NVML_ERROR_GPU_IS_LOST)

    def power_mw(self, h):
        if self.power_error is not None:
            raise real_nvml.NVMLError(self.power_error)
        self.check()
        return int(self.watts(h) * 1000)

    def energy_mj(self, h):
        if not self.counter:
            raise real_nvml.NVMLError(real_nvml.NVML_ERROR_NOT_SUPPORTED)
        self.check()
        return int(self.watts(h) * (time.perf_counter() - self.t0) * 1000)


@pytest.fixture
def fake_nvml(monkeypatch):
    def install(**kw) -> FakeNvml:
        f = FakeNvml(**kw)
        monkeypatch.setitem(sys.modules, "pynvml", f.module)
        return f

    return install


def test_nvml_maps_visible_index_and_uuid_to_physical(fake_nvml, monkeypatch):
    fake_nvml()
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,0")
    s = EnergySession.create("nvml", device="cuda:0")
    assert s.source_name == "nvml:gpu0"
    # visible 0 is physical 2 (300 W)
    assert s.source.read()[1] == pytest.approx(300.0)  # aux power channel
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-bbbb")
    s = EnergySession.create("nvml", device="cuda")
    assert s.source.read()[1] == pytest.approx(200.0)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    with pytest.raises(MagnetonError, match="no GPU"):
        EnergySession.create("nvml", device="cuda")


def test_nvml_power_spec_forces_power_readings(fake_nvml, monkeypatch):
    fake_nvml()
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    s = EnergySession.create("nvml:power", device="cuda:2")
    assert [(c.device, c.counter, c.aux) for c in s.source.channels] == [("gpu:2", False, False)]
    assert s.source.read() == [300.0]
    with pytest.raises(MagnetonError, match="unknown NVML option"):
        EnergySession.create("nvml:fast", device="cuda")


def test_nvml_without_counter_uses_power_readings(fake_nvml, monkeypatch):
    fake_nvml(counter=False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    s = EnergySession.create("nvml", device="cuda:1")
    assert [(c.device, c.counter) for c in s.source.channels] == [("gpu:1", False)]
    assert s.source.read() == [200.0]


def test_nvml_permission_denied_is_one_line(fake_nvml):
    fake_nvml(counter=False, power_error=real_nvml.NVML_ERROR_NO_PERMISSION)
    with pytest.raises(MagnetonError, match="denies power readings"):
        EnergySession.create("nvml", device="cuda:0")


def test_real_nvml_without_driver_is_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", real_nvml)
    with pytest.raises(MagnetonError, match="NVML could not start"):
        EnergySession.create("nvml", device="cuda")
    # auto on a CPU device never tries NVML; without RAPL it ends at the model and says so
    monkeypatch.setenv("MAGNETON_RAPL_ROOT", "/nonexistent-powercap")
    s = EnergySession.create("auto", device="cpu")
    assert s.method == "estimated" and s.note == "no power sensor on this machine"
    assert s.source_name == "model:cpu-default"


def test_nvml_error_mid_run_leaves_marked_gap(fake_nvml, monkeypatch):
    f = fake_nvml()
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    s = EnergySession.create("nvml", device="cuda:0", interval_s=0.002)
    s.start()
    t0 = time.perf_counter_ns()
    time.sleep(0.1)
    f.fail = True
    time.sleep(0.1)
    f.fail = False
    time.sleep(0.1)
    t1 = time.perf_counter_ns()
    s.stop()
    ops = [OpRecord(idx=0, name="aten::mm", device="cuda:0", windows_ns=[(t0, t1)])]
    ops[0].time_s = (t1 - t0) / 1e9
    p = Profile(run=RunInfo(name="g", device="cuda"), ops=ops)
    s.attribute(p)
    (series,) = p.power
    assert series.device == "gpu:0" and len(series.gaps) == 1
    g0, g1 = series.gaps[0]
    assert 0.08e9 < g1 - g0 < 0.16e9
    # the counter spans the gap: 100 W over the whole window still
    assert ops[0].energy_j == pytest.approx(100.0 * (t1 - t0) / 1e9, rel=0.05)
    assert p.config["energy.sensor_gaps"] == "1"
    assert "GPU is lost" in p.config["energy.sensor_errors"]


# ---------------------------------------------------------------------------------------
# Meter
# ---------------------------------------------------------------------------------------


def _meter_setup(tmp_path, true_offset_s: float, spec_offset: str):
    """Ops at known times; a 1 kHz meter CSV whose clock is `true_offset_s` behind."""
    csv = tmp_path / "meter.csv"
    s = EnergySession.create(f"meter:{csv}{spec_offset}")
    p0 = s.perf_at_start_ns
    windows = [(1.00, 1.20), (1.35, 1.40), (1.70, 2.10), (2.50, 2.55)]
    ops = []
    for i, (a, b) in enumerate(windows):
        op = OpRecord(
            idx=i,
            name="aten::mm" if b - a > 0.1 else "aten::add",
            windows_ns=[(p0 + int(a * 1e9), p0 + int(b * 1e9))],
            input_shapes=[[256, 256], [256, 256]],
            input_dtypes=["float32"] * 2,
            output_shapes=[[256, 256]],
            output_dtypes=["float32"],
        )
        op.time_s = b - a
        ops.append(op)
    t = np.arange(0.0, 3.5, 0.001)
    busy = np.zeros_like(t, bool)
    for a, b in windows:
        busy |= (t >= a) & (t < b)
    watts = np.where(busy, 150.0, 40.0)
    lines = ["timestamp_s,watts"] + [
        f"{ti - true_offset_s:.6f},{w:.3f}" for ti, w in zip(t, watts, strict=True)
    ]
    csv.write_text("\n".join(lines) + "\n")
    s.idle_window_ns = (p0 + int(0.2e9), p0 + int(0.8e9))
    return s, Profile(run=RunInfo(name="m"), ops=ops), windows


def test_meter_with_given_offset_is_aligned(tmp_path):
    s, p, windows = _meter_setup(tmp_path, 0.75, "@0.75")
    s.attribute(p)
    expect = [150.0 * (b - a) for a, b in windows]
    own = [op.energy_j for op in p.ops]
    # own windows at 150 W plus the 40 W gaps charged to the nearest op
    gaps = 40.0 * ((2.55 - 1.00) - sum(b - a for a, b in windows))
    assert sum(own) == pytest.approx(sum(expect) + gaps, rel=0.01)
    assert p.ops[2].energy_j > expect[2] * 0.99
    assert p.run.idle_w == pytest.approx(40.0, rel=1e-3)
    assert p.run.power_source == "meter:meter.csv"
    assert p.config["energy.meter_alignment"] == "given"


def test_meter_offset_estimated_by_cross_correlation(tmp_path):
    s, p, windows = _meter_setup(tmp_path, 0.4321, "")
    s.attribute(p)
    assert float(p.config["energy.meter_offset_s"]) == pytest.approx(0.4321, abs=0.003)
    assert p.config["energy.meter_alignment"] == "cross-correlation"
    mm = p.ops[2]
    assert mm.energy_j == pytest.approx(150.0 * 0.4 + 40.0 * (0.30 + 0.40) / 2, rel=0.02)


def test_meter_spec_parsing(tmp_path):
    assert parse_meter_spec("meter:/x/y.csv@1.5") == (Path("/x/y.csv"), 1.5)
    assert parse_meter_spec("meter:/x/y.csv@-2") == (Path("/x/y.csv"), -2.0)
    assert parse_meter_spec("meter:/x/y.csv") == (Path("/x/y.csv"), None)
    with pytest.raises(MagnetonError):
        parse_meter_spec("meter:")


def test_estimate_offset_recovers_shift_of_step_trace():
    t = (np.arange(0, 4.0, 0.002) * 1e9).astype(np.int64)
    tpl = np.where((t > 1.0e9) & (t < 1.6e9) | (t > 2.2e9) & (t < 2.3e9), 1.0, 0.0)
    meter_t = t + int(0.25e9)  # the meter's clock runs 250 ms late
    meter_w = 30 + 100 * tpl
    assert estimate_meter_offset(meter_t, meter_w, t, tpl) == pytest.approx(-0.25, abs=0.004)
