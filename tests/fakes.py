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
