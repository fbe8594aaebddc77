"""No fix goes the wrong way (diagnose/fix/direction.py): a small region that blames the
same variable from the other side gets no patch, and a fix that would set a value other
than the efficient side's is withdrawn."""

from __future__ import annotations

from fixcheck import direction_reason

from magneton.diagnose.fix.direction import refuse_inverse_fixes
from magneton.model import Finding, Fix, Region, RootCause


def _finding(
    fid: int, wasteful: str, saving_j: float, values: dict, new: str, sets: bool = True
) -> Finding:
    return Finding(
        id=fid,
        wasteful=wasteful,
        verdict="waste",
        region_a=Region(),
        region_b=Region(),
        saving_j=saving_j,
        saving_share=saving_j / 10,
        output_rel_diff=0.0,
        root_cause=RootCause(kind="global-flag", variable="BATCHED", values=values),
        fix=Fix(
            summary=f"change BATCHED to {new}",
            patch="--- a\n+++ b\n-x\n+y\n",
            old_text=values["a" if wasteful == "a" else "b"],
            new_text=new,
            sets_variable=sets,
        ),
    )


def test_a_small_region_that_blames_the_variable_from_the_other_side_gets_no_patch():
    """The JAX pair of the per-example loop (BATCHED = False, 65% wasteful) and a small
    region where the batched side spent more: its patch set BATCHED to False in the
    efficient script, 37x slower applied."""
    values = {"a": "False", "b": "True"}
    big = _finding(1, "a", 6.5, values, "True")
    small = _finding(2, "b", 0.1, values, "False")
    findings = [big, small]
    assert direction_reason(small.to_json(), [f.to_json() for f in findings])
    refuse_inverse_fixes(findings)
    assert big.fix.patch is not None
    assert small.fix.patch is None and small.fix.command is None
    assert "would undo finding #1" in small.fix.summary
    assert not any(direction_reason(f.to_json(), [g.to_json() for g in findings]) for f in findings)


def test_a_fix_that_sets_another_value_than_the_efficient_sides_is_withdrawn():
    f = _finding(1, "a", 1.0, {"a": "'eager'", "b": "'sdpa'"}, "'flash'")
    refuse_inverse_fixes([f])
    assert f.fix.patch is None
    assert "while the efficient side has 'sdpa'" in f.fix.summary
    ok = _finding(1, "a", 1.0, {"a": "'eager'", "b": "'sdpa'"}, '"sdpa"')
    refuse_inverse_fixes([ok])
    assert ok.fix.patch is not None


def test_a_port_of_the_efficient_sides_statements_is_not_taken_for_a_value():
    """ce_permuted_logits: the fix ports two statements of the efficient side; the root
    cause's value is one expression in them. That is not "another value"."""
    values = {"a": "logits.permute(0, 2, 1)", "b": "logits.reshape(-1, V)"}
    new = "scores = logits.reshape(-1, V)\nreturn F.cross_entropy(scores, y)\n"
    f = _finding(1, "a", 1.0, values, new, sets=False)
    refuse_inverse_fixes([f])
    assert f.fix.patch is not None


def test_a_one_line_statement_inserted_is_not_taken_for_a_value():
    """A memory-format case: the fix inserts the efficient side's one-line statement
    `model = model.to(memory_format=torch.channels_last)`; the variable's value
    (torch.channels_last) is an argument inside it."""
    values = {"a": "torch.contiguous_format", "b": "torch.channels_last"}
    new = "model = model.to(memory_format=torch.channels_last)"
    f = _finding(1, "a", 1.0, values, new, sets=False)
    refuse_inverse_fixes([f])
    assert f.fix.patch is not None
    assert "sets" not in f.fix.to_json()  # the JSON says what it sets only for values
