"""Typed run energy metadata survives the DB as `energy.*` config rows (schema unchanged)."""

from __future__ import annotations

import pytest

from magneton.graphdb import open_db
from magneton.model import EnergySpread, OpRecord, Profile, RunEnergy, RunInfo


def test_run_energy_round_trips_through_the_db(tmp_path):
    ops = [OpRecord(idx=i, name="aten::mul", energy_j=0.5) for i in range(2)]
    p = Profile(run=RunInfo(name="r", energy_j=1.0), ops=ops, config={"torch": "2.13"})
    p.energy = RunEnergy(
        note="no power sensor on this machine",
        clock="process-cpu",
        span_s=0.0123,
        charged_s=[0.004, 0.008],
        interp_j=[0.0, 0.1],
        interp_samples_j=[[0.0, 0.1], [0.0, 0.12]],
        op_samples_j=[[0.5, 0.5], [0.6, 0.4]],
        spread=EnergySpread(iterations=2, mean_j=1.0, std_j=0.0, cv=0.0, min_j=1.0, max_j=1.0),
        model={"name": "cpu-default", "p_static_w": 90.0},
        lsq=[{"powers_w": {"aten::mul": 12.0}}],
        replay=[{"op": 1, "power_w": 20.0}],
    )
    with open_db(tmp_path / "db") as db:
        db.save_profile(p)
        back = db.load_profile("r")
    assert back.energy == p.energy
    assert back.config == {"torch": "2.13"}  # energy.* rows are the typed field, not config


def test_unstable_spread_is_flagged():
    assert EnergySpread(iterations=10, cv=0.08).unstable
    assert not EnergySpread(iterations=10, cv=0.02).unstable
    assert not EnergySpread(iterations=1, cv=0.5).unstable  # one iteration says nothing


def test_a_profile_without_energy_metadata_adds_no_rows():
    assert RunEnergy().to_config() == {}
    e, rest = RunEnergy.from_config({"energy.span_s": "0.5", "energy.note": "x", "k": "v"})
    assert e.span_s == pytest.approx(0.5) and e.note == "x" and rest == {"k": "v"}
