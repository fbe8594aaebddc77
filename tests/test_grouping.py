"""One finding per cause: findings one change would fix are one group, ranked by the
summed saving."""

from __future__ import annotations

from dataclasses import replace

from magneton.diagnose.cause.grouping import cause_key, group_by_cause
from magneton.model import Divergence, Finding, PathElement, Region, RootCause


def finding(fid, saving, rc=None, site=None, verdict="waste", occurrences=1) -> Finding:
    f = Finding(
        id=fid,
        wasteful="a",
        verdict=verdict,
        region_a=Region(ops=[fid]),
        region_b=Region(ops=[fid]),
        saving_j=saving,
        saving_share=saving / 100.0,
        output_rel_diff=0.0,
        occurrences=occurrences,
    )
    f.root_cause = rc
    if site:
        here = PathElement("frame", file=site[0], line=site[1])
        f.divergence = Divergence("python", None, None, here, here, site_a=here)
    return f


ATTN = RootCause(
    kind="api-argument",
    variable="attn_implementation",
    values={"a": "eager", "b": "sdpa"},
    file="/w/a.py",
    line=15,
)
UNKNOWN = RootCause(kind="unknown")


def test_findings_with_one_origin_are_one_group_with_summed_saving():
    mask = finding(1, 5.0, ATTN, site=("modeling_gpt2.py", 80), occurrences=2)
    softmax = finding(2, 3.0, ATTN, site=("modeling_gpt2.py", 95), occurrences=2)
    other = finding(3, 6.0, replace(ATTN, variable="activation_function", line=9))
    groups = group_by_cause([mask, softmax, other])
    assert [g.lead.id for g in groups] == [1, 3]  # 8 J beats 6 J
    attn = groups[0]
    assert [f.id for f in attn.findings] == [1, 2]
    assert attn.saving_j == 8.0 and attn.places == 4
    assert attn.saving_share == 0.08
    assert attn.to_json()["finding_ids"] == [1, 2]


def test_unknown_causes_group_only_at_the_same_divergence_site():
    a = finding(1, 2.0, UNKNOWN, site=("x.py", 3))
    b = finding(2, 1.0, UNKNOWN, site=("x.py", 3))
    c = finding(3, 1.5, UNKNOWN, site=("y.py", 7))
    d = finding(4, 1.0, None)  # not diagnosed
    e = finding(5, 1.0, None)
    groups = group_by_cause([a, b, c, d, e])
    assert [[f.id for f in g.findings] for g in groups] == [[1, 2], [3], [4], [5]]


def test_noise_never_joins_a_real_finding_and_ranks_last():
    real = finding(1, 1.0, ATTN)
    noise = finding(2, 9.0, ATTN, verdict="noise")
    groups = group_by_cause([noise, real])
    assert [g.lead.id for g in groups] == [1, 2]
    assert cause_key(real) != cause_key(noise)


def test_different_values_of_one_variable_are_different_causes():
    a = finding(1, 1.0, ATTN)
    b = finding(2, 1.0, replace(ATTN, values={"a": "eager", "b": "flash"}))
    assert len(group_by_cause([a, b])) == 2


def interpreter_finding(fid, saving, ops, wasteful="a") -> Finding:
    f = finding(fid, saving)
    f.kind, f.wasteful = "interpreter", wasteful
    f.region_a = f.region_b = Region(ops=ops)
    return f


def test_interpreter_time_joins_the_region_its_python_led_to():
    """gelu_new's small ops each pay an interpreter round trip: that Python is part of
    the region's implementation, one cause, led by the region (it has the patch)."""
    gelu = finding(2, 1.0, ATTN)
    gelu.region_a = Region(ops=[10, 11, 12, 13])
    python = interpreter_finding(1, 3.0, [10, 11, 12])
    elsewhere = interpreter_finding(3, 0.5, [40, 41, 12])  # mostly outside any region
    other_side = interpreter_finding(4, 0.4, [10, 11], wasteful="b")
    groups = group_by_cause([python, gelu, elsewhere, other_side])
    assert [[f.id for f in g.findings] for g in groups] == [[2, 1], [3], [4]]
    assert groups[0].lead is gelu and groups[0].saving_j == 4.0


def test_interpreter_time_never_joins_noise():
    noise = finding(2, 1.0, UNKNOWN, verdict="noise")
    noise.region_a = Region(ops=[10, 11])
    python = interpreter_finding(1, 3.0, [10, 11])
    groups = group_by_cause([python, noise])
    assert [[f.id for f in g.findings] for g in groups] == [[1], [2]]


def test_interpreter_time_joins_the_region_diverging_in_the_function_that_ran_it():
    """Eager attention's Python runs in `eager_attention_forward` before ops that mostly
    match unflagged regions; the attention finding's path diverges in that function."""
    attn = finding(2, 1.0, ATTN, site=("/hf/modeling_gpt2.py", 40))
    attn.divergence.a = PathElement(
        "frame", file="/hf/modeling_gpt2.py", line=58, function="eager_attention_forward"
    )
    python = interpreter_finding(1, 0.8, [50, 51, 52])
    python.frames_a = [
        "modeling_gpt2.py:69 eager_attention_forward",
        "modeling_gpt2.py:307 forward",
    ]
    elsewhere = interpreter_finding(3, 0.5, [60])
    elsewhere.frames_a = ["modeling_gpt2.py:307 forward"]
    groups = group_by_cause([python, attn, elsewhere])
    assert [[f.id for f in g.findings] for g in groups] == [[2, 1], [3]]
