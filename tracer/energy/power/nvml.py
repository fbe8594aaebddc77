"""NVIDIA GPUs through `pynvml` (nvidia-ml-py): the board's total-energy counter where the
GPU has one, else its power reading; visible CUDA indices mapped to physical NVML devices.
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
        self.max_power_w = _power_limit_w(nvml, [h for _, h, _ in gpus])

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
