"""The diff pipeline: the one place that composes run-or-job → match → detect → diagnose.

Every way of diffing two programs (`magneton diff`, `export-patch`, `eval`, `demo`, the
TUI's background job, the rank-by-rank comparison of multi-rank jobs) calls `run_diff`,
so a fix or a new stage lands in all of them at once. Composing it separately in each
caller once let them drift: only the CLI could diff multi-rank jobs, and whether a
result was stored depended on whether the DB handle happened to be writable.

Two choices, and the failures they prevent:

* `run_diff` is pure: it reads the DB and never writes it. Callers that keep results
  call `store_outcome` explicitly (the CLI and eval do; the TUI's child opens the DB
  read-only and stores nothing). A read-only caller can no longer be surprised by a
  write, and a writable one can no longer silently skip storing.
* One progress callback, `progress(stage, result, done, total)`: `"detected"` once the
  findings are known (before diagnosis, which can take minutes of re-running scripts),
  then `"diagnosed"` after each diagnosed finding. The TUI shows findings and then
  causes as they arrive; eval times the two halves. Before those, two status stages
  with done = total = 0 and no findings, `"loaded"` (both runs read) and `"matched"`
  (candidates found, confirmation next), let `magneton diff` say on a terminal what
  the seconds of a diff are spent on; callers that count ignore them.

Detected candidates are confirmed before anything sees them (diagnose/matching/confirm.py): both
sides are re-measured in alternating rounds and a candidate the paired test does not
confirm is dropped, so neither the progress callback nor diagnosis ever gets a finding
that was drift between the recordings. `rerun=False` turns this off with the re-runs of
diagnosis (findings are then labelled unconfirmed).

Both stages that re-run the scripts share one warm worker per recorded environment
(tracer/timing/warm.py `WarmPool`), started as soon as detection has candidates that can be
confirmed and closed in a `finally` when the diff ends (also on errors, Ctrl-C and
SIGTERM): confirmation's per-side workers and diagnosis's key-variable re-run are forks
of it. Each stage starting its own processes imported the scripts' libraries three times
per diff (5-7 s of CPU each for transformers), most of a diff's time.

A name that is not a run but has runs `NAME/rank0`, `NAME/rank1`, ... is a multi-rank
job (tracer/distributed/worker.py records them so); two such names are compared rank by rank
(diagnose/jobs/jobdiff.py), whose redundant-collective findings come diagnosed. Their
value-matched findings are not diagnosed: re-running one rank of a distributed script
would block in its first collective, waiting for absent peers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from magneton.graphdb.store import DBArg
from magneton.model import DiffResult, MagnetonError, Profile, Region

from .matching.detect import DEFAULT_THRESHOLD, check_threshold
from .matching.equivalence import DEFAULT_TAU

if TYPE_CHECKING:
    from magneton.graphdb.db import ProfileDB
    from magneton.tracer.timing.warm import WarmHold

    from .cause.grouping import CauseGroup

# progress(stage, result so far, done, total); stage "detected" (done = total = number of
# findings) or "diagnosed" (after each diagnosed finding)
Progress = Callable[[str, DiffResult, int, int], None]


@dataclass
class DiffOutcome:
    """What one diff produced: the result, plus what storing it needs."""

    result: DiffResult
    tau: float
    # region pairs (kind, region a, region b) in region-number order, and which finding
    # each region belongs to (single-run diffs; empty for a job)
    regions: list[tuple[str, Region, Region]] = field(default_factory=list)
    finding_of_region: dict[int, int] = field(default_factory=dict)
    diagnosed: bool = False  # diagnosis ran (store its rules and explanations too)
    kb: Any = None  # the knowledge base diagnosis used
    # a job diff: the rank-pair diffs it matched by value (stored as ordinary diffs)
    parts: list[DiffOutcome] = field(default_factory=list)
    job: bool = False
    rerun_info: dict = field(default_factory=dict)  # the key-variable re-run's (keyvar.py)


def is_job(db: ProfileDB, name: str) -> bool:
    """True when `name` is not a run but a job recorded rank by rank."""
    from .jobs.ranks import is_multirank

    return not db.has_run(name) and is_multirank(db, name)


def load_run(db: ProfileDB, name: str) -> Profile:
    """The profile of run `name`; MagnetonError when it is missing or failed."""
    db.require_run(name)
    p = db.load_profile(name)
    if (
        p.run.status == "incomparable"
    ):  # stored as a graph, never priced (tracer/timing/alignment.py)
        raise MagnetonError(f"run '{name}' cannot be compared: {p.run.error}")
    if p.run.status != "ok":
        why = f": {p.run.error}" if p.run.error else ""
        raise MagnetonError(f"run '{name}' did not record successfully ({p.run.status}{why})")
    return p


def run_diff(
    db: ProfileDB,
    a: str,
    b: str,
    *,
    threshold: float = DEFAULT_THRESHOLD,
    tau: float = DEFAULT_TAU,
    diagnose: bool = True,
    rerun: bool = True,
    progress: Progress | None = None,
    hold: WarmHold | None = None,
) -> DiffOutcome:
    """Diff runs or jobs `a` and `b` of an open ProfileDB (read only; see the module
    docstring). `diagnose=False` stops after detection; `rerun=False` neither confirms candidates by
    re-measuring them (they are reported unconfirmed) nor re-runs the scripts to
    diagnose. `hold`: keeps the diff's warm workers after it, for a caller that runs its
    scripts once more (tracer/timing/warm.py `WarmHold`; default: the diff ends them)."""
    check_threshold(threshold)
    if is_job(db, a):
        from .jobs.jobdiff import job_diff

        jd = job_diff(db, a, b, threshold=threshold, tau=tau, diff_pair=_undiagnosed_pair)
        out = DiffOutcome(result=jd.result, tau=tau, parts=jd.parts, job=True)
        if progress is not None:
            n = len(out.result.findings)
            progress("detected", out.result, n, n)
    else:
        out = diff_run_pair(
            db,
            a,
            b,
            threshold=threshold,
            tau=tau,
            diagnose=diagnose,
            rerun=rerun,
            progress=progress,
            hold=hold,
        )
    cause_groups(out.result)
    return out


def cause_groups(result: DiffResult) -> list[CauseGroup]:
    """The result's findings, one group per cause (diagnose/cause/grouping.py): what
    `run_diff` set on `result.groups`, or grouped now for a result that did not come from
    it (loaded from the DB, built by hand). Every consumer reads the same groups."""
    if not result.groups and result.findings:
        from .cause.grouping import group_by_cause

        result.groups = group_by_cause(result.findings)
    return result.groups


def diff_jobs(
    db: DBArg, a: str, b: str, threshold: float = 0.10, *, match_values: bool = True
) -> DiffResult:
    """Compare multi-rank jobs `a` and `b` rank by rank (diagnose/jobs/jobdiff.py), each
    rank pair's compute matched by value unless `match_values=False`; `db` is an open
    ProfileDB or a DB directory. Reads only."""
    from .jobs.jobdiff import job_diff

    pair = _undiagnosed_pair if match_values else None
    return job_diff(db, a, b, threshold=threshold, diff_pair=pair).result


def _undiagnosed_pair(db: ProfileDB, a: str, b: str, threshold: float, tau: float) -> DiffOutcome:
    """One rank pair of a job diff, undiagnosed: re-running one rank of a distributed
    script would block waiting for its peers."""
    return diff_run_pair(db, a, b, threshold=threshold, tau=tau, diagnose=False)


def diff_run_pair(
    db: ProfileDB,
    a: str,
    b: str,
    *,
    threshold: float = DEFAULT_THRESHOLD,
    tau: float = DEFAULT_TAU,
    diagnose: bool = True,
    rerun: bool = True,
    progress: Progress | None = None,
    hold: WarmHold | None = None,
) -> DiffOutcome:
    """`run_diff` for two single runs."""
    from .matching.diff import diff_profiles, region_findings
    from .matching.pathmatch import diff_by_path, finding_regions, has_values

    pa, pb = load_run(db, a), load_run(db, b)
    if progress is not None:  # stages with done = total = 0: a status, not a count
        from .matching.diff import summary

        progress("loaded", DiffResult(a=summary(pa), b=summary(pb)), 0, 0)
    if not (has_values(pa) and has_values(pb)):
        # imported traces carry no tensor values: matched by operator path and kernel
        # names (diagnose/matching/pathmatch.py), and nothing to re-run, so nothing to diagnose
        result, regions = diff_by_path(pa, pb, threshold)
        out = DiffOutcome(result, tau, regions, finding_regions(result, regions))
        if progress is not None:
            progress("detected", result, len(result.findings), len(result.findings))
        return out
    from .matching.confirm import not_confirmable

    # candidates the recordings leave undecided are kept only when the rounds will
    # decide them (diagnose/matching/detect.py)
    confirms = not not_confirmable(pa, pb, rerun)
    result, m = diff_profiles(pa, pb, threshold=threshold, tau=tau, keep_undecided=confirms)
    out = DiffOutcome(
        result=result,
        tau=tau,
        regions=[(rp.kind, rp.a, rp.b) for rp in m.pairs],
        finding_of_region=region_findings(result, m),
    )
    if not result.findings:
        if progress is not None:
            progress("detected", result, 0, 0)
        return out
    if progress is not None:  # candidates found (not passed on): confirmation is next
        progress("matched", DiffResult(a=result.a, b=result.b), 0, 0)
    from .matching.confirm import sigterm_unwinds

    pool = None
    try:
        with sigterm_unwinds():  # SIGTERM unwinds through the finally that ends the pool
            pool = _start_pool(pa, pb, rerun, hold)
            _confirm_and_diagnose(db, out, m, (pa, pb), threshold, rerun, diagnose, progress, pool)
    finally:
        if pool is not None:
            pool.close()
    return out


def _start_pool(pa: Profile, pb: Profile, rerun: bool, hold: WarmHold | None) -> Any:
    """The diff's warm workers (tracer/timing/warm.py `WarmPool`), importing the scripts'
    libraries from now on (held by `hold` after the diff, if given), when confirmation
    will re-measure the runs; confirmation and the key-variable re-run both fork from
    them. None when nothing is re-run that way."""
    from .matching.confirm import not_confirmable, start_pool

    if not_confirmable(pa, pb, rerun):
        return None
    return start_pool(pa, pb, hold=hold)


def _confirm_and_diagnose(
    db: ProfileDB,
    out: DiffOutcome,
    m: Any,
    profiles: tuple[Profile, Profile],
    threshold: float,
    rerun: bool,
    diagnose: bool,
    progress: Progress | None,
    pool: Any,
) -> None:
    """Confirm the candidates, then diagnose what was confirmed, both re-running the
    scripts in `pool` (None: each stage starts workers of its own where it needs them)."""
    from .matching.confirm import confirm_findings
    from .matching.diff import region_findings

    result = out.result
    # before anything is reported or diagnosed: a candidate that interleaved
    # re-measurement does not confirm is not a finding (diagnose/matching/confirm.py)
    result.findings, result.confirm_note = confirm_findings(
        *profiles, result.findings, threshold, rerun=rerun, pool=pool
    )
    out.finding_of_region = region_findings(result, m)  # numbers of the confirmed findings
    n = len(result.findings)
    if progress is not None:
        progress("detected", result, n, n)
    if not (diagnose and result.findings):
        return
    from magneton.knowledge.base import default_knowledge

    from .cause.rootcause import Diagnoser

    def step(done: int, total: int) -> None:
        if progress is not None:
            progress("diagnosed", result, done, total)

    out.kb = default_knowledge()
    d = Diagnoser(db, result, rerun=rerun, profiles=profiles, kb=out.kb, pool=pool)
    d.diagnose_all(result.findings, step)
    out.rerun_info = d.rerun_info
    out.diagnosed = True
    # a confirmed difference with no software cause is not a finding (model/diff.py)
    result.dismiss_noise()
    from .fix.direction import refuse_inverse_fixes

    refuse_inverse_fixes(result.findings)
    kept = {f.id for f in result.findings}
    out.finding_of_region = {k: i for k, i in out.finding_of_region.items() if i in kept}


def store_outcome(db: ProfileDB, out: DiffOutcome) -> None:
    """Write a diff into a writable DB, replacing any stored diff of the same pair: the
    region pairs and findings (graphdb/matches.py), and when it was diagnosed the rules
    and EXPLAINS rels (graphdb/rules.py). A job's rank-pair diffs are stored as ordinary
    diffs of the rank runs; the job result itself has no runs to hang on."""
    if db.read_only:
        raise MagnetonError("cannot store a diff in a DB opened read-only")
    for part in out.parts:
        store_outcome(db, part)
    if out.job:
        return
    from magneton.graphdb.matches import store_diff

    store_diff(db, out.result, out.regions, tau=out.tau, finding_of_region=out.finding_of_region)
    if out.diagnosed:
        from .cause.rootcause import store_diagnosis

        # store_diff wrote the diagnosed findings already
        store_diagnosis(db, out.result, out.kb, findings=False)


def diagnose_findings(
    db: ProfileDB, result: DiffResult, findings: list, *, rerun: bool = True
) -> None:
    """Diagnose some findings of a (stored, undiagnosed) single-run diff in place; pure
    like `run_diff` (store with `rootcause.store_diagnosis`)."""
    from .cause.rootcause import Diagnoser

    Diagnoser(db, result, rerun=rerun).diagnose_all(findings)
