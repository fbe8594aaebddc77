"""One diff, one view: the rows every surface shows of a diff, built once from its result.

`magneton diff` (table, diagnosis lines, CSV, JSON), `diff --html` and the TUI each used
to turn a `DiffResult` into rows of their own, and they drifted apart: for one BERT
eager-vs-sdpa pair the CLI printed one cause row saving 5.2%, the HTML page two findings
with the same patch (4.29% + 0.70%, per finding) and the TUI a third pair of numbers.
`diff_view` is now the only place a result becomes rows, and the surfaces only lay them
out:

* **One row per cause.** A row is a cause group (`DiffResult.groups`, grouped once by
  the pipeline, diagnose/cause/grouping.py): its findings' ids, their summed saving,
  share, energies and interval, the lead finding's verdict and cause, and the group's
  one patch. Listing the findings of one cause one by one split its saving and showed
  the same patch twice.
* **One wording of each figure.** `share_text`, `joules` and `interval_text` are used
  by every surface, so "0.70%" on one and "0.7%" on another cannot read as two numbers.
* **Built from the result, never from a re-measurement.** The callers hand in the diff
  stored by `magneton diff` (graphdb `load_diff`) unless the user asked to measure again
  (`--rerun`); this module only reads what it is given.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from magneton.model import DiffResult, Finding, Fix
from magneton.model.names import short_name

if TYPE_CHECKING:
    from magneton.diagnose.api import CauseGroup


def share_text(share: float) -> str:
    """A share of a run's energy: one decimal from 1%, two significant digits below (a
    0.04% saving must not read "0.0%")."""
    if not math.isfinite(share):
        return "?"
    pct = 100 * share
    return f"{pct:.1f}%" if abs(pct) >= 1 or pct == 0 else f"{pct:.2g}%"


def joules(j: float) -> str:
    """Energy per call with a unit that keeps three significant digits (`1.23 J`,
    `450 mJ`, `12 µJ`)."""
    if not math.isfinite(j):
        return "? J"
    a = abs(j)
    if a >= 1 or a == 0:
        return f"{j:.3g} J"
    if a >= 1e-3:
        return f"{j * 1e3:.3g} mJ"
    return f"{j * 1e6:.3g} µJ"


def seconds(s: float) -> str:
    """A time per call with a unit (`1.2 s`, `3.4 ms`, `56 µs`)."""
    if not math.isfinite(s):
        return "? s"
    a = abs(s)
    if a >= 1 or a == 0:
        return f"{s:.3g} s"
    if a >= 1e-3:
        return f"{s * 1e3:.3g} ms"
    return f"{s * 1e6:.3g} µs"


@dataclass(frozen=True)
class SavingRange:
    """A cause's saving interval, summed over its regions (J per call)."""

    low_j: float
    high_j: float
    confidence: float

    def text(self) -> str:
        return f"{joules(self.low_j)} to {joules(self.high_j)} at {self.confidence:.0%}"


@dataclass
class CauseRow:
    """One cause of a diff, as every surface shows it (module docstring)."""

    group: CauseGroup
    cause: str  # "misconfiguration", "python" (interpreter time), "failed", "" (unknown yet)
    cause_lines: list[str] = field(default_factory=list)  # the diagnosis, one line each
    interval: SavingRange | None = None  # None unless every region has one

    @property
    def lead(self) -> Finding:
        return self.group.lead

    @property
    def findings(self) -> list[Finding]:
        return self.group.findings

    @property
    def ids(self) -> list[int]:
        return [f.id for f in self.group.findings]

    @property
    def verdict(self) -> str:
        return self.lead.verdict

    @property
    def wasteful(self) -> str:
        return self.lead.wasteful

    @property
    def saving_j(self) -> float:
        return self.group.saving_j

    @property
    def saving_share(self) -> float:
        return self.group.saving_share

    @property
    def places(self) -> int:
        return self.group.places

    def energy_j(self, side: str) -> float:
        return sum((f.region_a if side == "a" else f.region_b).energy_j for f in self.findings)

    def time_s(self, side: str) -> float:
        return sum((f.region_a if side == "a" else f.region_b).time_s for f in self.findings)

    @property
    def ratio(self) -> float:
        """Wasteful over efficient energy of the cause's regions (inf: one side is free)."""
        hi = max(self.energy_j("a"), self.energy_j("b"))
        lo = min(self.energy_j("a"), self.energy_j("b"))
        return hi / lo if lo > 0 else math.inf

    @property
    def confirmed(self) -> str:
        """Whether re-measurement confirmed the cause's regions (diagnose/matching/
        confirm.py): "yes (N rounds)", "no", or "-" when none has an interval."""
        ivs = [f.interval for f in self.findings if f.interval is not None]
        if not ivs:
            return "-"
        if all(iv.confirmed for iv in ivs):
            return f"yes ({min(iv.rounds for iv in ivs)} rounds)"
        return "no"

    @property
    def fix(self) -> Fix | None:
        """The cause's one fix: the lead's, else the first of its findings that has a
        patch (one change fixes them all: that is what makes them one group)."""
        with_patch = [f.fix for f in self.findings if f.fix is not None and f.fix.patch]
        lead = self.lead.fix
        if lead is not None and (lead.patch or not with_patch):
            return lead
        return with_patch[0] if with_patch else None

    @property
    def patch(self) -> str:
        fix = self.fix
        return fix.patch if fix is not None and fix.patch else ""

    def ids_text(self, shown: int = 3) -> str:
        """`8,12,16 +6`: the first ids (the diagnosis lines list them all)."""
        ids = [str(i) for i in self.ids]
        return (
            ",".join(ids) if len(ids) <= shown else ",".join(ids[:shown]) + f" +{len(ids) - shown}"
        )

    def share_of(self) -> str:
        """`5.2% of b`: the summed saving as a share of the wasteful run."""
        return f"{share_text(self.saving_share)} of {self.wasteful}"

    def side_text(self, side: str) -> str:
        """The lead's operators on one side, abbreviated (`abbreviate`), or the Python
        frames of interpreter time."""
        f = self.lead
        if f.kind == "interpreter":
            return place_text(f, side)
        return abbreviate(f.ops_a if side == "a" else f.ops_b, f.occurrences)

    def to_json(self) -> dict:
        """The group's JSON (`diff --json` "groups"), with its cause."""
        return {**self.group.to_json(), "cause": self.cause}


@dataclass
class DiffView:
    """A diff's rows: the causes to act on, largest saving first, then those judged noise."""

    result: DiffResult
    rows: list[CauseRow] = field(default_factory=list)

    @property
    def real(self) -> list[CauseRow]:
        return [r for r in self.rows if r.verdict != "noise"]

    @property
    def noise(self) -> list[CauseRow]:
        return [r for r in self.rows if r.verdict == "noise"]

    def row_of(self, finding_id: int) -> CauseRow | None:
        """The row holding finding `finding_id`."""
        return next((r for r in self.rows if finding_id in r.ids), None)

    def lead_of(self) -> dict[int, int]:
        """finding id -> the id of its cause's lead finding."""
        return {i: r.lead.id for r in self.rows for i in r.ids}


def diff_view(result: DiffResult, groups: list[CauseGroup] | None = None) -> DiffView:
    """The view of `result` (module docstring), from its cause groups (`groups`, or the
    ones the pipeline put on the result, grouped now for a result built by hand)."""
    from magneton.diagnose.api import cause_groups

    if groups is None or not _covers(groups, result.findings):
        if not _covers(result.groups, result.findings):
            # groups of other finding objects (a copy of the result, findings replaced
            # since): grouped again, or the rows would show findings no longer there
            result.groups = []
        groups = cause_groups(result)
    rows = [_row(g) for g in groups]
    # noise last, whatever its size, as the groups are ranked (grouping.py)
    rows.sort(key=lambda r: r.verdict == "noise")
    return DiffView(result, rows)


def _covers(groups: list[CauseGroup], findings: list[Finding]) -> bool:
    """Whether `groups` hold exactly these finding objects."""
    held = [id(f) for g in groups for f in g.findings]
    return len(held) == len(findings) and set(held) == {id(f) for f in findings}


def _row(g: CauseGroup) -> CauseRow:
    ivs = [f.interval for f in g.findings if f.interval is not None]
    interval = None
    if ivs and len(ivs) == len(g.findings):
        interval = SavingRange(
            sum(iv.saving_j_low for iv in ivs),
            sum(iv.saving_j_high for iv in ivs),
            ivs[0].confidence,
        )
    return CauseRow(g, cause_label(g.lead), cause_lines(g), interval)


def cause_label(f: Finding) -> str:
    """The cause in one word: the diagnosis category, "python" for interpreter time
    (explained at detection), "failed" when diagnosis failed, "" while unknown."""
    if f.kind == "interpreter":
        return "python"
    if f.category:
        return f.category
    rc = f.root_cause
    if rc is not None and rc.error:
        return "failed"
    return ""


def cause_lines(g: CauseGroup) -> list[str]:
    """The diagnosis of a cause, one line each: its lead's, the interpreter time that
    joined it, and how regions without a cause were grouped."""
    from magneton.diagnose.api import cause_key, describe_finding, kernel_family

    f = g.lead
    lines = describe_interpreter(f) if f.kind == "interpreter" else describe_finding(f)
    # interpreter time that joined a region's cause is still named (grouping.py)
    lines += [
        f"#{x.id} " + describe_interpreter(x)[0] for x in g.findings[1:] if x.kind == "interpreter"
    ]
    fam = kernel_family(f) if len(g.findings) > 1 and cause_key(f)[0] == "family" else ""
    if fam:
        lines.append(f"{len(g.findings)} regions without a cause, grouped by kernel family {fam}")
    tried = next((x.fix.verification for x in g.findings if x.fix and x.fix.verification), None)
    if tried is not None:  # `export-patch --verify` tried the fix (diagnose/fix/verify.py)
        lines.append(tried.line())
    return lines


def describe_interpreter(f: Finding) -> list[str]:
    """Human lines for an interpreter finding."""
    rc = f.root_cause
    lines = ["interpreter time: " + (rc.note if rc is not None and rc.note else "differs")]
    if f.fix is not None and f.fix.summary:
        lines.append("fix: " + f.fix.summary)
    return lines


def place_text(f: Finding, side: str) -> str:
    """One side of an interpreter finding: `python: a.py:12 f, …`."""
    frames = f.frames_a if side == "a" else f.frames_b
    return "python: " + (", ".join(frames) if frames else "(none)")


def abbreviate(ops: list[str], occurrences: int = 1, limit: int = 6) -> str:
    """`mul pow mul add … (+4) ×2`: one occurrence's operators, aliasing ops (view,
    transpose...) left out unless that is all there is, ×N when folded."""
    from magneton.model.vocab import FREE_OPS

    if not ops:
        return "(nothing)"
    per = len(ops) // occurrences if occurrences > 1 and len(ops) % occurrences == 0 else len(ops)
    one = ops[:per]
    shown = [o for o in one if o not in FREE_OPS] or one
    names: list[str] = []  # a run of the same operator is one name ×N
    runs: list[int] = []
    for o in shown:
        n = short_name(o.removeprefix("aten::"))
        if names and names[-1] == n:
            runs[-1] += 1
        else:
            names.append(n)
            runs.append(1)
    names = [n if k == 1 else f"{n} ×{k}" for n, k in zip(names, runs, strict=True)]
    text = " ".join(names[:limit])
    if len(names) > limit:
        text += f" … (+{len(names) - limit})"
    if occurrences > 1:
        text += f" ×{occurrences}"
    return text


def changed_lines(patch: str) -> list[str]:
    """The lines a unified diff removes and adds (`-`/`+`, file headers left out), in
    order: what a preview shows first, before the context a reader can scroll to."""
    out = []
    for line in patch.splitlines():
        if line.startswith(("--- ", "+++ ")):
            continue
        if line.startswith(("-", "+")):
            out.append(line)
    return out


def first_changed_line(patch: str) -> tuple[str, int] | None:
    """(file, line number in the new file) of the patch's first change, from its hunk
    header (`@@ -12,7 +12,7 @@`) and the context lines before it; None when unreadable."""
    file, new = "", None
    for line in patch.splitlines():
        if line.startswith("+++ "):
            file = line[4:].removeprefix("b/")
        elif line.startswith("@@"):
            try:
                new = int(line.split("+")[1].split(",")[0].split(" ")[0])
            except (IndexError, ValueError):
                return None
        elif new is not None:
            if line.startswith(("-", "+")):
                return file, new
            new += 1
    return None
