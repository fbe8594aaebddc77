"""Fake hardware the energy tests share: a RAPL powercap tree in a temp dir, and a
`RaplKernel` that answers reads of its counter as sysfs does (the exact integral of a
known power profile at the instant of the read). This machine has no RAPL files."""

from __future__ import annotations

import time
from pathlib import Path

MAX_UJ = 262_143_328_850


def make_rapl_tree(root: Path, pkg_uj: int = 1_000_000, dram_uj: int = 500_000) -> Path:
    pkg = root / "intel-rapl:0"
    (pkg / "intel-rapl:0:0").mkdir(parents=True)
    (pkg / "intel-rapl:0:1").mkdir()
    (root / "intel-rapl:1").mkdir()
    (pkg / "name").write_text("package-0\n")
    (pkg / "energy_uj").write_text(f"{pkg_uj}\n")
    (pkg / "max_energy_range_uj").write_text(f"{MAX_UJ}\n")
    (pkg / "intel-rapl:0:0" / "name").write_text("core\n")
    (pkg / "intel-rapl:0:0" / "energy_uj").write_text("7\n")
    (pkg / "intel-rapl:0:1" / "name").write_text("dram\n")
    (pkg / "intel-rapl:0:1" / "energy_uj").write_text(f"{dram_uj}\n")
    (pkg / "intel-rapl:0:1" / "max_energy_range_uj").write_text(f"{MAX_UJ}\n")
    (root / "intel-rapl:1" / "name").write_text("psys\n")
    (root / "intel-rapl:1" / "energy_uj").write_text("0\n")
    return root


class RaplKernel:
    """Plays the kernel for one RAPL zone: every read of intel-rapl:0/energy_uj returns the
    counter at that instant (the exact integral of a known power profile), as sysfs does.
    A writer thread rewriting a plain file would hand out values that are stale by however
    long a loaded machine delays it, which is not what the code under test sees."""

    def __init__(self, root: Path, energy_j_at):
        self.path = root / "intel-rapl:0" / "energy_uj"
        self.energy_j_at = energy_j_at
        self._orig = Path.read_text

    def __enter__(self):
        kernel, orig = self, self._orig

        def read_text(path, *a, **k):
            if path == kernel.path:
                uj = 1_000_000 + int(kernel.energy_j_at(time.perf_counter_ns()) * 1e6)
                return f"{uj}\n"
            return orig(path, *a, **k)

        Path.read_text = read_text
        return self

    def __exit__(self, *exc):
        Path.read_text = self._orig


class HopperNvml:
    """A `pynvml` module (the real constants, errors and field-value struct) for Hopper
    boards on the recording clock (`time.perf_counter`), each drawing a known power trace:
    `base_w` plus the `segments` (start_s, end_s, watts) a test sets.

    What it answers is what such a board answers:
    * `nvmlDeviceGetPowerUsage`: the 1 s boxcar average of the trace, mW;
    * field `NVML_FI_DEV_POWER_INSTANT` through `nvmlDeviceGetFieldValues`: the trace now,
      mW (`instant=False`: the field's `nvmlReturn` is NVML_ERROR_NOT_SUPPORTED, as on
      a board without it; `old_pynvml=True`: a pynvml that names neither the field nor
      the call);
    * `nvmlDeviceGetTotalEnergyConsumption`: the trace's integral, mJ, advanced in
      100 ms steps.
    Both power readings carry 0.3 % noise (seeded), so each poll is a fresh value.
    `instant` may be a list: one flag per GPU.
    """

    UPDATE_S = 0.1  # the energy counter's update period
    AVERAGE_S = 1.0  # nvmlDeviceGetPowerUsage's averaging window

    def __init__(
        self,
        base_w: float = 100.0,
        instant: bool | list[bool] = True,
        old_pynvml: bool = False,
        gpus: int = 1,
        seed: int = 0,
    ):
        import types

        import numpy as np
        import pynvml as real

        self.real = real
        self.base_w = base_w
        self.segments: list[tuple[float, float, float]] = []
        self.instant = instant if isinstance(instant, list) else [instant] * gpus
        self.field_fail = False
        self.field_calls: list[list[int]] = []
        self.origin = time.perf_counter()
        self._rng = np.random.default_rng(seed)
        mod = types.ModuleType("pynvml")
        mod.__dict__.update({k: v for k, v in real.__dict__.items() if not k.startswith("__")})
        mod.nvmlInit = lambda: None
        mod.nvmlShutdown = lambda: None
        mod.nvmlDeviceGetCount = lambda: gpus
        mod.nvmlDeviceGetHandleByIndex = lambda i: ("hopper", i)
        mod.nvmlDeviceGetUUID = lambda h: f"GPU-{h[1]:08x}-0000-0000-0000-000000000000"
        mod.nvmlDeviceGetPowerManagementLimitConstraints = lambda h: (200_000, 700_000)
        mod.nvmlDeviceGetPowerUsage = self.power_usage_mw
        mod.nvmlDeviceGetTotalEnergyConsumption = self.energy_mj
        mod.nvmlDeviceGetFieldValues = self.field_values
        if old_pynvml:
            del mod.NVML_FI_DEV_POWER_INSTANT
            del mod.nvmlDeviceGetFieldValues
        self.module = mod

    # the trace ------------------------------------------------------------------------

    def level_w(self, t: float) -> float:
        for a, b, w in self.segments:
            if a <= t < b:
                return w
        return self.base_w

    def energy_j(self, a: float, b: float) -> float:
        """The trace's exact integral over [a, b] (seconds on perf_counter)."""
        e = self.base_w * (b - a)
        for s0, s1, w in self.segments:
            overlap = max(0.0, min(b, s1) - max(a, s0))
            e += (w - self.base_w) * overlap
        return e

    def _noisy_mw(self, w: float) -> int:
        return int(round(w * (1.0 + 0.003 * float(self._rng.standard_normal())) * 1000))

    # NVML ---------------------------------------------------------------------------

    def power_usage_mw(self, h) -> int:
        now = time.perf_counter()
        return self._noisy_mw(self.energy_j(now - self.AVERAGE_S, now) / self.AVERAGE_S)

    def energy_mj(self, h) -> int:
        k = int((time.perf_counter() - self.origin) / self.UPDATE_S)
        return int(round(self.energy_j(self.origin, self.origin + k * self.UPDATE_S) * 1000))

    def field_values(self, h, field_ids):
        real = self.real
        self.field_calls.append(list(field_ids))
        if self.field_fail:
            raise real.NVMLError(real.NVML_ERROR_GPU_IS_LOST)
        out = (real.c_nvmlFieldValue_t * len(field_ids))()
        for fv, fid in zip(out, field_ids, strict=True):
            fv.fieldId = fid
            if fid == real.NVML_FI_DEV_POWER_INSTANT and self.instant[h[1]]:
                fv.nvmlReturn = real.NVML_SUCCESS
                fv.valueType = real.NVML_VALUE_TYPE_UNSIGNED_INT
                fv.value.uiVal = self._noisy_mw(self.level_w(time.perf_counter()))
            else:
                fv.nvmlReturn = real.NVML_ERROR_NOT_SUPPORTED
        return out
