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
never groups with a real finding. Findings with neither a traced origin nor a Python
site (imported traces, matched by operator path) group by the *family* of the kernel
where they diverge (`vectorized_elementwise_kernel`, `Memcpy DtoD`; model/names.py)
and the side that spends more: a diff of two real GPU traces listed 45 such findings one
by one, 20 of them some `elementwise_kernel`, which one row says as well.

Interpreter time (diagnose/matching/interpreter.py) joins a real region finding of the same
wasteful side when its Python is part of that region's implementation: most of the ops
it led to are in the region (gelu_new's eight small ops each pay an interpreter round
trip), or it ran mostly in the function where the region's call path diverges (eager
attention's Python in `eager_attention_forward`, which a changed `attn_implementation`
replaces). One change fixes both. The region finding leads its group, since it carries
the diagnosis and the patch. Otherwise interpreter time is a cause of its own.

`cause_key` is the one place that decides what "the same cause" means; `magneton diff`
prints one row per group (its JSON lists the groups beside the per-region findings).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from magneton.model import Finding
from magneton.model.names import family


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
    fam = kernel_family(f)
    if fam and f.kind != "interpreter":
        return ("family", noise, fam, f.wasteful)
    return ("finding", f.id)  # nothing known to share: a group of its own


def kernel_family(f: Finding) -> str:
    """The family (model/names.py) of the kernel where a finding without a cause
    diverges, on the side that spends more (else the other); "" when none is named."""
    div = f.divergence
    if div is None or div.level != "kernel":
        return ""
    first, second = (div.a, div.b) if f.wasteful == "a" else (div.b, div.a)
    for el in (first, second):
        if el.kind == "kernel" and el.name and el.name != "(none)":
            return family(el.name)
    return ""


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


def _diverging_function(r: Finding) -> tuple[str, str] | None:
    """(file basename, function) where a region's wasteful side leaves the other's path."""
    div = r.divergence
    el = None if div is None else (div.a if r.wasteful == "a" else div.b)
    if el is None or el.kind != "frame" or not el.function:
        return None
    return (os.path.basename(el.file or ""), el.function)


def _lead_function(f: Finding) -> tuple[str, str] | None:
    """(file basename, function) of the frame that ran most of `f`'s wasteful Python."""
    frames = f.frames_a if f.wasteful == "a" else f.frames_b
    if not frames or " " not in frames[0]:
        return None
    where, function = frames[0].split(" ", 1)
    return (where.rsplit(":", 1)[0], function)


def region_of_interpreter(f: Finding, findings: list[Finding]) -> Finding | None:
    """The real region finding (same wasteful side) that interpreter finding `f`'s Python
    belongs to: the one holding most of the ops it led to, else one whose call path
    diverges in the function that ran most of it; None when neither."""
    regions = [
        r
        for r in findings
        if r.kind != "interpreter" and r.verdict != "noise" and r.wasteful == f.wasteful
    ]
    ops = _wasteful_ops(f)
    best, shared = None, 0
    for r in regions:
        n = len(ops & _wasteful_ops(r))
        if n > shared:
            best, shared = r, n
    if ops and 2 * shared >= len(ops):
        return best
    lead = _lead_function(f)
    return next((r for r in regions if lead and _diverging_function(r) == lead), None)


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
