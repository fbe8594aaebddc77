"""Rank-by-rank comparison of two multi-rank jobs (`magneton diff JOB_A JOB_B`).

Per rank r, collectives of `A/rank r` with no counterpart in `B/rank r` (and the other
way round, collectives.py) become *redundant* findings naming the library call that
issued them, diagnosed here (case c9: the shadow all-reduces `dist.Join` runs on a rank
that ran out of data); the ranks' compute is also matched by value with the ordinary
single-run diff that the pipeline hands in (`diff_pair`, diagnose/pipeline.py), whose findings carry the rank they concern
(`Finding.job`). Finding ids are renumbered over the job, findings sorted by saving.

A redundant collective's saving is its energy above the rank's idle baseline when the
rank is not the job's busiest (without the collective it would idle until the busiest
rank finishes, and idling is not free), and its whole energy when it is the busiest
(removing it shortens the job).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol

from magneton.model import (
    CollectiveInfo,
    DiffResult,
    Divergence,
    Finding,
    Fix,
    FrameRecord,
    JobInfo,
    MagnetonError,
    PathElement,
    Profile,
    Region,
    RootCause,
    RuleRef,
    RunSummary,
)

from ..cause.divergence import frame_element
from ..matching.equivalence import DEFAULT_TAU
from .collectives import (
    JOIN_API,
    Cause,
    _companions,
    _join_with_line,
    _torch_rel,
    _user_site,
    collective_cause,
    job_causes,
    unmatched_collectives,
)
from .ranks import RankReport, RankStats, RankTimeline, _handle, _load_job, _report, timeline

if TYPE_CHECKING:
    from magneton.graphdb.db import ProfileDB
    from magneton.graphdb.store import DBArg


def _region(p: Profile, ops: list[int]) -> Region:
    idx = set(ops)
    produced = {t for i in ops for t in p.ops[i].outputs}
    inputs = sorted({t for i in ops for t in p.ops[i].inputs if t not in produced})
    consumed_outside = {t for op in p.ops if op.idx not in idx for t in op.inputs}
    outputs = sorted(t for t in produced if t in consumed_outside)
    return Region(
        ops=sorted(ops),
        inputs=inputs,
        outputs=outputs,
        energy_j=sum(p.ops[i].energy_j for i in ops),
        time_s=sum(p.ops[i].time_s for i in ops),
    )


def _above_idle_j(p: Profile, ops: list[int], idle_w: float, charged_s: float) -> tuple[float, str]:
    """Energy of `ops` beyond what the rank would draw idling for the same time, and how
    it was obtained. With the energy model the idle draw is its static power, so this is
    exactly the operators' dynamic (FLOP and byte) energy; with a sensor it is their
    energy minus idle power times the time charged to them."""
    from magneton.tracer.energy.pricing import recorded_model

    coeffs = recorded_model(p) if p.run.energy_method == "estimated" else None
    if coeffs is not None:
        dyn = sum(coeffs.dynamic_j(p.ops[i]) for i in ops)
        extra = max(0.0, coeffs.p_static_w - idle_w) * charged_s
        return dyn + extra, f"their dynamic energy under {coeffs.name or 'the model'}"
    energy = sum(p.ops[i].energy_j for i in ops)
    return (
        max(0.0, energy - idle_w * charged_s),
        f"{energy:.3g} J minus {idle_w:.3g} W x {charged_s:.3g} s charged to them",
    )


def _charged_time_s(p: Profile, ops: list[int]) -> float:
    """Seconds charged to `ops` by the recorder's tiling (own windows plus their share of
    the gaps between operators): the time their energy covers. The op windows alone would
    leave out the gap time whose energy they carry."""
    import numpy as np

    from magneton.tracer.timing.timeline import tile

    timed = [op for op in p.ops if op.end_ns > op.start_ns]
    if not timed:
        return sum(p.ops[i].time_s for i in ops)
    ids = np.array([op.idx for op in timed], dtype=int)
    starts = np.array([op.start_ns for op in timed], dtype=np.int64)
    ends = np.array([op.end_ns for op in timed], dtype=np.int64)
    pcs = tile(ids, starts, ends)
    sel = np.isin(pcs.op, np.array(sorted(set(ops)), dtype=int))
    first = float(((pcs.b - pcs.a)[sel] * pcs.weight[sel]).sum() / 1e9)
    # energies are means over the timing iterations, the stored windows are the first
    # one's: scale by the ratio of the mean iteration span to the first's
    span_first = (int(ends.max()) - int(starts.min())) / 1e9
    span_mean = _mean_span_s(p)
    if span_first > 0 and span_mean == span_mean and span_mean > 0:
        first *= span_mean / span_first
    return first


def _mean_span_s(p: Profile) -> float:
    """Mean timing-iteration span (`RunEnergy.span_s`), NaN if unknown."""
    return p.energy.span_s or float("nan")


@dataclass
class _RankSide:
    """One rank of one side of a job diff: what its redundant findings are built from."""

    side: str  # "a" | "b"
    p: Profile
    other_run: str
    stats: RankStats
    job: RankReport
    timeline: RankTimeline | None
    causes: dict[int, Cause]

    @property
    def other(self) -> str:
        return "b" if self.side == "a" else "a"

    def cause_of(self, i: int) -> Cause:
        return self.causes.get(i) or collective_cause(self.p, self.p.ops[i])


def _redundant_findings(rs: _RankSide, unmatched: list[int]) -> list[Finding]:
    """One finding per issuing API for the unmatched collectives of one rank."""
    by_cause: dict[str, list[int]] = {}
    causes: dict[str, Cause] = {}
    for i in unmatched:
        c = rs.cause_of(i)
        by_cause.setdefault(c.api, []).append(i)
        causes.setdefault(c.api, c)
    return [_redundant_finding(rs, api, colls, causes[api]) for api, colls in by_cause.items()]


def _redundant_finding(rs: _RankSide, api: str, colls: list[int], cause: Cause) -> Finding:
    p, side, stats = rs.p, rs.side, rs.stats
    ops = sorted(set(colls) | set(_companions(p, cause)))
    region = _region(p, ops)
    critical = stats.rank == rs.job.busiest_rank
    charged_s = _charged_time_s(p, ops)
    above_idle_j, basis = _above_idle_j(p, ops, stats.idle_w, charged_s)
    phases: dict[str, int] = {}
    for i in colls:
        ph = rs.cause_of(i).phase or "-"
        phases[ph] = phases.get(ph, 0) + 1
    site, code, summary = _site_and_summary(rs, api, colls, phases)
    rule = _rule_ref("join-redundant-allreduce") if api == JOIN_API else None
    site_el = replace(frame_element(site), code=code) if site is not None else None
    lib_el = _library_element(p, colls, api)
    none = PathElement("none")
    names = [p.ops[i].name for i in ops]
    modules = sorted({p.ops[i].module for i in ops})
    return Finding(
        id=0,
        wasteful=side,
        verdict="waste",
        region_a=region if side == "a" else Region(),
        region_b=region if side == "b" else Region(),
        saving_j=region.energy_j if critical else above_idle_j,
        saving_share=0.0,
        output_rel_diff=0.0,
        ops_a=names if side == "a" else [],
        ops_b=names if side == "b" else [],
        modules_a=modules if side == "a" else [],
        modules_b=modules if side == "b" else [],
        category="redundant",
        divergence=Divergence(
            level="python",
            op_a=colls[0] if side == "a" else None,
            op_b=colls[0] if side == "b" else None,
            a=lib_el if side == "a" else none,
            b=lib_el if side == "b" else none,
            site_a=site_el if side == "a" else None,
            site_b=site_el if side == "b" else None,
        ),
        job=JobInfo(
            rank=stats.rank,
            runs={side: p.run.name, rs.other: rs.other_run},
            collectives=_collective_info(rs, colls, phases),
            saving_basis=_saving_basis(critical, basis, rs.job),
        ),
        root_cause=RootCause(
            kind="code",
            variable=api,
            values={side: code or None, rs.other: None},
            file=site.file if site is not None else None,
            line=site.line if site is not None else None,
            code=code or None,
            rule=rule,
            rules=[rule.id] if rule else [],
            api=api,
            rank=stats.rank,
            summary=summary,
        ),
        fix=Fix(
            summary=_fix_text(api, rule),
            file=site.file if site is not None else None,
            snippet=code or None,
            rule=rule.id if rule else None,
            references=list(rule.references) if rule else [],
        ),
    )


def _library_element(p: Profile, colls: list[int], api: str) -> PathElement:
    """The outermost torch frame (below c10d) that issued the first collective."""
    own = [i for i in colls if collective_cause(p, p.ops[i]).api == api]
    first = p.ops[(own or colls)[0]]
    lib_frame = None
    for fi in reversed(first.frames):
        fr = p.frames[fi]
        if _torch_rel(fr.file) is not None and "distributed_c10d" not in fr.file:
            lib_frame = fr
    if lib_frame is None:
        return PathElement("none")
    return PathElement(
        "frame", file=lib_frame.file, line=lib_frame.line, function=lib_frame.function, code=""
    )


def _site_and_summary(
    rs: _RankSide, api: str, colls: list[int], phases: dict[str, int]
) -> tuple[FrameRecord | None, str, str]:
    """(the user's line that issued the collectives, its code, a one-paragraph summary)."""
    p, rank = rs.p, rs.stats.rank
    if api != JOIN_API:
        own = [i for i in colls if collective_cause(p, p.ops[i]).api == api]
        site = _user_site(p, p.ops[(own or colls)[0]])
        code = ""
        if site is not None:
            from ..source.index import source_index

            si = source_index(site.file)
            code = si.line_text(site.line) if si is not None else ""
        summary = (
            f"rank {rank}: {len(colls)} collectives issued by {api} have no "
            f"counterpart in '{rs.other_run}'"
        )
        return site, code, summary
    shadow = [p.ops[i] for i in colls if rs.cause_of(i).phase == "shadow"]
    site, code = _join_with_line(p, shadow or [p.ops[i] for i in colls])
    summary = (
        f"rank {rank}: {len(colls)} collectives issued by dist.Join "
        f"({', '.join(f'{n} {ph}' for ph, n in sorted(phases.items()))}) have no "
        f"counterpart in '{rs.other_run}'"
    )
    if phases.get("shadow"):
        summary += (
            f"; the {phases['shadow']} shadow collectives run after this rank ran out "
            "of data, keeping it communicating instead of idle"
        )
    partners = sum(n for ph, n in phases.items() if ph.startswith("partner of"))
    if partners:
        summary += (
            f"; {partners} are this rank's own collectives whose peers were Join "
            "shadows (its extra batches, all-reduced with zeros)"
        )
    return site, code, summary


def _collective_info(rs: _RankSide, colls: list[int], phases: dict[str, int]) -> CollectiveInfo:
    p, tl = rs.p, rs.timeline
    waits = {c.op: c for c in (tl.collectives if tl else [])}
    w_ns = sum(sum(waits[i].wait_ns) for i in colls if i in waits)
    w_cpu = sum(
        sum(min(a, b) for a, b in zip(waits[i].wait_ns, waits[i].wait_cpu_ns, strict=False))
        for i in colls
        if i in waits
    )
    return CollectiveInfo(
        count=len(colls),
        phases=phases,
        ops=colls,
        energy_j=sum(p.ops[i].energy_j for i in colls),
        time_s=sum(p.ops[i].time_s for i in colls),
        measured_wait_s=w_ns / max(1, len(tl.iterations) if tl else 1) / 1e9,
        busy_wait_share=(w_cpu / w_ns) if w_ns else None,
    )


def _saving_basis(critical: bool, basis: str, job: RankReport) -> str:
    if critical:
        return (
            "whole energy: this rank has the most work, the others wait for it, so "
            "removing these operators shortens the job"
        )
    return (
        f"energy above idle ({basis}): this rank has less work than rank "
        f"{job.busiest_rank}, so without these operators it would sit idle until "
        "that rank finishes, and idling is not free"
    )


def _fix_text(api: str, rule: RuleRef | None) -> str:
    if rule is not None and rule.fix:
        return rule.fix
    if api == JOIN_API:
        return (
            "Exit early on the rank that ran out of data (train the remaining batches "
            "of the other ranks on the local module) instead of joining with shadow "
            "collectives."
        )
    return (
        f"Remove the call to {api} at this line, or issue its collectives only when "
        "the other ranks need them."
    )


def _rule_ref(rule_id: str) -> RuleRef | None:
    try:
        from magneton.knowledge.base import default_knowledge
        from magneton.knowledge.match import rule_ref

        return rule_ref(default_knowledge().rule(rule_id), with_fix=True)
    except Exception:  # the knowledge base is optional for this diagnosis
        return None


def _job_summary(name: str, rep: RankReport) -> RunSummary:
    return RunSummary(
        run=name,
        energy_j=rep.job_energy_j,
        time_s=rep.job_time_s,
        power_source=", ".join(rep.power_sources),
        energy_method=", ".join(rep.energy_methods),
    )


class PairDiff(Protocol):
    """What the pipeline's single-run diff of a rank pair returns (its `DiffOutcome`)."""

    result: DiffResult


# (open DB, run a, run b, threshold, tau) -> the undiagnosed diff of one rank pair. The
# pipeline passes it in: this module sits below the pipeline that composes it, and must
# not import it back (docs/architecture.md, Stages).
DiffPair = Callable[[Any, str, str, float, float], PairDiff]


@dataclass
class JobDiff:
    """A job diff: the job's result, and the rank-pair diffs it matched by value (the
    pipeline stores them as ordinary diffs, `pipeline.store_outcome`)."""

    result: DiffResult
    parts: list[Any] = field(default_factory=list)  # what `diff_pair` returned, by rank


def job_diff(
    db: DBArg,
    a: str,
    b: str,
    threshold: float = 0.10,
    *,
    tau: float = DEFAULT_TAU,
    diff_pair: DiffPair | None = None,
) -> JobDiff:
    """Compare multi-rank jobs `a` and `b` rank by rank (the module docstring); `db` is an
    open ProfileDB or a DB directory. Reads only. With `diff_pair`, each rank pair's
    compute is also matched by value (`JobDiff.parts`)."""
    with _handle(db) as h:
        rows_a, prof_a = _load_job(h, a)
        rows_b, prof_b = _load_job(h, b)
        for name, rows in ((a, rows_a), (b, rows_b)):
            if not rows:
                raise MagnetonError(
                    f"'{name}' is not a multi-rank job (no runs '{name}/rank0', ...); "
                    "record it with --nproc N or diff single runs"
                )
        rep_a, rep_b = _report(a, rows_a, prof_a), _report(b, rows_b, prof_b)
        result = DiffResult(a=_job_summary(a, rep_a), b=_job_summary(b, rep_b), threshold=threshold)
        out = JobDiff(result)
        msgs: list[str] = []
        if rep_a.world_size != rep_b.world_size:
            msgs.append(
                f"world sizes differ ({a}: {rep_a.world_size}, {b}: {rep_b.world_size}); "
                "ranks compared where both exist"
            )
        ranks = sorted(set(prof_a) & set(prof_b))
        for r in sorted((set(rows_a) | set(rows_b)) - set(ranks)):
            msgs.append(f"rank {r} not compared: it did not record successfully in both jobs")
        stats_a = {s.rank: s for s in rep_a.ranks}
        stats_b = {s.rank: s for s in rep_b.ranks}
        causes_a, causes_b = job_causes(prof_a), job_causes(prof_b)
        findings: list[Finding] = []
        per_rank: list[str] = []
        for r in ranks:
            pa, pb = prof_a[r], prof_b[r]
            side_a = _RankSide(
                "a", pa, pb.run.name, stats_a[r], rep_a, timeline(pa), causes_a.get(r, {})
            )
            side_b = _RankSide(
                "b", pb, pa.run.name, stats_b[r], rep_b, timeline(pb), causes_b.get(r, {})
            )
            found = _rank_findings(side_a, side_b)
            per_rank.append(_rank_line(r, stats_a[r], stats_b[r]))
            if diff_pair is not None:
                part = _value_part(diff_pair, h, pa.run.name, pb.run.name, r, threshold, tau)
                if part.result.message:
                    msgs.append(f"rank {r}: {part.result.message}")
                out.parts.append(part)
                result.matched_pairs += part.result.matched_pairs
                found += _rank_copies(part.result.findings, r, pa.run.name, pb.run.name)
            for f in found:
                assert f.job is not None
                f.job.rank_time_s = {"a": stats_a[r].time_s, "b": stats_b[r].time_s}
                f.job.rank_energy_j = {"a": stats_a[r].energy_j, "b": stats_b[r].energy_j}
            findings += found
        _finish(result, findings, per_rank, msgs)
    return out


def _rank_findings(side_a: _RankSide, side_b: _RankSide) -> list[Finding]:
    """Redundant-collective findings of one rank pair, both directions."""
    c_a, c_b = side_a.causes, side_b.causes
    only_a, only_b = unmatched_collectives(side_a.p, side_b.p, c_a, c_b)
    found: list[Finding] = []
    if only_a:
        found += _redundant_findings(side_a, only_a)
    if only_b:
        found += _redundant_findings(side_b, only_b)
    return found


def _rank_line(r: int, sa: RankStats, sb: RankStats) -> str:
    ta, tb = sa.time_s, sb.time_s
    return (
        f"rank {r}: {ta * 1e3:.2f} vs {tb * 1e3:.2f} ms/call"
        + (f" ({ta / tb:.2f}x)" if tb > 0 else "")
        + f", {sa.energy_j:.3g} vs {sb.energy_j:.3g} J/call"
    )


def _finish(
    result: DiffResult, findings: list[Finding], per_rank: list[str], msgs: list[str]
) -> None:
    """Shares of redundant savings, ids by saving, and the message or notes."""
    for f in findings:
        total = result.a.energy_j if f.wasteful == "a" else result.b.energy_j
        if f.category == "redundant":
            f.saving_share = f.saving_j / total if total > 0 else 0.0
    findings.sort(key=lambda f: f.saving_j, reverse=True)
    for k, f in enumerate(findings, 1):
        f.id = k
    result.findings = findings
    # `message` explains an empty or partial comparison (printers show it instead of the
    # findings table); per-rank times travel in each finding's job info
    if not findings:
        result.message = "; ".join(
            ["no collective without a counterpart and no energy difference"] + per_rank + msgs
        )
    elif msgs:
        result.message = ""
        for f in findings:
            if f.job is not None and f.job.notes is None:
                f.job.notes = msgs


def _value_part(
    diff_pair: DiffPair,
    h: ProfileDB,
    run_a: str,
    run_b: str,
    rank: int,
    threshold: float,
    tau: float,
) -> PairDiff:
    """The single-run diff of one rank pair (value matching of the compute), undiagnosed:
    re-running one rank of a distributed script would block waiting for its peers."""
    return diff_pair(h, run_a, run_b, threshold, tau)


def _rank_copies(findings: list[Finding], rank: int, run_a: str, run_b: str) -> list[Finding]:
    """Copies of a rank pair's findings for the job result (the originals are stored
    with the rank pair's own ids), with the rank they concern."""
    out = []
    for f in findings:
        g = copy.deepcopy(f)
        g.job = JobInfo(rank=rank, runs={"a": run_a, "b": run_b})
        out.append(g)
    return out
