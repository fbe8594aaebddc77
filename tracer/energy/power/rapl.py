"""Intel/AMD RAPL through the powercap sysfs tree (package and DRAM domains), counters
unwrapped at `max_energy_range_uj`.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from magneton.model import MagnetonError
from magneton.tracer.energy.power.base import Channel, PowerSource, SensorError

RAPL_ROOT_ENV = "MAGNETON_RAPL_ROOT"
DEFAULT_RAPL_ROOT = "/sys/class/powercap"


@dataclass
class _RaplZone:
    path: Path
    label: str
    max_range_j: float
    last_raw_uj: int = -1
    wrapped_j: float = 0.0


def _rapl_permission_error(path: Path) -> MagnetonError:
    return MagnetonError(
        f"permission denied reading {path} (RAPL counters are root-only on current "
        f"kernels): run as root or grant read access with `sudo chmod o+r {path}`, "
        "or use --power model"
    )


class RaplSource(PowerSource):
    kind = "rapl"
    settle_s = 0.01  # RAPL counters update about every millisecond
    update_period_s = 0.001

    def __init__(self, root: str | os.PathLike | None = None):
        root_path = Path(root or os.environ.get(RAPL_ROOT_ENV) or DEFAULT_RAPL_ROOT)
        if not root_path.is_dir():
            raise MagnetonError(f"no RAPL powercap tree at {root_path} (use --power model)")
        zones: list[_RaplZone] = []
        tops = sorted(
            (p for p in root_path.iterdir() if re.fullmatch(r"intel-rapl:\d+", p.name)),
            key=lambda p: int(p.name.split(":")[1]),
        )
        packages = 0
        for top in tops:
            name = _read_text(top / "name")
            if name.startswith("package"):
                packages += 1
                zones.append(self._zone(top, name))
                subs = sorted(
                    (p for p in top.iterdir() if re.fullmatch(r"intel-rapl:\d+:\d+", p.name)),
                    key=lambda p: int(p.name.split(":")[2]),
                )
                for sub in subs:
                    if _read_text(sub / "name") == "dram":
                        pkg = name.split("-", 1)[1] if "-" in name else top.name.split(":")[1]
                        zones.append(self._zone(sub, f"dram-{pkg}"))
            elif name == "dram":
                zones.append(self._zone(top, f"dram-{top.name.split(':')[1]}"))
        if not zones:
            raise MagnetonError(
                f"no RAPL package/dram domains under {root_path} (use --power model)"
            )
        self._zones = zones
        self.channels = [Channel(f"cpu:{z.label}", True) for z in zones]
        labels = [z.label for z in zones]
        if packages == 1:
            labels = [lbl.removesuffix("-0") if lbl.startswith("dram") else lbl for lbl in labels]
        self.name = "rapl:" + "+".join(labels)
        for z in zones:  # first read: fails early with the permission message
            self._read_zone(z)
        self.max_power_w = sum(_limit_w(z.path) for z in zones if z.label.startswith("package"))

    @staticmethod
    def _zone(path: Path, label: str) -> _RaplZone:
        max_uj = _read_text(path / "max_energy_range_uj")
        try:
            max_range = float(max_uj) * 1e-6 if max_uj else 0.0
        except ValueError:
            max_range = 0.0
        return _RaplZone(path=path, label=label, max_range_j=max_range)

    @staticmethod
    def _read_zone(z: _RaplZone) -> float:
        f = z.path / "energy_uj"
        try:
            raw = int(f.read_text().strip())
        except PermissionError:
            raise _rapl_permission_error(f) from None
        except (OSError, ValueError) as e:
            raise SensorError(f"{f}: {e}") from None
        if z.last_raw_uj >= 0 and raw < z.last_raw_uj:
            # The counter wrapped at max_energy_range_uj (about every minute at high load
            # on some parts); without this the run would show a huge negative step.
            z.wrapped_j += z.max_range_j if z.max_range_j > 0 else z.last_raw_uj * 1e-6
        z.last_raw_uj = raw
        return z.wrapped_j + raw * 1e-6

    def read(self) -> list[float]:
        return [self._read_zone(z) for z in self._zones]


def _limit_w(zone: Path) -> float:
    """The largest power constraint of a RAPL zone (its long- or short-term limit), 0
    when it has none."""
    best = 0.0
    for f in zone.glob("constraint_*_max_power_uw"):
        try:
            best = max(best, float(f.read_text().strip()) * 1e-6)
        except (OSError, ValueError):
            continue
    return best


def _read_text(path: Path) -> str:
    try:
        return path.read_text().strip()
    except PermissionError:
        raise _rapl_permission_error(path) from None
    except OSError:
        return ""
