"""Power sources behind one interface, the side-thread sampler, and the energy model.

Every way Magneton learns about power is a `PowerSource`:

* `NvmlSource`  - NVIDIA GPUs through `pynvml` (nvidia-ml-py). Uses the board's total-energy
  counter (`nvmlDeviceGetTotalEnergyConsumption`, mJ) where the GPU has one, else the power
  reading (`nvmlDeviceGetPowerUsage`, mW). Visible CUDA indices are mapped to physical NVML
  devices (CUDA_VISIBLE_DEVICES with indices or UUIDs), because NVML numbers GPUs by PCI bus
  and would otherwise silently measure a GPU the program never used.
* `RaplSource`  - Intel/AMD RAPL through the powercap sysfs tree (package and DRAM domains;
  core/uncore are sub-domains of the package and psys covers the whole platform, so both
  are skipped to avoid counting the same joules twice). Counters wrap at
  `max_energy_range_uj`; the source unwraps them so a long run never goes negative.
* `MeterSource` - a CSV (timestamp_s, watts) written by an external meter, aligned to the
  recording clock after the run (`meter_to_perf_ns`, and `estimate_meter_offset` when the
  meter's clock is not the recorder's: the shift that best lines the meter's trace up with
  the run's activity).

Without any sensor there is no source: the energy model prices each operator with the
documented energy roofline `E = P_static·t + e_flop·FLOPs + e_byte·bytes`
(`ModelCoefficients`, profiles in `MODELS`, chosen by `load_model`).

Live sources are polled by `Sampler`, a daemon thread on a fixed cadence: sampling on the
clock, independently of the operators, rather than reading the sensor in each operator's
begin/end callbacks, which would read a stale value for any operator shorter than the
sensor's update period. Energy per operator then comes from integrating the sampled trace
over the operator's window (tracer/energy.py).
A sensor error mid-run never propagates into the workload: the sampler records the span as a
gap (`PowerSeries.gaps`) and keeps polling.

Timestamps are `time.perf_counter_ns()`, the clock the recorder uses for operator windows.
"""

from __future__ import annotations

import csv
import importlib
import json
import math
import os
import re
import threading
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from magneton.graphdb.model import MagnetonError, OpRecord

from .flops import count_op, dominant_dtype

# ---------------------------------------------------------------------------------------
# Energy model coefficients
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelCoefficients:
    """One energy-roofline profile. Energies in picojoules, powers in watts.

    `e_flop_pj` maps a dtype name ("float32", "bfloat16", ...) to pJ per FLOP; the key
    "default" is used for any other dtype. `citation` names where the figures come from.
    """

    name: str
    p_static_w: float
    e_flop_pj: dict[str, float]
    e_byte_pj: float
    tdp_w: float = 0.0
    citation: str = ""

    def flop_pj(self, dtype: str) -> float:
        d = dtype.removeprefix("torch.")
        aliases = {"half": "float16", "float": "float32", "double": "float64"}
        d = aliases.get(d, d)
        return self.e_flop_pj.get(d, self.e_flop_pj.get("default", 0.0))

    def dynamic_j(self, op: OpRecord) -> float:
        """Energy above the static floor: FLOPs and bytes priced by the profile."""
        return (op.flops * self.flop_pj(dominant_dtype(op)) + op.bytes * self.e_byte_pj) * 1e-12

    def op_energy_j(self, op: OpRecord, time_s: float) -> float:
        return self.p_static_w * time_s + self.dynamic_j(op)


# Built-in profiles. Derivations are in docs/energy.md ("Model coefficients"): e_flop is the
# datasheet dynamic power budget (TDP - idle) divided by the datasheet peak throughput for
# that dtype, e_byte is a published DRAM energy per bit times 8, and P_static is the idle
# draw of the whole device (what a board/package sensor reports with nothing running).
MODELS: dict[str, ModelCoefficients] = {
    "cpu-default": ModelCoefficients(
        name="cpu-default",
        p_static_w=90.0,
        e_flop_pj={"float64": 70.0, "float32": 35.0, "default": 35.0},
        e_byte_pj=100.0,
        tdp_w=270.0,
        citation="x86 server socket (Xeon Platinum 8380-class datasheet: 270 W TDP, "
        "~5 TFLOP/s FP32 AVX-512); DRAM energy per bit after Horowitz, ISSCC 2014",
    ),
    "h100": ModelCoefficients(
        name="h100",
        p_static_w=70.0,
        e_flop_pj={
            "bfloat16": 0.64,
            "float16": 0.64,
            "float8_e4m3fn": 0.32,
            "float8_e5m2": 0.32,
            "float32": 9.4,
            "float64": 9.4,
            "default": 9.4,
        },
        e_byte_pj=31.0,
        tdp_w=700.0,
        citation="NVIDIA H100 SXM5 datasheet (700 W, 989 TFLOP/s dense BF16, 67 TFLOP/s "
        "FP32, 3.35 TB/s HBM3); HBM 3.9 pJ/bit (O'Connor et al., MICRO 2017)",
    ),
    "h200": ModelCoefficients(
        name="h200",
        p_static_w=75.0,
        e_flop_pj={
            "bfloat16": 0.63,
            "float16": 0.63,
            "float8_e4m3fn": 0.32,
            "float8_e5m2": 0.32,
            "float32": 9.3,
            "float64": 9.3,
            "default": 9.3,
        },
        e_byte_pj=31.0,
        tdp_w=700.0,
        citation="NVIDIA H200 SXM datasheet (700 W, 989 TFLOP/s dense BF16, 67 TFLOP/s "
        "FP32, 4.8 TB/s HBM3e); HBM 3.9 pJ/bit (O'Connor et al., MICRO 2017)",
    ),
    "a100": ModelCoefficients(
        name="a100",
        p_static_w=55.0,
        e_flop_pj={"bfloat16": 1.1, "float16": 1.1, "float32": 17.7, "default": 17.7},
        e_byte_pj=31.0,
        tdp_w=400.0,
        citation="NVIDIA A100 SXM4 80GB datasheet (400 W, 312 TFLOP/s BF16, 19.5 TFLOP/s "
        "FP32, 2.0 TB/s HBM2e); HBM 3.9 pJ/bit (O'Connor et al., MICRO 2017)",
    ),
    "rtx4090": ModelCoefficients(
        name="rtx4090",
        p_static_w=20.0,
        e_flop_pj={"bfloat16": 2.6, "float16": 2.6, "float32": 5.2, "default": 5.2},
        e_byte_pj=60.0,
        tdp_w=450.0,
        citation="NVIDIA RTX 4090 specifications (450 W, 82.6 TFLOP/s FP32, 165 TFLOP/s "
        "FP16 tensor, 1008 GB/s GDDR6X); GDDR6X ~7.5 pJ/bit",
    ),
}
MODELS["gpu-default"] = ModelCoefficients(
    **{**MODELS["a100"].__dict__, "name": "gpu-default"},
)

# The work alone (FLOPs and bytes of the CPU default), no static power x measured time:
# deterministic for the same shapes, so comparisons of identical work cannot be moved by
# a loaded machine. It cannot see a slower kernel doing the same work (mkldnn vs thnn),
# which is why it is not the default.
MODELS["work-only"] = ModelCoefficients(
    **{
        **MODELS["cpu-default"].__dict__,
        "name": "work-only",
        "p_static_w": 0.0,
        "citation": "cpu-default's e_flop and e_byte with P_static = 0 (work only)",
    },
)

MODEL_ENV = "MAGNETON_ENERGY_MODEL"


def load_model(spec: str = "", device: str = "cpu") -> ModelCoefficients:
    """Resolve a model profile: a built-in name, a TOML/JSON file, or the device default.

    Order: explicit `spec`, then $MAGNETON_ENERGY_MODEL, then the default for `device`
    (a known GPU name when torch can see one, else "gpu-default"; "cpu-default" on CPU).
    """
    spec = spec or os.environ.get(MODEL_ENV, "")
    if not spec:
        return MODELS[_default_model_name(device)]
    key = spec.strip().lower()
    if key in MODELS:
        return MODELS[key]
    path = Path(spec).expanduser()
    if path.is_file():
        return _load_model_file(path)
    raise MagnetonError(
        f"unknown energy model {spec!r}: use one of {', '.join(sorted(MODELS))} "
        "or a path to a .toml/.json file with p_static_w, e_flop_pj, e_byte_pj"
    )


def _default_model_name(device: str) -> str:
    if not device.startswith("cuda"):
        return "cpu-default"
    try:
        import torch

        if torch.cuda.is_available():
            idx = int(device.split(":", 1)[1]) if ":" in device else 0
            gpu = torch.cuda.get_device_name(idx).lower()
            for key, name in (("h200", "h200"), ("h100", "h100"), ("a100", "a100")):
                if key in gpu:
                    return name
            if "4090" in gpu:
                return "rtx4090"
    except Exception:  # a broken CUDA setup must not stop a model-based estimate
        pass
    return "gpu-default"


def _load_model_file(path: Path) -> ModelCoefficients:
    try:
        if path.suffix.lower() == ".json":
            data = json.loads(path.read_text())
        else:
            data = tomllib.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise MagnetonError(f"cannot read energy model {path}: {e}") from None
    missing = [k for k in ("p_static_w", "e_flop_pj", "e_byte_pj") if k not in data]
    if missing:
        raise MagnetonError(f"energy model {path} lacks {', '.join(missing)}")
    flop = data["e_flop_pj"]
    if not isinstance(flop, dict):
        flop = {"default": float(flop)}
    return ModelCoefficients(
        name=str(data.get("name", path.stem)),
        p_static_w=float(data["p_static_w"]),
        e_flop_pj={str(k): float(v) for k, v in flop.items()},
        e_byte_pj=float(data["e_byte_pj"]),
        tdp_w=float(data.get("tdp_w", 0.0)),
        citation=str(data.get("citation", f"user file {path}")),
    )


# ---------------------------------------------------------------------------------------
# Sources
# ---------------------------------------------------------------------------------------


class SensorError(Exception):
    """A reading failed mid-run (recorded as a gap, never raised into the workload)."""


@dataclass
class Channel:
    """One measured quantity of a source.

    `device` is the PowerSeries device label ("gpu:0", "cpu:package-0", "cpu:dram-0").
    `counter` True: readings are cumulative joules (exact energy between any two reads);
    False: readings are instantaneous watts (integrated with the trapezoid rule).
    """

    device: str
    counter: bool
    # auxiliary channels are not attributed (they duplicate a primary one); replay reads
    # them for steady-state power (NVML power next to the NVML energy counter)
    aux: bool = False


class PowerSource:
    """Interface of every live source. `read()` returns one value per channel."""

    kind: str = ""
    name: str = ""
    channels: list[Channel]
    # Seconds a reading lags the activity it reports (sensor averaging + update delay).
    # Idle measurement and replay warm-up wait at least this long before trusting values.
    settle_s: float = 0.0
    # Typical seconds between fresh values; replay sizes its windows from it.
    update_period_s: float = 0.0

    def read(self) -> list[float]:
        raise NotImplementedError

    def close(self) -> None:
        pass


def _import_pynvml():
    # Imported lazily and by name so tests can place a fake module in sys.modules.
    try:
        return importlib.import_module("pynvml")
    except ImportError:
        raise MagnetonError(
            "NVML power needs nvidia-ml-py: `pip install nvidia-ml-py` (or use --power model)"
        ) from None


def _visible_gpu_handles(nvml, device: str) -> list[tuple[int, object, str]]:
    """(visible index, NVML handle, uuid) for the GPUs this process can use.

    Prefers torch's device UUIDs (exact even when CUDA enumerates fastest-first), then
    CUDA_VISIBLE_DEVICES (indices or UUID prefixes, stopping at the first invalid entry as
    CUDA does), then all NVML devices in NVML order.
    """
    count = nvml.nvmlDeviceGetCount()
    physical = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]

    def uuid_of(h) -> str:
        u = nvml.nvmlDeviceGetUUID(h)
        return u.decode() if isinstance(u, bytes) else str(u)

    handles: list[tuple[int, object, str]] = []
    torch_uuids = _torch_gpu_uuids()
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if torch_uuids:
        by_uuid = {uuid_of(h).removeprefix("GPU-").lower(): h for h in physical}
        for vis, u in enumerate(torch_uuids):
            h = by_uuid.get(u.lower())
            if h is not None:
                handles.append((vis, h, "GPU-" + u))
    elif env is not None:
        entries = [e.strip() for e in env.split(",")]
        uuids = [uuid_of(h) for h in physical]
        for vis, entry in enumerate(entries):
            if re.fullmatch(r"\d+", entry):
                i = int(entry)
                if i >= count:
                    break
                handles.append((vis, physical[i], uuids[i]))
            elif entry.startswith("GPU-") or entry.startswith("MIG-"):
                if entry.startswith("MIG-"):
                    raise MagnetonError(
                        "CUDA_VISIBLE_DEVICES names a MIG slice; NVML cannot measure MIG "
                        "power: set it to the parent GPU's index or use --power model"
                    )
                matches = [i for i, u in enumerate(uuids) if u.startswith(entry)]
                if len(matches) != 1:
                    break
                handles.append((vis, physical[matches[0]], uuids[matches[0]]))
            else:
                break
    else:
        handles = [(i, h, "") for i, h in enumerate(physical)]
    if ":" in device:
        want = int(device.split(":", 1)[1])
        handles = [t for t in handles if t[0] == want]
    return handles


def _torch_gpu_uuids() -> list[str]:
    try:
        import torch

        if not torch.cuda.is_available():
            return []
        return [
            str(torch.cuda.get_device_properties(i).uuid) for i in range(torch.cuda.device_count())
        ]
    except Exception:
        return []


class NvmlSource(PowerSource):
    kind = "nvml"
    # NVML power is averaged over a window and refreshed every ~20-100 ms, and can lag by
    # hundreds of ms (Magneton paper §5.2; Yang et al., SC24).
    settle_s = 0.3
    update_period_s = 0.1

    def __init__(self, device: str = "cuda"):
        nvml = _import_pynvml()
        self._nvml = nvml
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as e:
            raise MagnetonError(
                f"NVML could not start ({e}): is the NVIDIA driver loaded? use --power model "
                "for an estimate"
            ) from None
        try:
            gpus = _visible_gpu_handles(nvml, device)
        except nvml.NVMLError as e:
            raise MagnetonError(f"NVML could not list GPUs ({e})") from None
        if not gpus:
            raise MagnetonError(
                f"NVML sees no GPU for device {device!r} (check CUDA_VISIBLE_DEVICES)"
            )
        self._handles = []
        self.channels = []
        for vis, h, _uuid in gpus:
            counter = True
            try:
                nvml.nvmlDeviceGetTotalEnergyConsumption(h)
            except nvml.NVMLError:
                counter = False  # pre-Volta or vGPU: fall back to power readings
            if not counter:
                try:
                    nvml.nvmlDeviceGetPowerUsage(h)
                except nvml.NVMLError as e:
                    if getattr(e, "value", None) == getattr(nvml, "NVML_ERROR_NO_PERMISSION", -1):
                        raise MagnetonError(
                            f"NVML denies power readings of GPU {vis} ({e}): run as a user "
                            "allowed to query the GPU (e.g. root) or use --power model"
                        ) from None
                    raise MagnetonError(
                        f"GPU {vis} reports neither energy nor power through NVML ({e}); "
                        "use --power model"
                    ) from None
            self._handles.append(h)
            self.channels.append(Channel(f"gpu:{vis}", counter))
            if counter:
                # the power reading too: replay averages fresh readings of a steady loop,
                # which needs no update timing (counter interpolation does)
                try:
                    nvml.nvmlDeviceGetPowerUsage(h)
                    self._handles.append(h)
                    self.channels.append(Channel(f"gpu:{vis}", False, aux=True))
                except nvml.NVMLError:
                    pass
        self.name = "nvml:" + "+".join(
            c.device.replace(":", "") for c in self.channels if not c.aux
        )

    def force_power(self) -> None:
        """Use power readings only (`nvml:power`): energy by the trapezoid rule over them."""
        keep = [i for i, c in enumerate(self.channels) if not c.aux]
        self._handles = [self._handles[i] for i in keep]
        self.channels = [Channel(self.channels[i].device, False) for i in keep]

    def read(self) -> list[float]:
        nvml = self._nvml
        out = []
        try:
            for h, ch in zip(self._handles, self.channels, strict=True):
                if ch.counter:
                    out.append(nvml.nvmlDeviceGetTotalEnergyConsumption(h) / 1000.0)  # mJ -> J
                else:
                    out.append(nvml.nvmlDeviceGetPowerUsage(h) / 1000.0)  # mW -> W
        except nvml.NVMLError as e:
            raise SensorError(str(e)) from None
        return out

    def close(self) -> None:
        try:
            self._nvml.nvmlShutdown()
        except Exception:
            pass


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


def _read_text(path: Path) -> str:
    try:
        return path.read_text().strip()
    except PermissionError:
        raise _rapl_permission_error(path) from None
    except OSError:
        return ""


# ---------------------------------------------------------------------------------------
# External meter CSV
# ---------------------------------------------------------------------------------------


@dataclass
class MeterTrace:
    t_s: np.ndarray  # meter timestamps as written in the file
    watts: np.ndarray


def parse_meter_spec(spec: str) -> tuple[Path, float | None]:
    """`meter:FILE[@OFFSET_S]` -> (path, offset or None)."""
    body = spec.split(":", 1)[1] if ":" in spec else ""
    if not body:
        raise MagnetonError("meter source needs a file: --power meter:FILE[@OFFSET_S]")
    offset = None
    m = re.fullmatch(r"(.*)@([-+]?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)", body)
    if m:
        body, offset = m.group(1), float(m.group(2))
    return Path(body).expanduser(), offset


def read_meter_csv(path: Path) -> MeterTrace:
    """Read (timestamp_s, watts) rows; a header row and extra columns are allowed."""
    try:
        with open(path, newline="") as f:
            rows = list(csv.reader(f))
    except OSError as e:
        raise MagnetonError(f"cannot read meter file {path}: {e.strerror or e}") from None
    ts, ws = [], []
    for row in rows:
        if len(row) < 2:
            continue
        try:
            t, w = float(row[0]), float(row[1])
        except ValueError:
            continue  # header or comment
        if math.isfinite(t) and math.isfinite(w):
            ts.append(t)
            ws.append(w)
    if len(ts) < 2:
        raise MagnetonError(f"meter file {path} has fewer than 2 (timestamp_s, watts) rows")
    order = np.argsort(ts, kind="stable")
    return MeterTrace(np.asarray(ts, float)[order], np.asarray(ws, float)[order])


class MeterSource(PowerSource):
    """An external meter's CSV. Nothing is polled live: the file is read (and aligned to the
    recording clock) after the run, when the meter has written it."""

    kind = "meter"
    settle_s = 0.0
    update_period_s = 0.0

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.channels = [Channel("meter", False)]
        self.name = f"meter:{self.path.name}"

    def read(self) -> list[float]:
        raise SensorError("an external meter is read from its file after the run")


# Meter timestamps above this are Unix time; below it they count from the session start.
UNIX_TIME_THRESHOLD_S = 1e8


def meter_to_perf_ns(
    t_s: np.ndarray, offset_s: float, epoch_at_start_s: float, perf_at_start_ns: int
) -> np.ndarray:
    """Map meter timestamps onto the perf_counter_ns clock.

    Unix-time meters: host_unix = t + offset, then shifted by the (time.time(),
    perf_counter_ns) pair captured when the session started. Relative meters
    (t < 1e8 s): t + offset counts seconds from that same start instant.
    """
    t = np.asarray(t_s, float) + offset_s
    if len(t) and float(np.median(t)) > UNIX_TIME_THRESHOLD_S:
        t = t - epoch_at_start_s
    return (perf_at_start_ns + t * 1e9).astype(np.int64)


def estimate_meter_offset(
    meter_t_ns: np.ndarray,
    meter_w: np.ndarray,
    template_t_ns: np.ndarray,
    template_w: np.ndarray,
    max_shift_s: float = 5.0,
    step_s: float | None = None,
) -> float:
    """Shift (s) to add to the meter's times so its trace best matches `template`.

    Both traces are resampled on a uniform grid (step = the meter's median interval,
    at least 1 ms) and the shift maximising the normalised cross-correlation of their
    mean-removed values is returned. The template is the expected power shape of the run
    (the model's per-operator power, idle at 0 between operators), so the idle-to-busy
    edges of the run - including the idle measurement before it - pin the alignment.
    """
    if len(meter_t_ns) < 4 or len(template_t_ns) < 2:
        return 0.0
    if step_s is None:
        step_s = max(1e-3, float(np.median(np.diff(meter_t_ns))) / 1e9)
    step_ns = step_s * 1e9
    lo = min(meter_t_ns[0], template_t_ns[0]) - max_shift_s * 1e9
    hi = max(meter_t_ns[-1], template_t_ns[-1]) + max_shift_s * 1e9
    grid = np.arange(lo, hi, step_ns)
    if len(grid) > 2_000_000:
        raise MagnetonError("meter trace too long to align automatically; give @OFFSET_S")
    m = np.interp(grid, meter_t_ns, meter_w, left=meter_w[0], right=meter_w[-1])
    tpl = np.interp(grid, template_t_ns, template_w, left=0.0, right=0.0)
    m = m - m.mean()
    tpl = tpl - tpl.mean()
    max_lag = int(max_shift_s * 1e9 / step_ns)
    n = len(grid)
    # FFT cross-correlation: corr[k] = sum_i m[i + k] * tpl[i]
    size = 1 << int(math.ceil(math.log2(2 * n)))
    fm = np.fft.rfft(m, size)
    ft = np.fft.rfft(tpl, size)
    corr = np.fft.irfft(fm * np.conj(ft), size)
    lags = np.concatenate([np.arange(0, max_lag + 1), np.arange(-max_lag, 0)])
    vals = np.concatenate([corr[: max_lag + 1], corr[size - max_lag :]])
    best = int(lags[int(np.argmax(vals))])
    # meter[i + best] matches template[i]: the meter runs `best` steps late
    return -best * step_s


# ---------------------------------------------------------------------------------------
# Sampler
# ---------------------------------------------------------------------------------------


@dataclass
class ChannelSamples:
    device: str
    counter: bool
    aux: bool = False
    t_ns: list[int] = field(default_factory=list)
    values: list[float] = field(default_factory=list)
    gaps: list[tuple[int, int]] = field(default_factory=list)


class Sampler:
    """Polls a source on a daemon thread every `interval_s` and keeps every reading.

    Errors become gaps: the span from the first failed read to the next good one. The
    lock only guards list appends, so `snapshot()` can be taken while sampling continues
    (replay measures windows live).
    """

    def __init__(self, source: PowerSource, interval_s: float = 0.005):
        self.source = source
        self.interval_s = max(1e-4, float(interval_s))
        self.channels = [ChannelSamples(c.device, c.counter, c.aux) for c in source.channels]
        self.errors: list[str] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._gap_start: int | None = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def sample_once(self) -> None:
        t0 = time.perf_counter_ns()
        try:
            vals = self.source.read()
        except SensorError as e:
            with self._lock:
                if self._gap_start is None:
                    self._gap_start = t0
                if len(self.errors) < 20:
                    self.errors.append(str(e))
            return
        t1 = time.perf_counter_ns()
        t = (t0 + t1) // 2  # the read happened somewhere in [t0, t1]
        with self._lock:
            if self._gap_start is not None:
                for ch in self.channels:
                    ch.gaps.append((self._gap_start, t))
                self._gap_start = None
            for ch, v in zip(self.channels, vals, strict=True):
                ch.t_ns.append(t)
                ch.values.append(float(v))

    def _loop(self) -> None:
        next_t = time.perf_counter()
        while not self._stop.is_set():
            self.sample_once()
            next_t += self.interval_s
            delay = next_t - time.perf_counter()
            if delay < 0:  # fell behind (GIL, suspend): resynchronise, never burst
                next_t = time.perf_counter()
                delay = 0
            self._stop.wait(delay)

    def start(self) -> None:
        if self.running:
            return
        self._stop.clear()
        self.sample_once()
        self._thread = threading.Thread(target=self._loop, name="magneton-power", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join(timeout=5.0)
            self._thread = None
        self.sample_once()
        with self._lock:
            if self._gap_start is not None:
                end = time.perf_counter_ns()
                for ch in self.channels:
                    ch.gaps.append((self._gap_start, end))
                self._gap_start = None

    def snapshot(self) -> list[ChannelSamples]:
        with self._lock:
            return [
                ChannelSamples(
                    c.device, c.counter, c.aux, list(c.t_ns), list(c.values), list(c.gaps)
                )
                for c in self.channels
            ]


def model_op_power_w(model: ModelCoefficients, op: OpRecord) -> float:
    """Modelled average power of an op over its own window (used for traces/templates)."""
    t = op.time_s if op.time_s > 0 else (op.end_ns - op.start_ns) / 1e9
    if t <= 0:
        return model.p_static_w
    if not op.flops and not op.bytes:
        w = count_op(op)
        dyn = (w.flops * model.flop_pj(dominant_dtype(op)) + w.bytes * model.e_byte_pj) * 1e-12
    else:
        dyn = model.dynamic_j(op)
    return model.p_static_w + dyn / t
