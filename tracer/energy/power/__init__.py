"""Power sources behind one interface, the side-thread sampler, and the energy model.

One module per source (`nvml.py`, `rapl.py`, `meter.py`), each a subclass of
`base.PowerSource`; the sampler in `sampler.py`; the energy model in `model.py`, torch-free
and free of any sensor code, which pricing (tracer/energy/pricing.py) builds on. This package
exports the names its users need.

Every way Magneton learns about power is a `PowerSource`:

* `NvmlSource`  - NVIDIA GPUs through `pynvml` (nvidia-ml-py). Uses the board's total-energy
  counter (`nvmlDeviceGetTotalEnergyConsumption`, mJ) where the GPU has one, else power
  readings: the instantaneous field `NVML_FI_DEV_POWER_INSTANT` where the GPU answers it,
  else `nvmlDeviceGetPowerUsage` (a 1 s average on Ampere and newer), mW; which one is
  `NvmlSource.power_signal`. Visible CUDA indices are mapped to physical NVML
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
over the operator's window (tracer/energy/session.py).
A sensor error mid-run never propagates into the workload: the sampler records the span as a
gap (`PowerSeries.gaps`) and keeps polling.

Timestamps are `time.perf_counter_ns()`, the clock the recorder uses for operator windows.
"""

from __future__ import annotations

from magneton.tracer.energy.power.base import Channel, PowerSource, SensorError
from magneton.tracer.energy.power.meter import (
    UNIX_TIME_THRESHOLD_S,
    MeterSource,
    MeterTrace,
    estimate_meter_offset,
    meter_to_perf_ns,
    parse_meter_spec,
    read_meter_csv,
)
from magneton.tracer.energy.power.model import (
    MODEL_ENV,
    MODELS,
    ModelCoefficients,
    load_model,
    model_op_power_w,
)
from magneton.tracer.energy.power.nvml import NvmlSource
from magneton.tracer.energy.power.rapl import DEFAULT_RAPL_ROOT, RAPL_ROOT_ENV, RaplSource
from magneton.tracer.energy.power.sampler import ChannelSamples, Sampler

__all__ = [
    "DEFAULT_RAPL_ROOT",
    "MODEL_ENV",
    "MODELS",
    "RAPL_ROOT_ENV",
    "UNIX_TIME_THRESHOLD_S",
    "Channel",
    "ChannelSamples",
    "MeterSource",
    "MeterTrace",
    "ModelCoefficients",
    "NvmlSource",
    "PowerSource",
    "RaplSource",
    "Sampler",
    "SensorError",
    "estimate_meter_offset",
    "load_model",
    "meter_to_perf_ns",
    "model_op_power_w",
    "parse_meter_spec",
    "read_meter_csv",
]
