"""NVIDIA GPUs through `pynvml` (nvidia-ml-py): the board's total-energy counter where the
GPU has one, else its power reading; visible CUDA indices mapped to physical NVML devices.

Power readings (the timeline where there is no counter, `nvml:power`, and the auxiliary
channel replay averages) are the instantaneous field `NVML_FI_DEV_POWER_INSTANT`, read
through `nvmlDeviceGetFieldValues`, wherever a GPU answers it: on Ampere (except GA100),
Hopper and newer, `nvmlDeviceGetPowerUsage` is a 1 s average, which smears a 50 ms burst
over a second and lags a load change by as much. Each GPU is probed once at start (the
field call succeeds and its `nvmlReturn` is NVML_SUCCESS); a GPU that does not answer it,
or a pynvml too old to name the field, is read through `nvmlDeviceGetPowerUsage`.
`NvmlSource.power_signal` says which, and the run stores it (`energy.power_signal`).
"""

from __future__ import annotations

import importlib
import os
import re

from magneton.model import MagnetonError
from magneton.tracer.energy.power.base import Channel, PowerSource, SensorError


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


def _power_limit_w(nvml, handles: list) -> float:
    """The highest power limit the GPUs' boards allow, summed (0 when NVML cannot say)."""
    total = 0.0
    for h in handles:
        try:
            total += nvml.nvmlDeviceGetPowerManagementLimitConstraints(h)[1] / 1000.0
        except (nvml.NVMLError, AttributeError, IndexError, TypeError):
            return 0.0
    return total


def _no_power_error(nvml, vis: int, e: Exception) -> MagnetonError:
    if getattr(e, "value", None) == getattr(nvml, "NVML_ERROR_NO_PERMISSION", -1):
        return MagnetonError(
            f"NVML denies power readings of GPU {vis} ({e}): run as a user "
            "allowed to query the GPU (e.g. root) or use --power model"
        )
    return MagnetonError(
        f"GPU {vis} reports neither energy nor power through NVML ({e}); use --power model"
    )


INSTANT_SIGNAL = "instantaneous (NVML_FI_DEV_POWER_INSTANT)"
AVERAGE_SIGNAL = "1 s average (nvmlDeviceGetPowerUsage; the GPU has no instantaneous field)"

# c_nvmlValue_t member by nvmlValueType_t (nvml.h: NVML_VALUE_TYPE_DOUBLE = 0, ...)
_VALUE_MEMBERS = ("dVal", "uiVal", "ulVal", "ullVal", "sllVal", "siVal", "usVal")


def _instant_field_id(nvml) -> int | None:
    """The instantaneous power field's id, None where this pynvml cannot read it."""
    fid = getattr(nvml, "NVML_FI_DEV_POWER_INSTANT", None)
    if fid is None or not hasattr(nvml, "nvmlDeviceGetFieldValues"):
        return None
    return int(fid)


def _field_mw(nvml, handle, field_id: int) -> float:
    """One field value of `handle` (mW for power fields); NVMLError when the GPU refuses."""
    fv = nvml.nvmlDeviceGetFieldValues(handle, [field_id])[0]
    ret = int(fv.nvmlReturn)
    if ret != getattr(nvml, "NVML_SUCCESS", 0):
        raise nvml.NVMLError(ret)
    vtype = int(getattr(fv, "valueType", 1))  # NVML_VALUE_TYPE_UNSIGNED_INT
    member = _VALUE_MEMBERS[vtype] if 0 <= vtype < len(_VALUE_MEMBERS) else "uiVal"
    return float(getattr(fv.value, member))


def _offers_instant(nvml, handle, field_id: int | None) -> bool:
    """Whether `handle` answers the instantaneous power field (probed once, at start)."""
    if field_id is None:
        return False
    try:
        _field_mw(nvml, handle, field_id)
    except (nvml.NVMLError, AttributeError, IndexError, TypeError, ValueError):
        return False
    return True


class NvmlSource(PowerSource):
    kind = "nvml"
    # NVML readings are refreshed every ~20-100 ms and can lag by hundreds of ms (Magneton
    # paper §5.2; Yang et al., SC24); the energy counter updates about every 100 ms.
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
        field_id = _instant_field_id(nvml)
        self._handles = []
        # per channel: the instantaneous field's id where that GPU answers it, None where
        # its power is read through nvmlDeviceGetPowerUsage (and for counter channels)
        self._fields: list[int | None] = []
        self.channels = []
        signals: list[tuple[str, str]] = []  # (device, signal) of each GPU read for power
        for vis, h, _uuid in gpus:
            counter = True
            try:
                nvml.nvmlDeviceGetTotalEnergyConsumption(h)
            except nvml.NVMLError:
                counter = False  # pre-Volta or vGPU: fall back to power readings
            field = field_id if _offers_instant(nvml, h, field_id) else None
            power = field is not None
            if not power:
                try:
                    nvml.nvmlDeviceGetPowerUsage(h)
                    power = True
                except nvml.NVMLError as e:
                    if not counter:  # neither energy nor power: this GPU cannot be measured
                        raise _no_power_error(nvml, vis, e) from None
            device = f"gpu:{vis}"
            self._handles.append(h)
            self._fields.append(None if counter else field)
            self.channels.append(Channel(device, counter))
            if counter and power:
                # the power reading too: replay averages fresh readings of a steady loop,
                # which needs no update timing (counter interpolation does)
                self._handles.append(h)
                self._fields.append(field)
                self.channels.append(Channel(device, False, aux=True))
            if power:
                signals.append((device, INSTANT_SIGNAL if field is not None else AVERAGE_SIGNAL))
        self.name = "nvml:" + "+".join(
            c.device.replace(":", "") for c in self.channels if not c.aux
        )
        self.max_power_w = _power_limit_w(nvml, [h for _, h, _ in gpus])
        kinds = {sig for _, sig in signals}
        if len(kinds) == 1:
            self.power_signal = kinds.pop()
        else:
            self.power_signal = ", ".join(f"{dev} {sig}" for dev, sig in signals)

    def force_power(self) -> None:
        """Use power readings only (`nvml:power`): energy by the trapezoid rule over them."""
        pairs = zip(self.channels, self._fields, strict=True)
        field_of = {c.device: f for c, f in pairs if not c.counter}
        keep = [i for i, c in enumerate(self.channels) if not c.aux]
        self._handles = [self._handles[i] for i in keep]
        self._fields = [field_of.get(self.channels[i].device) for i in keep]
        self.channels = [Channel(self.channels[i].device, False) for i in keep]

    def read(self) -> list[float]:
        nvml = self._nvml
        out = []
        try:
            for h, field, ch in zip(self._handles, self._fields, self.channels, strict=True):
                if ch.counter:
                    out.append(nvml.nvmlDeviceGetTotalEnergyConsumption(h) / 1000.0)  # mJ -> J
                else:
                    out.append(self.power_w(h, field))
        except nvml.NVMLError as e:
            raise SensorError(str(e)) from None
        return out

    def power_w(self, handle, field: int | None) -> float:
        """A GPU's power now (W): its instantaneous field where it answered the probe
        (`field`), else nvmlDeviceGetPowerUsage. Every power channel is read here."""
        if field is not None:
            return _field_mw(self._nvml, handle, field) / 1000.0  # mW -> W
        return self._nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0

    def close(self) -> None:
        try:
            self._nvml.nvmlShutdown()
        except Exception:
            pass
