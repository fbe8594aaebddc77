"""What every power source is: `PowerSource` (start, read channels, stop), the
`Channel`s it reads, and `SensorError`, which the sampler turns into a gap.
"""

from __future__ import annotations

from dataclasses import dataclass


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
    # The most power the measured devices can draw (their power limits), 0 when unknown:
    # a run priced above it was priced wrong (EnergySession.power_bound_error)
    max_power_w: float = 0.0
    # Which reading the power (non-counter) channels carry where a source has a choice
    # (NVML: the instantaneous field or the 1 s average), "" where it has none; the run
    # stores it as `energy.power_signal`
    power_signal: str = ""

    def read(self) -> list[float]:
        raise NotImplementedError

    def close(self) -> None:
        pass
