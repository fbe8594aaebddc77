"""A fix moves the wasteful side toward what the efficient side did, never the other way.

Each finding's fix is planned on its own (plan.py): make this region's wasteful side do
what its efficient side does. Two findings of one diff can blame the same variable from
opposite sides: a JAX per-example loop (`BATCHED = False`) against its batched form
was 65% wasteful on the loop's side, while a small region where the batched side spent
more got "in mlp_batched.py change BATCHED from True to False", a patch that made the
efficient script 37x slower. So after diagnosis every fix is checked against the whole
diff, and one that fails is not offered (its summary says why):

* the value it sets (when it sets a value rather than porting statements) must be the
  efficient side's value of the variable it names;
* no finding with a larger saving may blame the same variable with the sides swapped:
  setting it the small finding's way would undo the large one.
"""

from __future__ import annotations

from magneton.model import Finding


def _norm(value: object) -> str:
    return " ".join(str(value).strip().strip("'\"").split())


def direction_problem(f: Finding, findings: list[Finding]) -> str:
    """Why `f`'s fix would not move its wasteful side toward the efficient side ("" when
    it would, or when it changes nothing that has a direction)."""
    fix, rc = f.fix, f.root_cause
    if fix is None or rc is None or not (fix.patch or fix.command):
        return ""
    efficient = "b" if f.wasteful == "a" else "a"
    eff = rc.values.get(efficient)
    # a value the fix sets (one short line), not code it ports (the efficient side's
    # statements, of which the variable's value is only a part)
    if fix.sets_value() and eff is not None and _norm(fix.new_text) != _norm(eff):
        return f"it would set {rc.variable} to {fix.new_text}, while the efficient side has {eff}"
    for g in findings:
        grc = g.root_cause
        if (
            g is not f
            and grc is not None
            and rc.variable
            and grc.variable == rc.variable
            and g.wasteful != f.wasteful
            and g.saving_j > f.saving_j
        ):
            return (
                f"setting {rc.variable} this region's efficient way would undo finding "
                f"#{g.id}, which saves more with the opposite setting"
            )
    return ""


def refuse_inverse_fixes(findings: list[Finding]) -> None:
    """Withdraw the patch and command line of every fix that fails `direction_problem`."""
    problems = {f.id: direction_problem(f, findings) for f in findings}
    for f in findings:
        why = problems[f.id]
        if why and f.fix is not None:
            f.fix.patch = f.fix.command = f.fix.file = None
            f.fix.summary = f"No fix offered: {why}."
