"""Diff two runs that carry no tensor values (imported torch.profiler traces) by name.

Value matching (diagnose/matching/match.py) needs the tensor summaries the recorder takes; a
trace from torch.profiler has none. Such runs are compared by what the trace does name:

* a *region* is every operator call with the same aten call path (the top-level
  operator's first dispatch chain, "aten::linear > aten::addmm"), together with the GPU
  activities it launched (their `launched_by=` in `scalar_args`, tracer/capture/kineto.py). Calls
  are pooled per path rather than aligned by position: the two runs may be different steps,
  batch counts or GPUs, and a position-wise alignment of thousands of calls would pair
  unrelated ones as soon as one extra call shifts the sequence;
* regions of equal path are matched; a path on one side only is a region the other side
  does not run (an empty counterpart);
* a matched pair whose energies differ by at least the threshold (of the larger side), and
  that holds at least 0.1 % of a run's energy, is a finding, ranked by energy saved; its
  kernel-level differences (energy and launches per kernel name) name what differs.

Nothing here can tell an equivalent computation from a different one, and no cause can be
traced (no values, no script to re-run), so every finding says how it was matched and
`root_cause` is `unknown` with the kernel differences as its note.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field

from magneton.model import (
    DiffResult,
    Divergence,
    Finding,
    PathElement,
    Profile,
    Region,
    RootCause,
)

NOTE = "matched by operator path and kernel names (no tensor values in these runs)"
_LAUNCHED_BY = re.compile(r"launched_by=(\d+)")
MIN_SHARE = 0.001  # regions below this share of both runs' energy are ignored


@dataclass
class PathRegion:
    """All calls of one call path in one run, with the GPU activities they launched."""

    key: str
    ops: list[int] = field(default_factory=list)
    energy_j: float = 0.0
    time_s: float = 0.0
    kernels: dict[str, list[float]] = field(default_factory=dict)  # name -> [J, launches]


@dataclass
class KernelDelta:
    name: str
    energy_a_j: float
    energy_b_j: float
    calls_a: int
    calls_b: int

    @property
    def delta_j(self) -> float:
        return self.energy_b_j - self.energy_a_j


def has_values(p: Profile) -> bool:
    """Whether value matching can work on a run (a recorded run has tensor summaries)."""
    return bool(p.tensors)


def _own_key(op) -> str:
    return op.call_paths[0] if op.call_paths else op.name


def path_regions(p: Profile) -> dict[str, PathRegion]:
    """Regions of one run keyed by call path (module docstring)."""
    regions: dict[str, PathRegion] = {}
    for op in p.ops:
        m = _LAUNCHED_BY.search(op.scalar_args) if op.device != "cpu" else None
        launcher = int(m.group(1)) if m else -1
        if 0 <= launcher < len(p.ops):
            key = _own_key(p.ops[launcher])
        elif op.device != "cpu" and op.kernels:
            key = "(no launching operator)"
        else:
            key = _own_key(op)
        r = regions.setdefault(key, PathRegion(key))
        r.ops.append(op.idx)
        r.energy_j += op.energy_j
        if op.device == "cpu" or not op.kernels:
            r.time_s += op.time_s
        if op.kernels:
            k = r.kernels.setdefault(op.name, [0.0, 0])
            k[0] += op.energy_j
            k[1] += 1
    return regions


def kernel_deltas(ka: dict[str, list[float]], kb: dict[str, list[float]]) -> list[KernelDelta]:
    """Per kernel name, energy and launches on each side, largest |difference| first."""
    out = []
    for name in dict.fromkeys([*ka, *kb]):
        ea, ca = ka.get(name, [0.0, 0])
        eb, cb = kb.get(name, [0.0, 0])
        out.append(KernelDelta(name, ea, eb, int(ca), int(cb)))
    return sorted(out, key=lambda d: -abs(d.delta_j))


def _short(name: str, limit: int = 70) -> str:
    return name if len(name) <= limit else name[: limit - 1] + "…"


def describe_deltas(deltas: list[KernelDelta], n: int = 3) -> str:
    from magneton.model.names import short_name

    parts = []
    for d in deltas[:n]:
        parts.append(
            f"{short_name(d.name)} {d.energy_a_j:.3g} J ×{d.calls_a} (a) vs "
            f"{d.energy_b_j:.3g} J ×{d.calls_b} (b)"
        )
    return "; ".join(parts)


def _host_names(p: Profile, idx: list[int]) -> list[str]:
    names = [p.ops[i].name for i in idx if p.ops[i].device == "cpu"]
    return names or [p.ops[i].name for i in idx]


def _finding(key: str, ra: PathRegion, rb: PathRegion, pa: Profile, pb: Profile) -> Finding:
    wasteful = "a" if ra.energy_j > rb.energy_j else "b"
    total = sum(op.energy_j for op in (pa if wasteful == "a" else pb).ops)
    saving = abs(ra.energy_j - rb.energy_j)
    deltas = kernel_deltas(ra.kernels, rb.kernels)
    top = deltas[0] if deltas else None
    divergence = Divergence(
        level="kernel",
        op_a=None,
        op_b=None,
        a=PathElement("kernel", name=top.name if top and top.calls_a else "(none)"),
        b=PathElement("kernel", name=top.name if top and top.calls_b else "(none)"),
        matched_by="path",
        region_path=key,
        kernels=[dict(d.__dict__) for d in deltas[:5]],
    )
    note = f"imported runs, region {_short(key, 90)}"
    if deltas:
        note += f"; largest kernel differences: {describe_deltas(deltas)}"
    # host operators name a region; its kernels are in `divergence` (a table cell of
    # thousands of kernel names says nothing)
    ops = {"a": _host_names(pa, ra.ops), "b": _host_names(pb, rb.ops)}
    return Finding(
        id=0,
        wasteful=wasteful,
        verdict="waste" if ra.ops and rb.ops else "trade-off",
        region_a=Region(ops=ra.ops, energy_j=ra.energy_j, time_s=ra.time_s),
        region_b=Region(ops=rb.ops, energy_j=rb.energy_j, time_s=rb.time_s),
        saving_j=saving,
        saving_share=saving / total if total > 0 else 0.0,
        output_rel_diff=float("inf"),  # no values: outputs cannot be compared
        ops_a=ops["a"],
        ops_b=ops["b"],
        divergence=divergence,
        root_cause=RootCause(kind="unknown", note=note),
    )


def diff_by_path(
    pa: Profile, pb: Profile, threshold: float
) -> tuple[DiffResult, list[tuple[str, Region, Region]]]:
    """Findings of two value-less runs, plus the region pairs (for `store_diff`)."""
    from .diff import summary

    ga, gb = path_regions(pa), path_regions(pb)
    ea = sum(op.energy_j for op in pa.ops)
    eb = sum(op.energy_j for op in pb.ops)
    result = DiffResult(a=summary(pa), b=summary(pb), threshold=threshold)
    regions: list[tuple[str, Region, Region]] = []
    findings = []
    for key in dict.fromkeys([*ga, *gb]):
        ra, rb = ga.get(key, PathRegion(key)), gb.get(key, PathRegion(key))
        kind = "matched" if ra.ops and rb.ops else ("empty-a" if not ra.ops else "empty-b")
        regions.append(
            (
                kind,
                Region(ops=ra.ops, energy_j=ra.energy_j, time_s=ra.time_s),
                Region(ops=rb.ops, energy_j=rb.energy_j, time_s=rb.time_s),
            )
        )
        hi = max(ra.energy_j, rb.energy_j)
        if hi <= 0 or (ra.energy_j < MIN_SHARE * ea and rb.energy_j < MIN_SHARE * eb):
            continue
        if abs(ra.energy_j - rb.energy_j) >= threshold * hi:
            findings.append(_finding(key, ra, rb, pa, pb))
    findings.sort(key=lambda f: -f.saving_j)
    for i, f in enumerate(findings, 1):
        f.id = i
    result.findings = findings
    result.matched_pairs = sum(kind == "matched" for kind, _, _ in regions)
    if not any(op.energy_j > 0 for op in pa.ops) or not any(op.energy_j > 0 for op in pb.ops):
        result.message = f"{NOTE}; a run has no per-operator energy, so nothing can be flagged"
    result.match_note = run_note(pa, pb)
    return result, regions


def run_note(pa: Profile, pb: Profile, n: int = 3) -> str:
    """The line `magneton diff` prints for path-matched runs: how they were matched and
    the largest kernel-level differences over the whole runs."""
    ka: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    kb: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    for p, acc in ((pa, ka), (pb, kb)):
        for op in p.ops:
            if op.kernels:
                acc[op.name][0] += op.energy_j
                acc[op.name][1] += 1
    deltas = kernel_deltas(ka, kb)
    text = NOTE
    if deltas:
        text += f"; largest kernel-level differences: {describe_deltas(deltas, n)}"
    return text


def finding_regions(result: DiffResult, regions: list[tuple[str, Region, Region]]) -> dict:
    """Region number → id of the finding made from it."""
    first = {(f.region_a.ops[:1] or [-1])[0]: f.id for f in result.findings if f.region_a.ops}
    first_b = {(f.region_b.ops[:1] or [-1])[0]: f.id for f in result.findings if f.region_b.ops}
    owner = {}
    for k, (_, ra, rb) in enumerate(regions):
        if ra.ops and ra.ops[0] in first:
            owner[k] = first[ra.ops[0]]
        elif rb.ops and rb.ops[0] in first_b:
            owner[k] = first_b[rb.ops[0]]
    return owner
