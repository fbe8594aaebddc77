"""A run's headline energy and its printed spread never contradict each other: where the
model's headline (each operator priced on its own cheapest iteration) lies below every
whole call, the spread line says why ("11.4 J/call … min 12.15 J" read as a bug)."""

from __future__ import annotations

from builders import profile

from magneton.graphdb.model import EnergySpread, Profile
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
    assert "headline 11.4 J/call is below the cheapest whole call" in line
    assert "own cheapest iteration" in line


def test_a_headline_within_the_spread_needs_no_label():
    assert "headline" not in spread_line(_profile(12.3))
