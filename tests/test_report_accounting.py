"""Accounting that adds up: every line of `report` and `record` that relates two figures
is true by construction (render/report.py's module docstring lists the lines that were
not), and a run's printed interval covers what recording it again gives.

Each case below is one a user saw: "energy covers 57.41 ms of CPU … a call took 50.9 ms
wall (the rest: …)" with a negative rest; `python:` rows with 0 calls and joules; a
headline below the cheapest whole call; 70 flat rows of cut names for `--by module`;
`aten::linear` in `query` where `report` said `aten::addmm`; and three recordings of one
GPT-2 script 10% apart while each printed ±1.1–3.4%.
"""

from __future__ import annotations

import io
import re

import pytest
from builders import profile
from rich.console import Console

from magneton.diagnose.api import module_tree, operator_table
from magneton.model import EnergySpread, ModuleRecord, OpRecord, RunEnergy
from magneton.render.report import (
    _table,
    module_table,
    rerecord_interval,
    slowed_line,
    spread_line,
    time_line,
)


def rendered(renderable) -> str:
    console = Console(width=160, record=True, file=io.StringIO(), color_system=None)
    console.print(renderable)
    return console.export_text()


# --------------------------------------------------------------------------------------
# Time: no negative remainder
# --------------------------------------------------------------------------------------


def _timed(span_s: float, wall_s: float, clock: str = "process-cpu"):
    return profile(time_s=wall_s, energy_j=1.0, energy=RunEnergy(span_s=span_s, clock=clock))


@pytest.mark.parametrize("clock", ["process-cpu", "wall"])
def test_cpu_time_above_wall_time_is_said_without_a_negative_rest(clock: str) -> None:
    line = time_line(_timed(0.05741, 0.0509, clock))
    assert "57.41 ms" in line and "6.51 ms more than the 50.9 ms a call took" in line
    assert "the rest" not in line and not re.search(r"-\d", line)
    assert ("several threads ran at once" in line) == (clock == "process-cpu")


def test_wall_time_above_cpu_time_names_the_positive_rest() -> None:
    line = time_line(_timed(0.040, 0.050))
    assert "a call took 50 ms on the wall clock on average, 10 ms more (waiting" in line
    assert time_line(_timed(0.049, 0.050)) == ""  # within 5%: nothing to relate


# --------------------------------------------------------------------------------------
# The breakdown table: python rows, one operator name
# --------------------------------------------------------------------------------------


def _ops_with_interpreter() -> list[OpRecord]:
    return [
        OpRecord(0, "aten::addmm", api="aten::linear", module="fc", energy_j=3.0, time_s=0.003),
        OpRecord(1, "aten::addmm", api="aten::linear", module="fc", energy_j=3.0, time_s=0.003),
        OpRecord(2, "aten::relu", api="aten::relu", module="act", energy_j=1.0, time_s=0.001),
    ]


def test_python_rows_have_no_calls_and_operators_carry_the_name_query_returns() -> None:
    p = profile(
        ops=_ops_with_interpreter(),
        energy_j=7.0,
        energy=RunEnergy(interp_j=[0.5, 0.0, 0.0], model={"p_static_w": 10.0}),
    )
    text = rendered(_table(p, operator_table(p, by="op"), "op"))
    python = next(line for line in text.splitlines() if "python:" in line)
    name, calls, _, joules, per_call, *_ = re.split(r"\s{2,}", python.strip())
    # calls and J/call: "-", never "0" beside the row's joules
    assert (calls, per_call) == ("-", "-") and float(joules) > 0, python
    addmm = next(line for line in text.splitlines() if "aten::addmm" in line)
    assert "aten::addmm (as aten::linear)" in addmm  # Operator.name, and the API called
    relu = next(line for line in text.splitlines() if "aten::relu" in line)
    assert "(as" not in relu  # called as itself


# --------------------------------------------------------------------------------------
# report --by module: a tree to --depth levels
# --------------------------------------------------------------------------------------


def _layered() -> object:
    paths = [("", "Net")] + [
        (f"encoder.layer.{i}{sub}", t)
        for i in range(12)
        for sub, t in (("", "Layer"), (".attention", "Attn"), (".attention.q", "Linear"))
    ]
    modules = [ModuleRecord(k, name, t) for k, (name, t) in enumerate(paths)]
    ops = [
        OpRecord(i, "aten::addmm", module=f"encoder.layer.{i // 2}.attention.q", energy_j=1.0)
        for i in range(24)
    ]
    return profile(ops=ops, modules=modules, energy_j=24.0)


def test_by_module_is_a_folded_tree_cut_at_the_depth_asked() -> None:
    p = _layered()
    tree = module_tree(p)
    lines = [x.rstrip() for x in rendered(module_table(p, tree, 3)).splitlines() if x.strip()]
    body = [x for x in lines if x.startswith("  ") and "──" not in x and "module  " not in x]
    # the twelve layers are one folded row, indented under their parents
    assert any(re.match(r"\s+\* ×12\s+24\s", x) for x in body), body
    assert len(body) <= 6, body  # not one row per layer and module
    assert any("… 1 submodule" in x for x in body), body  # cut at depth 3, and says so
    assert not any("q ×12" in x for x in body)
    deeper = rendered(module_table(p, tree, 5))
    assert "q ×12" in deeper and "submodule" not in deeper


# --------------------------------------------------------------------------------------
# The spread: within the run, and what re-recording gives
# --------------------------------------------------------------------------------------


def _recorded(headline_j: float, mean_j: float, cv: float, lo: float, hi: float):
    p = profile(script="/w/gpt2.py", energy_j=headline_j)
    p.energy.spread = EnergySpread(
        iterations=30, mean_j=mean_j, std_j=cv * mean_j, cv=cv, min_j=lo, max_j=hi
    )
    return p


def test_the_spread_says_it_is_within_the_run_and_a_headline_below_says_by_how_much() -> None:
    line = spread_line(_recorded(377.3, 449.0, 0.014, 442.9, 455.0))
    assert "spread: ±1.4% within this run" in line
    assert "headline 377.3 J/call is 15% below the cheapest whole call" in line
    assert "re-recording under like load: expect" in line


# Three recordings of examples/scale/gpt2_12l_act/a.py beside a busy core (`python -c
# "while True: pass"`) on a 2-core box other work kept at load 5.6-9.1: headline J/call,
# mean whole call, CV, min and max whole call, as the recorder stored them.
RECORDINGS = [
    (96.88, 166.32, 0.124, 152.3, 190.1),
    (92.59, 168.91, 0.219, 128.8, 201.6),
    (159.41, 195.85, 0.059, 184.1, 207.1),
]


def test_three_recordings_printed_intervals_overlap_where_their_spreads_did_not() -> None:
    profiles = [_recorded(*r) for r in RECORDINGS]
    spans = [rerecord_interval(p) for p in profiles]
    # one value lies in every printed interval
    assert max(lo for lo, _ in spans) <= min(hi for _, hi in spans), spans
    # the headline ± twice the within-run spread, what the CV alone would give, does not
    # cover re-recording: the third recording's lies apart from the first two
    narrow = [(h * (1 - 2 * cv), h * (1 + 2 * cv)) for h, _, cv, _, _ in RECORDINGS]
    assert max(lo for lo, _ in narrow) > min(hi for _, hi in narrow)
    # and each run says why its interval reaches so far above its headline
    line = spread_line(profiles[0])
    assert "re-recording under like load: expect 72.85–207.6 J/call" in line
    assert "whole calls averaged 72% above the headline" in line


def test_operators_slower_than_a_whole_untraced_unit_are_said_to_be_the_recordings():
    """A unit's operators cannot take longer than the whole unit took untraced: when the
    timed units' operators took 25x an untraced unit, the run says the recording slowed
    the program, and how to record it (the default policy lets OpenMP workers spin)."""
    ops = [OpRecord(idx=i, name="aten::mm", time_s=0.025) for i in range(20)]
    slowed = profile(ops=ops, config={"energy.untraced_unit_s": "0.02"})
    line = slowed_line(slowed)
    assert "500 ms per unit, 25x the 20 ms a whole unit took untraced" in line
    assert "OMP_WAIT_POLICY unset" in line and "--steady" in line
    steady = profile(
        ops=ops, config={"energy.untraced_unit_s": "0.02", "env.OMP_WAIT_POLICY": "PASSIVE"}
    )
    assert "--steady" not in slowed_line(steady) and "quieter machine" in slowed_line(steady)
    # within the margin, or without an untraced unit (a script's calls): nothing to say
    assert slowed_line(profile(ops=ops, config={"energy.untraced_unit_s": "0.3"})) == ""
    assert slowed_line(profile(ops=ops)) == ""
