"""One finding per cause: findings that one change would fix become one group.

A config choice such as `attn_implementation="eager"` changes several regions of a run
(the mask, the scores, the softmax, in every layer); listed one by one they read as
several problems and split the saving that motivates the change. A group lists its regions
("in 4 places") with their summed saving, and groups are ranked by that sum.

The cause of a finding is its key variable and the origin it traces back to (file, line,
and the values on each side). Where that origin is the same, the divergence site does not
split the group: one argument reaches different library lines (the eager mask is built at
one line, its softmax at another) and one edit fixes both. Without a traced origin (kind
"unknown", or not diagnosed) nothing is known to be shared, so the divergence site is the
key and such findings group only with those diverging at the same place and kind. Noise
never groups with a real finding.

Interpreter time (diagnose/interpreter.py) joins the region whose operators it led to:
when most of the ops that the wasteful side's Python ran before are in one real region
finding of the same wasteful side, the Python is part of that region's implementation
(gelu_new's eight small ops each pay an interpreter round trip), and one change fixes
both. The region finding leads its group, since it carries the diagnosis and the patch.
Otherwise interpreter time is a cause of its own.

`cause_key` is the one place that decides what "the same cause" means; `magneton diff`
prints one row per group (its JSON lists the groups beside the per-region findings).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from magneton.graphdb.model import Finding


def cause_key(f: Finding) -> tuple:
    """What makes two findings one cause (see the module docstring)."""
    rc = f.root_cause
    noise = f.verdict == "noise"
    if rc is not None and rc.kind != "unknown" and rc.variable and rc.file:
        return (
            "origin",
            noise,
            rc.variable,
            rc.file,
            rc.line,
            repr(rc.values.get("a")),
            repr(rc.values.get("b")),
        )
    div = f.divergence
    site = div.site_a if div is not None else None
    if site is not None and site.file:
        return ("site", noise, site.file, site.line, f.wasteful)
    return ("finding", f.id)  # nothing known to share: a group of its own


@dataclass
class CauseGroup:
    """Findings sharing one cause, the largest saving first."""

    findings: list[Finding] = field(default_factory=list)
    saving_j: float = 0.0  # summed over the group's findings (J per call)
    saving_share: float = 0.0  # summed shares of the wasteful run

    @property
    def lead(self) -> Finding:
        return self.findings[0]

    @property
    def places(self) -> int:
        """Matched region pairs the cause shows up in (folded layers count each)."""
        return sum(f.occurrences for f in self.findings)

    def to_json(self) -> dict:
        return {
            "finding_ids": [f.id for f in self.findings],
            "places": self.places,
            "saving_j": self.saving_j,
            "saving_share": self.saving_share,
            "verdict": self.lead.verdict,
        }


def _wasteful_ops(f: Finding) -> set[int]:
    return set(f.region_a.ops if f.wasteful == "a" else f.region_b.ops)


def region_of_interpreter(f: Finding, findings: list[Finding]) -> Finding | None:
    """The real region finding whose operators most of interpreter finding `f`'s time
    led to (on its wasteful side), or None."""
    ops = _wasteful_ops(f)
    best, shared = None, 0
    for r in findings:
        if r.kind == "interpreter" or r.verdict == "noise" or r.wasteful != f.wasteful:
            continue
        n = len(ops & _wasteful_ops(r))
        if n > shared:
            best, shared = r, n
    return best if ops and 2 * shared >= len(ops) else None


def group_by_cause(findings: list[Finding]) -> list[CauseGroup]:
    """Groups of findings with one cause, ranked by summed saving (largest first)."""
    groups: dict[tuple, CauseGroup] = {}
    for f in findings:
        owner = region_of_interpreter(f, findings) if f.kind == "interpreter" else None
        g = groups.setdefault(cause_key(owner or f), CauseGroup())
        g.findings.append(f)
        g.saving_j += f.saving_j
        g.saving_share += f.saving_share
    for g in groups.values():
        # a region leads: it carries the diagnosis (interpreter time has none)
        g.findings.sort(key=lambda f: (f.kind == "interpreter", -f.saving_j, f.id))
    # noise last whatever its size, as `diff` lists findings
    return sorted(
        groups.values(), key=lambda g: (g.lead.verdict == "noise", -g.saving_j, g.lead.id)
    )
