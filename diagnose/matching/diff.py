"""`diff_profiles`: match two recorded runs and flag where one spends more energy (the
matching → detection half of differential energy debugging; pipeline.py composes it
with loading, diagnosis and storing).

Operators are matched and compared on their own energy; where a run kept the interpreter
time between operators apart, that time is compared per Python function
(diagnose/matching/interpreter.py) and its findings are ranked with the operators' by saving.
Left in the operators, a mask built in a Python loop made the `add` after it look 17x
costlier (a "trade-off") than `full triu add`: an operator finding for what was Python.

Outcomes that are not findings are reported in `DiffResult.message`, never as an empty
table or an exception: a diff that legitimately finds nothing comparable is an answer
about the two programs, and scripts (and the diagnosis stage) must be able to read it
from `--json` with exit code 0. Only user errors raise `MagnetonError`: a run that does
not exist or whose recording failed, an out-of-range threshold.

Messages:
- *different inputs*: both entries took tensor inputs, some on each side have no
  equivalent on the other, and nothing (or no input at all) matched. Everything
  downstream of a differing input differs, so this names the inputs to fix.
- *nothing in common*: no region pair with equivalent boundaries was found.
- *no per-operator energy*: regions were matched but a run carries no operator energy
  (recorded without attribution), so nothing can be flagged.
"""

from __future__ import annotations

from magneton.model import DiffResult, Profile, RunSummary

from .detect import DEFAULT_THRESHOLD, check_threshold, detect, run_energy_j
from .equivalence import DEFAULT_TAU
from .match import MatchResult, match_runs


def summary(p: Profile) -> RunSummary:
    return RunSummary(
        run=p.run.name,
        energy_j=run_energy_j(p),
        time_s=p.run.time_s if p.run.time_s > 0 else sum(op.time_s for op in p.ops),
        power_source=p.run.power_source,
        energy_method=p.run.energy_method,
    )


def _different_inputs(m: MatchResult, pa: Profile, pb: Profile) -> str:
    """Non-empty when the entries were evidently given different inputs: none of A's
    inputs has an equivalent among B's, or nothing matched and inputs are unmatched on
    both sides (an extra input on one side alone, e.g. an attention mask, is fine)."""
    odd_a, odd_b = m.unmatched_inputs_a, m.unmatched_inputs_b
    if not (odd_a and odd_b):
        return ""
    if m.inputs_matched and m.pairs:
        return ""

    def label(p: Profile, ts: list[int]) -> str:
        return ", ".join(p.tensors[t].name or f"tensor #{t}" for t in ts[:3])

    return (
        f"the two runs were given different inputs: {label(pa, odd_a)} of '{pa.run.name}' "
        f"and {label(pb, odd_b)} of '{pb.run.name}' have no equivalent on the other side; "
        "record both with the same inputs (same values and seed) to compare them"
    )


def unsummarised_note(pa: Profile, pb: Profile) -> str:
    """What matching could not compare: tensors a recorder kept without a value summary
    (TensorFlow's TensorLists and other variant tensors, counted in the run's config by
    tracer/frameworks/tf_program.py). They never pair, so they stay inside the regions
    around them; the note says so instead of leaving it silent."""
    parts = [
        f"{p.config['tf.unsummarised_tensors']} of '{p.run.name}'"
        for p in (pa, pb)
        if p.config.get("tf.unsummarised_tensors")
    ]
    if not parts:
        return ""
    return (
        f"tensors without a value summary (TensorLists, handles): {' and '.join(parts)}; "
        "matching cannot compare them, so they stay inside the regions around them"
    )


def diff_profiles(
    pa: Profile,
    pb: Profile,
    threshold: float = DEFAULT_THRESHOLD,
    tau: float = DEFAULT_TAU,
    keep_undecided: bool = False,
) -> tuple[DiffResult, MatchResult]:
    """Match and detect on two in-memory profiles (no DB); `keep_undecided`: also the
    candidates that interleaved re-measurement must decide (detect.py)."""
    from .interpreter import interpreter_findings, operators_only

    check_threshold(threshold)
    # operators are compared on their own energy; the Python between them is compared
    # per place (diagnose/matching/interpreter.py), so neither counts the other's difference
    oa, ob = operators_only(pa), operators_only(pb)
    m = match_runs(oa, ob, tau=tau)
    result = DiffResult(a=summary(pa), b=summary(pb), threshold=threshold)
    msg = _different_inputs(m, pa, pb)
    if msg:
        result.message = msg
        m.pairs = []
        return result, m
    result.matched_pairs = len(m.pairs)
    result.match_note = unsummarised_note(pa, pb)
    if not m.pairs:
        result.message = (
            f"nothing in common: no region of '{pa.run.name}' computes values equivalent to "
            f"a region of '{pb.run.name}' from equivalent inputs (are they the same task "
            "on the same inputs and weights?)"
        )
        return result, m
    no_energy = [p.run.name for p in (pa, pb) if not any(op.energy_j > 0 for op in p.ops)]
    if no_energy:
        result.message = (
            f"{len(m.pairs)} regions matched, but run {' and '.join(repr(n) for n in no_energy)} "
            "has no per-operator energy, so no difference can be flagged"
        )
        return result, m
    findings = detect(oa, ob, m, threshold=threshold, keep_undecided=keep_undecided)
    findings += interpreter_findings(pa, pb, m.pairs, threshold)
    findings.sort(key=lambda f: (-f.saving_j, f.kind, f.region_a.ops[:1], f.region_b.ops[:1]))
    for i, f in enumerate(findings, start=1):
        f.id = i
    result.findings = findings
    return result, m


def region_findings(result: DiffResult, m: MatchResult) -> dict[int, int]:
    """Region-pair number → id of the finding that contains it."""
    owner: dict[int, int] = {}
    for f in result.findings:
        if f.kind == "interpreter":
            continue  # its ops are where Python time led, not a matched region
        ops = set(f.region_a.ops)
        ops_b = set(f.region_b.ops)
        for k, rp in enumerate(m.pairs):
            if (rp.a.ops and rp.a.ops[0] in ops) or (rp.b.ops and rp.b.ops[0] in ops_b):
                owner.setdefault(k, f.id)
    return owner
