"""Interpreter time as findings of its own: the Python that runs between aten operators.

Where a run's attribution kept interpreter time apart (`RunEnergy.interp_j`: the process
CPU time between one operator's end and the next one's start, priced by the energy
model; tracer/energy/session.py), that energy belongs to the Python that ran, not to the
operator it led to. `report` shows it as python rows; `diff` compares it place by place
here, so "eager attention builds its mask in Python" is a finding of its own instead of
inflating the `embedding` that follows the mask.

Choices, and the failure each prevents:

* **A place is a Python function**, the innermost recorded frame of the op the
  interpreter time led to (the frame `report`'s python row names), keyed by file
  basename and function name. Never by line: a copy of a script with one line added
  shifts every line after it. Each run's own script counts as `<script>`, so `a.py` and
  `b.py` that differ in one line still meet in `main`.
* **Climb until shared.** A function that occurs nowhere on the other side (a Python
  loop in `build_mask_loop` against `build_mask_vectorized`) hands its time to the
  nearest enclosing frame that does occur there (`main`). Compared to zero instead, any
  renamed or rewritten function would read as two findings, +100% on one side and
  -100% on the other, and neither names the pair that differs.
* **Same statistical rule as operator regions** (diagnose/matching/detect.py): the point rule
  (|E_a - E_b| at least the threshold of the larger side), the tiny-share floor (both
  sides under 0.1% of their run), and where the runs kept per-iteration interpreter
  energies (`interp_samples_j`), Welch's t on their logs with the between-recordings
  noise that identical operator work showed, the one-sided 95% lower bound reaching the
  threshold. Interpreter time is noisier than operator time (GC, allocator, dict
  resizes); a rule of its own would be a second, untested notion of "significant".
* **A place's samples are centred on its level geometrically.** They give the noise and
  the point estimate the level, so they are rescaled to it; since the test compares mean
  logs, their geometric mean is what is set to the level, not their arithmetic mean
  (what operators' samples use). Interpreter time is heavy-tailed: most iterations of
  `main` spent a few microseconds of Python, one in ten the hundreds of a collection
  or of freeing a list of lists. Scaled by the mean, those rare iterations pushed the
  typical ones down to 0.2 of the level on one side and not the other, and the test's
  ratio (8.2x) had nothing to do with the levels' (2.4x): 18 of 66 A/A pairs of
  tests/test_interpreter_e2e.py's script, recorded in fresh processes, had an
  interpreter finding; centred geometrically none had, and all 12 A/B pairs still
  found the mask loop (`benchmarks/interpreter_aa.py`).
* **Interpreter time has noise of its own between recordings.** The same script
  recorded twice on a loaded machine had its Python run 12-76% slower in one recording,
  at every place at once, while its operators drifted less; with the operators'
  calibration alone, a 0.1%-of-the-run `layer_norm` wrapper read as waste and failed a
  CI gate on unchanged code. So the between-recordings variance of a place is the
  larger of the operators' and the interpreter's own: the share-weighted mean square
  log ratio of the *other* places both sides share (the place under test left out, so
  a real difference does not hide itself), shrunk towards `INTERP_PRIOR_LOG_SD`, and
  never below that prior. The other places can show more noise than the prior, never
  less: in a fresh-clone CI run, a 2%-of-the-run place (`main`, 0.2 ms of Python per
  iteration) of an unchanged script read 1.58x while the mask loop beside it, 70% of
  the run, agreed closely and pulled the shrunk estimate down to 0.19. Small places
  drift more than large ones, so a large place's agreement says little about them.
  Where neither side kept per-iteration samples, that noise alone gives the interval;
  a bare point rule would report any drift.
* **Operator regions are compared without it** (`operators_only`). Left in, a Python
  difference would count twice: once as its own finding and once inflating the next op.
* **No mechanical cause.** The diagnosis compares the kernel call paths of two operator
  regions; Python time has none, so an interpreter finding names the frames on each side
  and says that no patch is derived (the diagnosis skips it).
"""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import numpy as np

from magneton.model import (
    Finding,
    Fix,
    OpRecord,
    Profile,
    Region,
    RootCause,
    RunEnergy,
    SavingInterval,
)

if TYPE_CHECKING:
    from .match import RegionPair

SCRIPT_FILE = "<script>"  # the file key of a run's own script, whatever it is called
ROOT_KEY = ("<entry>", "")  # a place no shared frame encloses
MAX_FRAMES = 3  # frames named per side in a finding
# the noise of interpreter time between two recordings before other places show it, in
# log units, and the weight (a share of the run) that prior carries: on a loaded 2-core
# machine the same script's Python drifted 12-76% between recordings, place by place and
# mostly all one way, while its operators drifted less. Measured: a Python loop holding
# 65-75% of its run (tests/test_interpreter_e2e.py's mask_loop), recorded twice in fresh
# processes ten times on an idle machine, differed by an RMS log ratio of 0.205 (up to
# 0.42, 1.53x); in the test's own process, 3 of 5 A/A pairs differed by 1.46-1.76x. At
# 0.15 those pairs were flagged as waste with no change to the code, so the prior is 0.30:
# its one-sided 95% bound alone covers 1.64x
INTERP_PRIOR_LOG_SD = 0.30
INTERP_PRIOR_WEIGHT = 0.25


@dataclass
class Place:
    """One side's interpreter time at one matched place (per entry call)."""

    key: tuple[str, str]  # (file basename or "<script>", function)
    ops: list[int] = field(default_factory=list)  # ops the interpreter time led to
    energy_j: float = 0.0
    time_s: float = 0.0
    frames: dict[str, float] = field(default_factory=dict)  # "a.py:12 f" -> J
    samples_j: np.ndarray | None = None  # per timed iteration

    def label(self, pa: Profile, pb: Profile) -> str:
        """`build_mask in masks.py`, or for the scripts `main in the script (a.py, b.py)`."""
        file, fn = self.key
        if self.key == ROOT_KEY:
            return "the entry (no frame both sides share)"
        if file == SCRIPT_FILE:
            names = dict.fromkeys(os.path.basename(p.run.script) for p in (pa, pb))
            return f"{fn} in the script ({', '.join(names)})"
        return f"{fn} in {file}"

    def top_frames(self) -> list[str]:
        return [k for k, _ in sorted(self.frames.items(), key=lambda kv: (-kv[1], kv[0]))][
            :MAX_FRAMES
        ]


def frame_key(p: Profile, fidx: int) -> tuple[str, str]:
    """(file key, function) of a recorded frame: stable across two copies of a program."""
    fr = p.frames[fidx]
    script = p.run.script
    same = bool(script) and os.path.abspath(fr.file) == os.path.abspath(script)
    return (SCRIPT_FILE if same else os.path.basename(fr.file), fr.function)


def frame_label(p: Profile, fidx: int) -> str:
    """`a.py:12 build_mask`: the frame as `report`'s python rows name it."""
    fr = p.frames[fidx]
    return f"{os.path.basename(fr.file)}:{fr.line} {fr.function}"


def call_site_label(p: Profile, op: OpRecord) -> str:
    """Where the interpreter time before `op` ran: its innermost recorded frame."""
    if op.frames and 0 <= op.frames[-1] < len(p.frames):
        return frame_label(p, op.frames[-1])
    return "(unknown frame)"


def interp_energy(p: Profile) -> np.ndarray | None:
    """Per op, the interpreter energy that led to its call (J per entry call); None when
    the run's attribution did not keep interpreter time apart."""
    vals = p.energy.interp_j
    if not vals or len(vals) != len(p.ops):
        return None
    return np.maximum(np.asarray(vals, dtype=float), 0.0)


def interp_samples(p: Profile) -> np.ndarray | None:
    """(iterations, ops) interpreter energies of the timed iterations, or None."""
    rows = p.energy.interp_samples_j
    if len(rows) < 2 or any(len(r) != len(p.ops) for r in rows):
        return None
    return np.maximum(np.asarray(rows, dtype=float), 0.0)


def p_static_w(p: Profile) -> float:
    return float((p.energy.model or {}).get("p_static_w", 0.0))


def operators_only(p: Profile) -> Profile:
    """A view of `p` whose operators carry their own energy only (interpreter share and
    its per-iteration samples taken out). `p` itself when nothing was kept apart."""
    interp = interp_energy(p)
    if interp is None or not interp.any():
        return p
    ops = []
    for op, e in zip(p.ops, interp.tolist(), strict=True):
        own = copy.copy(op)  # `dataclasses.replace` re-runs __init__: 2x the time per op
        own.energy_j = op.energy_j - e
        ops.append(own)
    samples = p.energy.op_samples_j
    per_iter = interp_samples(p)
    if samples and all(len(r) == len(p.ops) for r in samples):
        s = np.asarray(samples, dtype=float)
        sub = per_iter if per_iter is not None and per_iter.shape == s.shape else interp
        samples = np.maximum(s - sub, 0.0).tolist()
    energy: RunEnergy = replace(p.energy, op_samples_j=samples)
    return replace(p, ops=ops, energy=energy)


def _all_keys(p: Profile) -> set[tuple[str, str]]:
    return {frame_key(p, i) for i in range(len(p.frames))}


def _place_key(p: Profile, frames: list[int], shared: set[tuple[str, str]]) -> tuple[str, str]:
    """The innermost frame of a stack whose key the other side also has."""
    for fidx in reversed(frames):
        if 0 <= fidx < len(p.frames):
            k = frame_key(p, fidx)
            if k in shared:
                return k
    return ROOT_KEY


def places(p: Profile, other: Profile) -> dict[tuple[str, str], Place]:
    """`p`'s interpreter time by place, places keyed as `other` can match them."""
    interp = interp_energy(p)
    if interp is None:
        return {}
    per_iter = interp_samples(p)
    pw = p_static_w(p)
    shared = _all_keys(other)
    out: dict[tuple[str, str], Place] = {}
    for op, e in zip(p.ops, interp, strict=True):
        if e <= 0:
            continue
        key = _place_key(p, op.frames, shared)
        pl = out.setdefault(key, Place(key=key))
        pl.ops.append(op.idx)
        pl.energy_j += float(e)
        pl.time_s += float(e) / pw if pw > 0 else 0.0
        label = call_site_label(p, op)
        pl.frames[label] = pl.frames.get(label, 0.0) + float(e)
    if per_iter is not None:
        for pl in out.values():
            s = per_iter[:, pl.ops].sum(axis=1)
            pos = s[s > 0]
            center = float(np.exp(np.log(pos).mean())) if len(pos) else 0.0
            # the samples give the noise, the point estimate (each op's cheapest
            # iteration) the level, as detect.run_samples does for operators
            pl.samples_j = s * (pl.energy_j / center) if center > 0 else None
    return out


def interpreter_findings(
    pa: Profile, pb: Profile, pairs: list[RegionPair], threshold: float
) -> list[Finding]:
    """Findings for the places whose interpreter energy differs confidently (ids 0; the
    caller numbers them with the operator findings). `pairs`: the matched region pairs,
    whose identical work calibrates the noise between the two recordings."""
    from .detect import _interval as saving_interval_of
    from .detect import between_runs_log_sd, confident, point_candidate, run_energy_j

    pl_a, pl_b = places(pa, pb), places(pb, pa)
    if not pl_a and not pl_b:
        return []
    e_run_a, e_run_b = run_energy_j(pa), run_energy_j(pb)
    ops_sd = between_runs_log_sd(operators_only(pa), operators_only(pb), pairs)
    out = []
    for key in sorted(set(pl_a) | set(pl_b)):
        a = pl_a.get(key, Place(key=key))
        b = pl_b.get(key, Place(key=key))
        ea, eb = a.energy_j, b.energy_j
        wasteful = point_candidate(ea, eb, e_run_a, e_run_b, threshold)
        if wasteful is None:
            continue
        e_w, e_eff = (ea, eb) if wasteful == "a" else (eb, ea)
        between_sd = max(
            ops_sd,
            INTERP_PRIOR_LOG_SD,
            interp_between_log_sd(pl_a, pl_b, e_run_a, e_run_b, key),
        )
        interval = saving_interval_of(a.samples_j, b.samples_j, wasteful, e_w, e_eff, between_sd)
        if interval is None and a.samples_j is None and b.samples_j is None and e_eff > 0:
            interval = between_only_interval(e_w, e_eff, between_sd)
        if interval is not None and not confident(interval.ratio_low, threshold):
            continue
        if interval is None and (a.samples_j is not None or b.samples_j is not None):
            continue  # one side has samples, the other none at this place: no test, no claim
        out.append(_finding(pa, pb, a, b, wasteful, e_w - e_eff, interval))
    return out


def interp_between_log_sd(
    pl_a: dict[tuple[str, str], Place],
    pl_b: dict[tuple[str, str], Place],
    e_run_a: float,
    e_run_b: float,
    exclude: tuple[str, str],
) -> float:
    """How much the interpreter time of the *other* places both sides share differed
    between the two recordings, in log units: the share-weighted mean square of
    ln(E_a / E_b) around 0, shrunk towards `INTERP_PRIOR_LOG_SD`. The place under test
    is left out, so a true difference does not widen its own interval."""
    num = den = 0.0
    for key in set(pl_a) & set(pl_b):
        if key == exclude:
            continue
        ea, eb = pl_a[key].energy_j, pl_b[key].energy_j
        if ea <= 0 or eb <= 0:
            continue
        w = 0.5 * (ea / max(e_run_a, 1e-300) + eb / max(e_run_b, 1e-300))
        num += w * float(np.log(ea / eb)) ** 2
        den += w
    num += INTERP_PRIOR_WEIGHT * INTERP_PRIOR_LOG_SD**2
    return float(np.sqrt(num / (den + INTERP_PRIOR_WEIGHT)))


def between_only_interval(e_w: float, e_eff: float, between_sd: float) -> SavingInterval:
    """The saving's interval when neither side kept per-iteration samples: the noise
    between recordings alone (normal quantile), instead of a bare point estimate that
    any drift of the interpreter would turn into a finding."""
    from scipy import special

    from .detect import CONFIDENCE

    d = float(np.log(e_w / e_eff))
    q = float(special.ndtri(CONFIDENCE)) * between_sd
    low, high = float(np.exp(d - q)), float(np.exp(d + q))
    return SavingInterval(
        ratio=float(np.exp(d)),
        ratio_low=low,
        ratio_high=high,
        saving_j_low=e_w * (1.0 - 1.0 / low),
        saving_j_high=e_w * (1.0 - 1.0 / high),
        confidence=CONFIDENCE,
        iterations_a=0,
        iterations_b=0,
        between_runs_log_sd=between_sd,
        test="normal on the log ratio, between-recordings variance only (no samples)",
    )


def _modules(p: Profile, ops: list[int]) -> list[str]:
    return list(dict.fromkeys(p.ops[o].module for o in ops if p.ops[o].module))


def _finding(
    pa: Profile,
    pb: Profile,
    a: Place,
    b: Place,
    wasteful: str,
    saving: float,
    interval: SavingInterval | None,
) -> Finding:
    from .detect import run_energy_j

    e_run_w = run_energy_j(pa if wasteful == "a" else pb)
    w, e = (a, b) if wasteful == "a" else (b, a)
    where_w = ", ".join(w.top_frames()) or w.label(pa, pb)
    where_e = ", ".join(e.top_frames()) or "no interpreter time there"
    run_w, run_e = (pa, pb) if wasteful == "a" else (pb, pa)
    note = (
        f"the Python in {a.label(pa, pb)} ran {w.time_s * 1e3:.3g} ms per call in "
        f"'{run_w.run.name}' ({where_w}) vs {e.time_s * 1e3:.3g} ms in '{run_e.run.name}' "
        f"({where_e})"
    )
    return Finding(
        id=0,
        wasteful=wasteful,
        verdict="waste",
        region_a=Region(ops=sorted(a.ops), energy_j=a.energy_j, time_s=a.time_s),
        region_b=Region(ops=sorted(b.ops), energy_j=b.energy_j, time_s=b.time_s),
        saving_j=saving,
        saving_share=saving / e_run_w if e_run_w > 0 else 0.0,
        output_rel_diff=0.0,
        ops_a=[pa.ops[o].name for o in sorted(a.ops)],
        ops_b=[pb.ops[o].name for o in sorted(b.ops)],
        modules_a=_modules(pa, sorted(a.ops)),
        modules_b=_modules(pb, sorted(b.ops)),
        interval=interval,
        kind="interpreter",
        frames_a=a.top_frames(),
        frames_b=b.top_frames(),
        root_cause=RootCause(kind="unknown", note=note),
        fix=Fix(summary=_advice(w, e, run_w, run_e, where_w, where_e)),
    )


def _advice(w: Place, e: Place, run_w: Profile, run_e: Profile, where_w: str, where_e: str) -> str:
    """What to do about the wasteful side's Python. In the script: make it do less. In a
    library (`multi_head_attention_forward` in torch's functional.py), the user cannot
    edit that Python, and "make it do less" pointed at torch; the lines of the script
    that reach it are what the user changes, so those are named on both sides."""
    head = "none mechanical: interpreter time has no kernel path to trace"
    if w.key[0] == SCRIPT_FILE or w.key == ROOT_KEY:
        return f"{head}; make the Python at {where_w} do less (compare it with {where_e})"
    sites_w = ", ".join(user_sites(run_w, w.ops)) or "no recorded line of the script"
    sites_e = ", ".join(user_sites(run_e, e.ops)) or "no recorded line of the script"
    return (
        f"{head}; this Python runs in library code ({where_w}), which the script does not "
        f"edit: it is reached from {sites_w} in '{run_w.run.name}' and from {sites_e} in "
        f"'{run_e.run.name}'; compare the two sides' calls into it there"
    )


def user_sites(p: Profile, ops: list[int]) -> list[str]:
    """The script's lines (innermost frame in the run's own script) through which `ops`
    were reached, most interpreter energy first."""
    interp = interp_energy(p)
    sites: dict[str, float] = {}
    for o in ops:
        frames = p.ops[o].frames
        fidx = next((i for i in reversed(frames) if frame_key(p, i)[0] == SCRIPT_FILE), None)
        if fidx is not None:
            label = frame_label(p, fidx)
            sites[label] = sites.get(label, 0.0) + (float(interp[o]) if interp is not None else 0.0)
    return [k for k, _ in sorted(sites.items(), key=lambda kv: (-kv[1], kv[0]))][:MAX_FRAMES]
