"""Interpreter time between operators, compared place by place (diagnose/matching/interpreter.py),
on hand-built profiles: which places meet across two programs, and when a difference is
a finding."""

from __future__ import annotations

import numpy as np
import pytest

from magneton.diagnose.cause.grouping import group_by_cause
from magneton.diagnose.matching.interpreter import (
    ROOT_KEY,
    SCRIPT_FILE,
    interpreter_findings,
    operators_only,
    places,
)
from magneton.graphdb.matches import finding_from_record, finding_record
from magneton.model import FrameRecord, OpRecord, Profile, RunEnergy, RunInfo

P_STATIC_W = 10.0
LIB = "/env/lib/python3.11/site-packages/transformers/masking_utils.py"


def profile(
    name: str,
    script: str,
    stacks: list[list[tuple[str, int, str]]],
    interp_s: list[float],
    *,
    iterations: int = 12,
    noise: float = 0.0,
    seed: int = 0,
) -> Profile:
    """One op per stack (entry first), `interp_s[i]` interpreter seconds before op i, each
    op 1 ms of its own; `iterations` timed iterations with log-normal `noise`."""
    rng = np.random.default_rng(seed)
    frames: list[FrameRecord] = []
    index: dict[tuple[str, int, str], int] = {}
    ops = []
    for i, stack in enumerate(stacks):
        ids = []
        for fr in stack:
            if fr not in index:
                index[fr] = len(frames)
                frames.append(FrameRecord(len(frames), *fr))
            ids.append(index[fr])
        own_j = P_STATIC_W * 1e-3
        e = P_STATIC_W * interp_s[i]
        ops.append(OpRecord(idx=i, name="aten::add", frames=ids, energy_j=own_j + e))
    interp = np.array([P_STATIC_W * s for s in interp_s])
    factor = np.exp(rng.normal(0.0, noise, size=(iterations, len(ops))))
    interp_samples = interp * factor
    own_samples = P_STATIC_W * 1e-3 * np.exp(rng.normal(0.0, noise, size=(iterations, len(ops))))
    energy = RunEnergy(
        clock="process-cpu",
        interp_j=list(interp),
        interp_samples_j=interp_samples.tolist(),
        op_samples_j=(own_samples + interp_samples).tolist(),
        model={"p_static_w": P_STATIC_W},
    )
    run = RunInfo(name=name, script=script, energy_j=sum(op.energy_j for op in ops))
    return Profile(run=run, ops=ops, frames=frames, energy=energy)


def script_stack(script: str, *inner: tuple[int, str]) -> list[tuple[str, int, str]]:
    return [(script, 20, "main"), *[(script, line, fn) for line, fn in inner]]


def test_copies_of_a_script_meet_by_function_not_by_file_name_or_line():
    a = profile("a", "/w/a.py", [script_stack("/w/a.py", (12, "build_mask"))], [1e-3])
    b = profile("b", "/w/b.py", [script_stack("/w/b.py", (14, "build_mask"))], [1e-3])
    pa, pb = places(a, b), places(b, a)
    assert set(pa) == set(pb) == {(SCRIPT_FILE, "build_mask")}
    assert pa[(SCRIPT_FILE, "build_mask")].frames == {"a.py:12 build_mask": pytest.approx(0.01)}


def test_a_function_only_one_side_has_meets_its_counterpart_in_the_caller():
    """a loops in `mask_loop`, b calls `mask_vectorized`: neither exists on the other
    side, so both hand their time to `main`, which both have."""
    a = profile("a", "/w/a.py", [script_stack("/w/a.py", (12, "mask_loop"))], [2e-3])
    b = profile("b", "/w/b.py", [script_stack("/w/b.py", (12, "mask_vectorized"))], [1e-4])
    pa, pb = places(a, b), places(b, a)
    assert set(pa) == set(pb) == {(SCRIPT_FILE, "main")}
    # the finding still names the function that ran, on each side
    assert list(pa[(SCRIPT_FILE, "main")].frames) == ["a.py:12 mask_loop"]
    assert list(pb[(SCRIPT_FILE, "main")].frames) == ["b.py:12 mask_vectorized"]


def test_library_functions_meet_by_basename_and_differing_ones_climb():
    """The same library function in two environments meets by basename; a library
    function one version lacks climbs to the user's frame that called it."""
    a = profile(
        "a",
        "/w/a.py",
        [
            [("/w/a.py", 20, "main"), (LIB, 100, "causal_mask")],
            [("/w/a.py", 21, "main"), (LIB, 200, "_legacy_mask")],
        ],
        [1e-3, 1e-3],
    )
    b = profile(
        "b",
        "/w/b.py",
        [
            [
                ("/w/b.py", 20, "main"),
                ("/other/env/transformers/masking_utils.py", 90, "causal_mask"),
            ]
        ],
        [1e-3],
    )
    assert set(places(a, b)) == {("masking_utils.py", "causal_mask"), (SCRIPT_FILE, "main")}
    # a stack sharing no frame at all with the other side goes to the entry
    c = profile("c", "/w/c.py", [[("/x/y.py", 1, "f")]], [1e-3])
    assert set(places(c, b)) == {ROOT_KEY}


def _pair(ratio: float, noise: float, seed: int) -> tuple[Profile, Profile]:
    stacks = [script_stack("/w/a.py", (12, "mask")), script_stack("/w/a.py", (30, "head"))]
    stacks_b = [[(f.replace("a.py", "b.py"), ln, fn) for f, ln, fn in s] for s in stacks]
    a = profile("a", "/w/a.py", stacks, [2e-3 * ratio, 1e-3], noise=noise, seed=seed)
    b = profile("b", "/w/b.py", stacks_b, [2e-3, 1e-3], noise=noise, seed=seed + 1000)
    return a, b


@pytest.mark.parametrize("seed", range(5))
def test_a_true_difference_is_found_and_names_the_frames(seed):
    # 2.5x: the same Python differed by up to 1.76x between two recordings of unchanged
    # code (interpreter.py INTERP_PRIOR_LOG_SD), so a smaller difference between two
    # recordings is left to the interleaved rounds
    a, b = _pair(ratio=2.5, noise=0.10, seed=seed)
    found = interpreter_findings(a, b, [], threshold=0.10)
    assert len(found) == 1, [(f.frames_a, f.interval) for f in found]
    f = found[0]
    assert f.kind == "interpreter" and f.wasteful == "a" and f.verdict == "waste"
    assert f.frames_a == ["a.py:12 mask"] and f.frames_b == ["b.py:12 mask"]
    assert f.saving_j == pytest.approx(P_STATIC_W * 2e-3 * (2.5 - 1.0), rel=1e-6)
    assert f.interval is not None and f.interval.saving_j_low > 0
    assert f.root_cause is not None and "a.py:12 mask" in f.root_cause.note
    assert f.fix is not None and f.fix.patch is None and "none mechanical" in f.fix.summary


def test_python_in_a_library_names_the_scripts_lines_that_reach_it():
    """The slow path of a library (torch's MHA composite) runs more Python on one side:
    the advice names the script's lines that call into it, never "make the Python at
    functional.py do less", which would mean editing the library."""

    def lib_stack(script: str) -> list[tuple[str, int, str]]:
        return [(script, 20, "main"), (script, 28, "block"), (LIB, 90, "causal_mask")]

    a = profile("a", "/w/a.py", [lib_stack("/w/a.py")], [2.5e-3], noise=0.05, seed=1)
    b = profile("b", "/w/b.py", [lib_stack("/w/b.py")], [1e-3], noise=0.05, seed=2)
    found = interpreter_findings(a, b, [], threshold=0.10)
    assert len(found) == 1 and found[0].fix is not None
    text = found[0].fix.summary
    assert "runs in library code (masking_utils.py:90 causal_mask)" in text, text
    assert "reached from a.py:28 block in 'a' and from b.py:28 block in 'b'" in text, text
    assert "make the Python" not in text


@pytest.mark.parametrize("seed", range(5))
def test_no_difference_with_noise_is_no_finding(seed):
    a, b = _pair(ratio=1.0, noise=0.10, seed=seed)
    assert interpreter_findings(a, b, [], threshold=0.10) == []


def test_a_small_place_is_not_judged_by_a_large_place_that_agreed():
    """The A/A case a fresh-clone CI run hit: the loop (70% of the run) agreed between
    the recordings, while 0.2 ms of Python in `main` read 1.58x. The loop's agreement
    must not shrink the small place's noise below the prior."""
    stacks = [script_stack("/w/a.py", (12, "loop")), script_stack("/w/a.py", (30, "head"))]
    stacks_b = [[(f.replace("a.py", "b.py"), ln, fn) for f, ln, fn in s] for s in stacks]
    a = profile("a", "/w/a.py", stacks, [20e-3, 0.2e-3 * 1.58], iterations=20, noise=0.05)
    b = profile("b", "/w/b.py", stacks_b, [20e-3, 0.2e-3], iterations=20, noise=0.05, seed=9)
    assert interpreter_findings(a, b, [], threshold=0.10) == []


def test_a_difference_the_noise_explains_is_no_finding():
    """12% apart but with 40% noise per iteration: the point rule alone would flag it."""
    a, b = _pair(ratio=1.12, noise=0.40, seed=3)
    assert interpreter_findings(a, b, [], threshold=0.10) == []


def test_tiny_places_are_ignored():
    a = profile("a", "/w/a.py", [script_stack("/w/a.py", (12, "f"))] * 2, [1e-7, 0.0])
    b = profile("b", "/w/b.py", [script_stack("/w/b.py", (12, "f"))] * 2, [1e-9, 0.0])
    a.ops[1].energy_j = b.ops[1].energy_j = 100.0  # the run is large: both under 0.1%
    a.run.energy_j = b.run.energy_j = 100.0
    assert interpreter_findings(a, b, [], threshold=0.10) == []


def test_operators_are_compared_without_the_interpreter_share():
    a, _ = _pair(ratio=3.0, noise=0.0, seed=0)
    o = operators_only(a)
    assert [op.energy_j for op in o.ops] == pytest.approx([P_STATIC_W * 1e-3] * 2)
    assert np.asarray(o.energy.op_samples_j) == pytest.approx(P_STATIC_W * 1e-3)
    assert a.ops[0].energy_j == pytest.approx(P_STATIC_W * 7e-3)  # the original is intact
    # a run whose attribution kept nothing apart is compared as it is
    a.energy.interp_j = []
    assert operators_only(a) is a


def test_an_interpreter_finding_survives_storage_and_groups_alone():
    a, b = _pair(ratio=2.0, noise=0.05, seed=1)
    (f,) = interpreter_findings(a, b, [], threshold=0.10)
    f.id = 1
    back = finding_from_record(finding_record(f))
    assert back.kind == "interpreter" and back.frames_a == f.frames_a
    assert back.root_cause is not None and back.root_cause.note == f.root_cause.note
    j = f.to_json()
    assert j["kind"] == "interpreter" and j["frames"] == {
        "a": ["a.py:12 mask"],
        "b": ["b.py:12 mask"],
    }
    (g,) = group_by_cause([f])
    assert g.findings == [f]


@pytest.mark.parametrize("seed", range(3))
def test_a_drift_every_place_shares_is_no_finding(seed):
    """The same script recorded twice on a loaded machine: its Python ran 35% slower at
    every place of one recording, each recording's own iterations steady (2%). The
    other places' drift is the noise a place is judged against, so none is a finding
    (judged on the operators' calibration alone, both were)."""
    a, b = _pair(ratio=1.0, noise=0.02, seed=seed)
    for op in a.ops:  # every place of `a` 35% slower
        op.energy_j += 0.35 * (op.energy_j - P_STATIC_W * 1e-3)
    a.energy.interp_j = [1.35 * e for e in a.energy.interp_j]
    a.energy.interp_samples_j = [[1.35 * e for e in row] for row in a.energy.interp_samples_j]
    a.run.energy_j = sum(op.energy_j for op in a.ops)
    assert interpreter_findings(a, b, [], threshold=0.10) == []


def test_without_samples_the_drift_between_recordings_still_bounds_a_place():
    """Neither side kept per-iteration samples: a 1.4× place with the other place 1.3×
    apart is no finding, a 3× place with the other unchanged is one, with an interval."""
    a, b = _pair(ratio=1.4, noise=0.0, seed=0)
    for p in (a, b):
        p.energy.interp_samples_j = []
        p.energy.op_samples_j = []
    a.energy.interp_j[1] *= 1.3
    assert interpreter_findings(a, b, [], threshold=0.10) == []
    a, b = _pair(ratio=3.0, noise=0.0, seed=0)
    for p in (a, b):
        p.energy.interp_samples_j = []
        p.energy.op_samples_j = []
    found = interpreter_findings(a, b, [], threshold=0.10)
    assert len(found) == 1 and found[0].interval is not None
    assert found[0].interval.iterations_a == 0 and found[0].interval.saving_j_low > 0
