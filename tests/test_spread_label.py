"""A run's headline energy and its printed spread never contradict each other: where the
model's headline (each operator priced on its own cheapest iteration) lies below every
whole call, the spread line says why ("11.4 J/call … min 12.15 J" read as a bug)."""

from __future__ import annotations

from builders import profile

from magneton.model import EnergySpread, Profile
from magneton.render.report import spread_line


def _profile(headline_j: float) -> Profile:
    p = profile(script="/w/r.py", energy_j=headline_j)
    p.energy.spread = EnergySpread(
        iterations=30, mean_j=12.4, std_j=0.15, cv=0.012, min_j=12.15, max_j=12.72
    )
    return p


def test_a_headline_below_the_cheapest_call_is_explained():
    line = spread_line(_profile(11.4))
    assert "min 12.15 J" in line
    assert "headline 11.4 J/call is 6% below the cheapest whole call" in line
    assert "own cheapest iteration" in line


def test_a_headline_within_the_spread_needs_no_label():
    assert "headline" not in spread_line(_profile(12.3))


def test_an_unstable_sensor_run_is_not_blamed_on_cpu_contention():
    """On an H200 measured by NVML, 2.7 ms calls varied ±214% between iterations on an
    idle machine: few 5 ms power samples per call, clocks ramping. The advice said
    "another process competing for the CPU"; for a sampled sensor it names the sensor."""
    p = _profile(12.3)
    p.energy.spread = EnergySpread(
        iterations=30, mean_j=0.12, std_j=0.26, cv=2.14, min_j=0.05, max_j=1.49
    )
    p.run.power_source = "nvml:gpu0"
    line = spread_line(p)
    assert "unstable" in line and "nvml:gpu0 samples power" in line
    assert "competing for the CPU" not in line
    p.run.power_source = "model:cpu-default"
    assert "competing for the CPU" in spread_line(p)
