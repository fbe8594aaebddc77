"""Timed units aligned with the structure unit, operator by operator.

The structure pass records one unit of the workload (a call of `main()`, a training step
of a program) with its dataflow; the timing pass times further units with a light capture
that keeps each operator's name and window only. Energy is charged to the structure
unit's operators from the timed units' windows, so the two must be paired operator by
operator.

Real programs do not repeat themselves exactly: a training loop reads `loss.item()` to
log every few steps, evaluates every N steps, saves a checkpoint, steps the optimizer
every few micro-batches. Requiring every timed unit to dispatch exactly the structure
unit's operators made such a program fall back to pricing the structure pass's own
windows, inflated by the capture: an argparse BERT loop that logged every 5 steps was
priced at 685 J per 0.7 s step (985 W on a 90 W model) without a word. So:

* Each timed unit is aligned with the structure unit by operator name (difflib's longest
  matching blocks, after the common prefix and suffix are taken off: a unit of 4,900
  operators aligns in milliseconds). A structure operator gets the window of its
  counterpart in every unit that ran it, and no window in a unit that did not.
* The operators of a unit that match none of the structure unit's are that unit's work
  **outside the step's common work** (the evaluation, the logging, the checkpoint). They
  keep their own windows, so attribution charges their time to them and not to the
  neighbouring operators, and they are reported apart (`OutsideWork`), never folded into
  the step's graph.
* A unit that shares less than half of the structure unit's operators is not the same
  kind of unit (`MIN_SHARED`): the alignment fails and the caller says so instead of
  pricing anything from it.
"""

from __future__ import annotations

import difflib
import heapq
from collections import Counter
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any

from magneton.model import OpRecord, OutsideWork, Profile

# A timed unit must share at least this share of the structure unit's operators to be
# the same kind of unit (a training step vs an evaluation-only step).
MIN_SHARED = 0.5

Window = tuple[int, int] | None


@dataclass
class UnitAlignment:
    """One timed unit against the structure unit."""

    matched: list[int | None]  # per structure op: its event index in the unit, or None
    extra: list[int]  # event indices of the unit that match no structure op

    @property
    def shared(self) -> int:
        return sum(m is not None for m in self.matched)


@dataclass
class Alignment:
    """Every timed unit against the structure unit (`align_units`)."""

    structure_ops: int
    units: list[UnitAlignment] = field(default_factory=list)

    @property
    def exact(self) -> bool:
        """Every unit ran exactly the structure unit's operators."""
        return all(u.shared == self.structure_ops and not u.extra for u in self.units)

    @property
    def shared_share(self) -> float:
        """The smallest share of the structure unit's operators any unit ran."""
        if not self.units or not self.structure_ops:
            return 0.0
        return min(u.shared for u in self.units) / self.structure_ops

    @property
    def ok(self) -> bool:
        return bool(self.units) and self.shared_share >= MIN_SHARED

    def why_not(self) -> str:
        """Why the alignment failed, in words ("" when it did not)."""
        if self.ok:
            return ""
        if not self.units:
            return "no timed unit ran"
        worst = min(range(len(self.units)), key=lambda k: self.units[k].shared)
        return (
            f"timed unit {worst + 1} of {len(self.units)} ran only "
            f"{self.units[worst].shared} of the structure unit's {self.structure_ops} "
            "operators: the timed units are not the kind of unit the structure pass recorded"
        )


def align(structure: list[str], unit: list[str]) -> UnitAlignment:
    """Pair the operators of one unit (`unit`, names in dispatch order) with the
    structure unit's (`structure`)."""
    matched: list[int | None] = [None] * len(structure)
    if structure == unit:
        return UnitAlignment(list(range(len(unit))), [])
    # the common prefix and suffix first: the differences of a training step sit at its
    # start (what ran after the previous optimizer step: logging, evaluation, saving)
    n, m = len(structure), len(unit)
    pre = 0
    while pre < min(n, m) and structure[pre] == unit[pre]:
        matched[pre] = pre
        pre += 1
    suf = 0
    while suf < min(n, m) - pre and structure[n - 1 - suf] == unit[m - 1 - suf]:
        matched[n - 1 - suf] = m - 1 - suf
        suf += 1
    a, b = structure[pre : n - suf], unit[pre : m - suf]
    sm = difflib.SequenceMatcher(None, a, b, autojunk=False)
    for i, j, size in sm.get_matching_blocks():
        for k in range(size):
            matched[pre + i + k] = pre + j + k
    used = {j for j in matched if j is not None}
    return UnitAlignment(matched, [j for j in range(m) if j not in used])


def align_units(structure: list[str], units: list[list[str]]) -> Alignment:
    return Alignment(len(structure), [align(structure, u) for u in units])


def apply_windows(
    ops: list[OpRecord], units: list[list[tuple[str, int, int]]], al: Alignment
) -> list[OpRecord]:
    """Give each structure op its window in every timed unit that ran it (None where the
    unit did not), and return the units' other operators as `OpRecord`s of their own
    (indices after the structure's; a window only in the unit that ran them): the work
    outside the step's common work, which attribution must see so that its time is not
    charged to its neighbours."""
    for i, op in enumerate(ops):
        wins: list[Window] = []
        for ev, ua in zip(units, al.units, strict=True):
            j = ua.matched[i]
            wins.append(None if j is None else (ev[j][1], ev[j][2]))
        op.windows_ns = wins  # type: ignore[assignment]
        present = [w for w in wins if w is not None]
        if present:
            op.start_ns, op.end_ns = present[0]
        # per unit, counting the units that did not run it as zero
        op.time_s = sum(e - s for s, e in present) / max(1, len(wins)) / 1e9
    extras: list[OpRecord] = []
    for k, (ev, ua) in enumerate(zip(units, al.units, strict=True)):
        for j in ua.extra:
            name, s, e = ev[j]
            wins = [None] * len(units)
            wins[k] = (s, e)
            extras.append(
                OpRecord(
                    idx=len(ops) + len(extras),
                    name=name,
                    start_ns=s,
                    end_ns=e,
                    windows_ns=wins,  # type: ignore[arg-type]
                    time_s=(e - s) / len(units) / 1e9,
                )
            )
    return extras


def outside_summary(
    extras: list[OpRecord], energies_j: list[float], al: Alignment, top: int = 5
) -> OutsideWork:
    """What the units ran outside the step's common work, per unit (energy and time
    averaged over every timed unit), as stored with the run (`RunEnergy.outside`)."""
    units = [k + 1 for k, u in enumerate(al.units) if u.extra]
    by_name: Counter[str] = Counter()
    joules: dict[str, float] = {}  # a Counter in all but its (int) value type
    for op, e in zip(extras, energies_j, strict=True):
        by_name[op.name] += 1
        joules[op.name] = joules.get(op.name, 0) + e
    return OutsideWork(
        energy_j=float(sum(energies_j)),
        time_s=float(sum(op.time_s for op in extras)),
        operators=len(extras),
        units=units,
        of_units=len(al.units),
        top=[
            [n, by_name[n], float(joules[n])]
            for n, _ in heapq.nlargest(top, joules.items(), key=itemgetter(1))  # most_common
        ],
    )


def merge_timed_units(
    ops: list[OpRecord], units: list[list[tuple[str, int, int]]]
) -> tuple[Alignment, list[OpRecord]]:
    """Align the timed units (`(name, start_ns, end_ns)` per operator) with the structure
    unit's `ops` and, when they align, give the ops their windows (`apply_windows`).
    Returns the alignment and the operators outside the step's common work."""
    al = align_units([op.name for op in ops], [[e[0] for e in u] for u in units])
    if not al.ok:
        return al, []
    return al, apply_windows(ops, units, al)


SPIN_KEY = "energy.busy_between_ops"  # the run's config row of `busy_between_ops`


def busy_between_ops(
    units: list[list[tuple[str, int, int]]], cpu_windows: list[list[tuple[int, int]]]
) -> float | None:
    """The share of the timed units' CPU time that other threads of the process used
    while the recorded thread ran Python between two operators: between operators only
    that thread has work, so the process CPU clock advancing faster than the wall clock
    there is other threads burning CPU, and with OpenMP's default wait policy that is
    its workers spinning at a barrier after each parallel region (the omp-busy-wait
    rule). A wall gap stretched by preemption only lowers it. None without CPU windows."""
    extra = total = 0
    for events, cpu in zip(units, cpu_windows, strict=False):
        if len(events) != len(cpu) or len(events) < 2:
            continue
        for i in range(1, len(events)):
            wall_gap = events[i][1] - events[i - 1][2]
            cpu_gap = cpu[i][0] - cpu[i - 1][1]
            extra += max(0, cpu_gap - wall_gap)
        total += cpu[-1][1] - cpu[0][0]
    return extra / total if total > 0 else None


def price_timed_units(
    profile: Profile, session: Any, units: list[list[tuple[str, int, int]]], cpu_windows: list
) -> None:
    """Align the timed units with the structure unit (tracer/timing/alignment.py) and
    price the run from them; a run whose units do not align is kept unpriced, marked
    "incomparable" with the reason (never priced from the structure pass's windows).
    The process-CPU windows (`cpu_windows`, emptied otherwise) price the ops only when
    every unit ran exactly the structure unit's operators."""
    info = profile.run
    spin = busy_between_ops(units, cpu_windows)
    if spin is not None:
        profile.config[SPIN_KEY] = f"{spin:.3f}"
    al, outside = merge_timed_units(profile.ops, units)
    if not al.exact:
        cpu_windows.clear()
    if not al.ok:
        info.timing, info.status = "unaligned", "incomparable"
        info.error = f"{al.why_not()}; not priced"
        return
    info.timing = "separate"
    outside_j = session.attribute(profile, outside=outside)
    if outside:
        profile.energy.outside = outside_summary(outside, outside_j, al)
    info.status = "ok"
    bound = session.power_bound_error(profile, sum(outside_j))
    if bound:
        info.status, info.error = "incomparable", bound


UNTRACED_KEY = "energy.untraced_unit_s"  # the run's config row: an untraced unit's wall time


def note_slowed_units(profile: Profile, plain_walls: list[float]) -> None:
    """Keep, in the run's config, the wall time of the fastest untraced unit (a WAIT or
    WARMUP unit the program ran whole), the bound the timed units' operators must keep:
    a recording that stretches every operator's window alike passes the alignment and
    the power bound, and only the untraced unit shows it (render/report.py
    `slowed_line` says it)."""
    if not plain_walls or not profile.ops:
        return
    profile.config[UNTRACED_KEY] = f"{min(plain_walls):.6g}"
