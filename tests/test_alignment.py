"""Timed units that differ from the structure unit (tracer/timing/alignment.py): a step
that logs, evaluates or saves is aligned operator by operator, its extra work is priced
apart, and a unit of another kind is refused rather than priced."""

from __future__ import annotations

import pytest

from magneton.model import OpRecord, Profile, RunInfo
from magneton.tracer.energy.session import EnergySession
from magneton.tracer.timing.alignment import (
    MIN_SHARED,
    align,
    align_units,
    price_timed_units,
)

MS = 1_000_000  # ns per millisecond
STEP = ["aten::mm", "aten::relu", "aten::mm", "aten::sum", "aten::mul_"]


def _unit(names: list[str], t0: int, each_ms: float = 1.0) -> list[tuple[str, int, int]]:
    """Back-to-back operators of `each_ms` starting at `t0` ns."""
    d = int(each_ms * MS)
    return [(n, t0 + k * d, t0 + (k + 1) * d) for k, n in enumerate(names)]


def _profile(names: list[str]) -> Profile:
    ops = [OpRecord(idx=i, name=n) for i, n in enumerate(names)]
    return Profile(run=RunInfo(name="p", time_s=0.005), ops=ops)


def test_identical_units_align_exactly():
    al = align_units(STEP, [STEP, STEP])
    assert al.exact and al.ok and al.shared_share == 1.0


def test_a_logging_step_leaves_the_common_work_paired_and_its_extra_work_apart():
    logging = ["aten::_local_scalar_dense", "aten::item"] + STEP
    ua = align(STEP, logging)
    assert ua.matched == [2, 3, 4, 5, 6]  # every structure op found, shifted by two
    assert ua.extra == [0, 1]


def test_a_structure_op_some_units_skip_has_no_window_there():
    structure = STEP + ["aten::_local_scalar_dense"]  # the structure step logged
    ua = align(structure, STEP)
    assert ua.matched[-1] is None and ua.extra == []


def test_a_unit_of_another_kind_does_not_align():
    evaluation = ["aten::addmm", "aten::softmax", "aten::argmax", "aten::mm"]
    al = align_units(STEP, [STEP, evaluation])
    assert not al.ok
    assert al.shared_share < MIN_SHARED
    assert "timed unit 2 of 2 ran only 1 of the structure unit's 5 operators" in al.why_not()


def _session() -> EnergySession:
    s = EnergySession.create("model")
    s.idle_w = s.model.p_static_w
    return s


def test_work_outside_the_step_is_priced_apart_and_not_charged_to_its_neighbours():
    """Four training steps of 5 ms; the second also evaluates (20 operators, 20 ms). The
    step's operators cost what they cost in the plain steps, the evaluation is reported
    as outside work averaged over the four units, and the run's figure is the step's."""
    evaluation = ["aten::addmm"] * 20
    units = [
        _unit(STEP, 0),
        _unit(evaluation + STEP, 100 * MS),
        _unit(STEP, 200 * MS),
        _unit(STEP, 300 * MS),
    ]
    plain, logged = _profile(STEP), _profile(STEP)
    s = _session()
    price_timed_units(plain, s, [units[0], units[2], units[3]], [])
    price_timed_units(logged, s, units, [])
    assert logged.run.status == "ok" and logged.run.timing == "separate"
    for a, b in zip(plain.ops, logged.ops, strict=True):
        assert b.energy_j == pytest.approx(a.energy_j, rel=1e-9)
    out = logged.energy.outside
    assert out is not None and out.operators == 20 and out.units == [2] and out.of_units == 4
    # 20 ms of P_static in one unit of four: 5 ms per unit on average
    assert out.energy_j == pytest.approx(s.model.p_static_w * 0.020 / 4, rel=1e-6)
    assert out.top[0][:2] == ["aten::addmm", 20]
    assert sum(op.energy_j for op in logged.ops) == pytest.approx(logged.run.energy_j)


def test_an_op_only_some_units_ran_is_priced_per_unit():
    structure = STEP + ["aten::_local_scalar_dense"]
    units = [_unit(structure, 0), _unit(STEP, 100 * MS), _unit(STEP, 200 * MS)]
    p = _profile(structure)
    price_timed_units(p, _session(), units, [])
    item = p.ops[-1]
    assert item.windows_ns[1] is None and item.windows_ns[2] is None
    # 1 ms once in three units: a third of its cost per unit
    assert item.energy_j == pytest.approx(p.ops[0].energy_j / 3, rel=0.05)


def test_units_of_another_kind_leave_the_run_unpriced_and_say_why():
    p = _profile(STEP)
    price_timed_units(p, _session(), [_unit(STEP, 0), _unit(["aten::addmm"] * 9, 100 * MS)], [])
    assert p.run.status == "incomparable" and p.run.timing == "unaligned"
    assert "not the kind of unit the structure pass recorded" in p.run.error
    assert all(op.energy_j == 0 for op in p.ops)


def test_a_run_priced_above_its_sources_limit_is_not_comparable():
    """A run whose priced windows cover more time than it took (how a BERT step was once
    priced at 985 W on a 90 W model): its average power is above the model's TDP, and it
    is flagged at record time, not stored as valid."""
    p = _profile(STEP)  # the unit took 5 ms of wall time ...
    price_timed_units(p, _session(), [_unit(STEP, 0, each_ms=200.0)] * 2, [])  # ... priced 1 s
    assert p.run.status == "incomparable"
    assert "above the 270 W model:cpu-default allows" in p.run.error


def test_a_sensor_charges_the_outside_time_to_the_outside_work():
    """With a sensor, energy is the trace over each unit (mean over units): the 20 ms of
    evaluation in unit 2 is charged to the evaluation's operators, not to the step's
    operators around it, which cost what they cost in the plain units."""
    import numpy as np

    from magneton.tracer.energy.session import Trace, attribute_traces
    from magneton.tracer.timing.alignment import merge_timed_units

    evaluated = STEP[:3] + ["aten::addmm"] * 20 + STEP[3:]  # in the middle of the step
    units = [_unit(STEP, 0), _unit(evaluated, 100 * MS), _unit(STEP, 200 * MS)]
    ops = _profile(STEP).ops
    _, outside = merge_timed_units(ops, units)
    flat = Trace(np.array([0, 400 * MS]), np.array([100.0, 100.0]))  # 100 W throughout
    att = attribute_traces(ops + outside, [flat])
    step_j = att.energy_j[: len(ops)]
    assert step_j == pytest.approx([0.1] * len(ops), rel=1e-6)  # 1 ms at 100 W
    assert att.energy_j[len(ops) :].sum() == pytest.approx(100.0 * 0.020 / 3, rel=1e-6)
