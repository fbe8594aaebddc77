"""Multi-rank analysis: one report over all ranks of a job (`magneton report JOB`).

A job recorded with `magneton record --nproc N --run NAME` (tracer/distributed/worker.py) is the
runs `NAME/rank0 … NAME/rank<N-1>`. This module reads them back and answers:

* `rank_report(db, NAME)` - per rank: time and energy per entry call, time and energy in
  collectives, time waiting for peers, how much of the measured waiting burned CPU
  (busy-wait) or blocked (idle), the idle tail (the rank finished its call before the
  slowest rank), and the job's imbalance ratio (max/min busy time).

Related modules: jobdiff.py compares two jobs rank by rank (`magneton diff JOB_A JOB_B`),
collectives.py says which library call issued each collective, magneton/render/ranks.py
prints the report.

How each number is obtained, and the failure each choice prevents:

* Peer wait is a *barrier-timestamp estimate*: the k-th collective of a process group is
  the same collective on every member rank, so a rank that issued it before the last
  member arrived waited at least `last arrival - own arrival` (the last arrival waited for
  nobody). It is clamped to the rank's own issue→completion span. Ranks on one host share
  `CLOCK_MONOTONIC` (perf_counter), so their instants compare directly; across hosts each
  rank's times are taken relative to its release from the barrier the recorder passes
  before every entry call, which adds that barrier's release skew (tens of µs on a LAN) to
  the estimate. For async collectives (DDP's bucket all-reduces) the rank keeps computing
  after issuing, so the estimate is an upper bound on its idle time there.
* Measured waiting is the time spent in `work.wait()` of collectives the caller waits on at
  once (the recorder waits for them inside the operator's window); process CPU time in
  that window tells a spinning wait (busy-wait) from a blocked one (idle).
* Busy time is a rank's own work: its process CPU time per call on CPU ranks (measured;
  robust to waits of any kind and to being descheduled), entry time - peer wait on GPU
  ranks. Imbalance ratio = max/min busy time over ranks. The work ratio (max/min FLOPs of
  the ranks' non-collective operators) says the same from the operators' counted work and
  is deterministic; it decides which rank the others wait for (`busiest_rank`).
* The idle tail is priced at the rank's idle baseline (`idle_w`, "estimated"): the rank
  finished its call and would sit idle until the slowest rank finished. The job's energy is
  the sum over ranks of (energy per call + idle tail energy). Ranks sharing a host with a
  host-level source (RAPL, a meter, a CPU model) each report the whole host, so that sum
  counts the host once per rank - the report says so.
"""

from __future__ import annotations

import contextlib
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from magneton.graphdb.store import DBArg, opened
from magneton.model import Profile
from magneton.model.vocab import is_collective

if TYPE_CHECKING:
    from magneton.graphdb.db import ProfileDB, RunRow

__all__ = [
    "RankReport",
    "RankStats",
    "job_runs",
    "is_multirank",
    "rank_report",
]


# --------------------------------------------------------------------------------------
# Finding a job's ranks
# --------------------------------------------------------------------------------------


def _handle(db: DBArg) -> contextlib.AbstractContextManager[ProfileDB]:
    """An open DB as is, or a DB directory opened read-only for the block."""
    return opened(db, read_only=True)


def job_runs(db: DBArg, name: str) -> dict[int, RunRow]:
    """rank -> RunRow of the runs `name/rank<r>` in the DB (empty when none)."""
    prefix = f"{name}/rank"
    out: dict[int, RunRow] = {}
    with _handle(db) as h:
        for row in h.list_runs():
            tail = row.name[len(prefix) :] if row.name.startswith(prefix) else ""
            if tail.isdigit():
                out[int(tail)] = row
    return dict(sorted(out.items()))


def is_multirank(db: DBArg, name: str) -> bool:
    """True when `name` is a job recorded rank by rank (runs `name/rank<r>` exist)."""
    return bool(job_runs(db, name))


# --------------------------------------------------------------------------------------
# Collective timings recorded by tracer/distributed/worker.py
# --------------------------------------------------------------------------------------


@dataclass
class CollectiveTiming:
    """One collective operator of one rank, per timing-pass iteration."""

    op: int
    name: str
    group: str
    sync: bool
    start_ns: list[int]
    span_ns: list[int]  # issue → completion (0 = unknown)
    wait_ns: list[int]
    wait_cpu_ns: list[int]


@dataclass
class RankTimeline:
    rank: int
    host: str
    iterations: list[int]  # timing-pass iterations the per-op lists cover
    ref_ns: list[int]  # per timing-pass iteration: release from the pre-call barrier
    collectives: list[CollectiveTiming]
    cpu_ns: list[int] = field(default_factory=list)  # per timing iteration
    wall_ns: list[int] = field(default_factory=list)


def timeline(profile: Profile) -> RankTimeline | None:
    """The collective timings a distributed recording left on the run (`Profile.dist`)."""
    d = profile.dist
    if d is None:
        return None
    colls = [
        CollectiveTiming(
            op=c.op,
            name=c.name,
            group=c.group,
            sync=c.sync,
            start_ns=list(c.start_ns),
            span_ns=[
                max(0, e - s) if e else 0 for s, e in zip(c.start_ns, c.done_ns, strict=False)
            ],
            wait_ns=list(c.wait_ns),
            wait_cpu_ns=list(c.wait_cpu_ns),
        )
        for c in d.collectives
    ]
    return RankTimeline(
        rank=profile.run.rank,
        host=d.host or profile.run.host,
        iterations=list(d.iterations),
        ref_ns=list(d.call_ref_ns),
        collectives=colls,
        cpu_ns=list(d.call_cpu_ns),
        wall_ns=[e - s for s, e in zip(d.call_start_ns, d.call_end_ns, strict=False)],
    )


def estimate_peer_waits(
    timelines: dict[int, RankTimeline],
) -> tuple[dict[int, dict[int, float]], list[str]]:
    """Barrier-timestamp estimate of the time each rank waited for its peers in each
    collective it blocked on at once: rank -> {op idx: mean seconds per iteration}. All
    collectives of a group are aligned by position (that is what makes them the same
    collective), but only those the rank waited on right away count: after an async one
    the rank keeps working, and how much of the peers' lateness it absorbed is unknown.
    Returns notes about groups that could not be compared."""
    waits: dict[int, dict[int, list[float]]] = {r: {} for r in timelines}
    notes: list[str] = []
    groups = sorted({c.group for tl in timelines.values() for c in tl.collectives})
    for g in groups:
        members = {r: [c for c in tl.collectives if c.group == g] for r, tl in timelines.items()}
        members = {r: cs for r, cs in members.items() if cs}
        if len(members) < 2:
            continue
        counts = {len(cs) for cs in members.values()}
        n_coll = len(next(iter(members.values())))
        if len(counts) != 1:
            notes.append(
                f"group {g or '?'}: ranks issued different numbers of collectives "
                f"({', '.join(f'rank {r}: {len(cs)}' for r, cs in members.items())}); "
                "no peer-wait estimate"
            )
            continue
        common = set.intersection(*(set(timelines[r].iterations) for r in members))
        same_host = len({timelines[r].host for r in members}) == 1
        for it in sorted(common):
            pos = {r: timelines[r].iterations.index(it) for r in members}
            for k in range(n_coll):
                arrival: dict[int, int] = {}
                for r, cs in members.items():
                    t = cs[k].start_ns[pos[r]]
                    if not same_host:
                        refs = timelines[r].ref_ns
                        if it >= len(refs):
                            break
                        t -= refs[it]
                    arrival[r] = t
                if len(arrival) != len(members):
                    continue
                last = max(arrival.values())
                for r, cs in members.items():
                    c = cs[k]
                    if not c.sync:
                        continue  # async: the rank computed on; its idle share is unknown
                    w = last - arrival[r]
                    span = c.span_ns[pos[r]] if pos[r] < len(c.span_ns) else 0
                    if span > 0:
                        w = min(w, span)
                    waits[r].setdefault(c.op, []).append(max(0, w) / 1e9)
    mean = {r: {op: sum(v) / len(v) for op, v in d.items()} for r, d in waits.items()}
    return mean, notes


# --------------------------------------------------------------------------------------
# The per-rank report
# --------------------------------------------------------------------------------------


@dataclass
class RankStats:
    rank: int
    run: str
    status: str
    error: str = ""
    host: str = ""
    device: str = ""
    time_s: float = 0.0  # entry wall time per call
    energy_j: float = 0.0  # per call
    energy_method: str = ""
    power_source: str = ""
    idle_w: float = 0.0
    cpu_s: float | None = None  # process CPU time per call (measured), None if unknown
    collective_count: int = 0
    collective_time_s: float = 0.0  # sum of collective operator windows per call
    collective_energy_j: float = 0.0
    wait_s: float = 0.0  # measured time in work.wait() of collectives waited on at once
    busy_wait_s: float = 0.0  # CPU time burned during that waiting (measured)
    peer_wait_s: float = 0.0  # estimated time waiting for later peers (barrier timestamps)
    blocked_s: float | None = None  # time_s - cpu_s: the process used no CPU (measured)
    busy_s: float = 0.0  # own work: cpu_s on CPU ranks (measured), else time_s - peer_wait_s
    busy_basis: str = ""  # "cpu time" | "time - peer wait"
    flops: float = 0.0  # floating-point work of the rank's non-collective operators per call
    idle_tail_s: float = 0.0  # job time - own time: idle until the slowest rank finishes
    idle_tail_energy_j: float = 0.0  # idle_w * idle_tail_s (estimated)


@dataclass
class RankReport:
    name: str
    world_size: int
    ranks: list[RankStats]
    job_time_s: float = 0.0  # slowest rank's time per call
    job_energy_j: float = 0.0  # sum over ranks of energy + idle tail energy, per call
    imbalance_ratio: float = 0.0  # max/min busy time (0 when fewer than two ranks ok)
    slowest_rank: int = -1  # by time per call
    # the rank with the most work, which the others end up waiting for: by FLOPs when the
    # operators' work was counted (deterministic), else by busy time (noisy when ranks
    # share cores, and under Join the shadow work itself keeps a finished rank busy)
    busiest_rank: int = -1
    work_ratio: float = 0.0  # max/min FLOPs over ranks (0 when not counted)
    wait_method: str = ""
    energy_methods: list[str] = field(default_factory=list)
    power_sources: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return asdict(self)


def _load_job(h: ProfileDB, name: str) -> tuple[dict[int, RunRow], dict[int, Profile]]:
    rows = job_runs(h, name)
    profiles = {r: h.load_profile(row.name) for r, row in rows.items() if row.status == "ok"}
    return rows, profiles


def _report(name: str, rows: dict[int, Any], profiles: dict[int, Profile]) -> RankReport:
    world = max([p.run.world_size for p in profiles.values()] + [max(rows) + 1 if rows else 0])
    timelines = {r: tl for r, p in profiles.items() if (tl := timeline(p)) is not None}
    peer, notes = estimate_peer_waits(timelines)
    hosts = {tl.host for tl in timelines.values()}
    if len(timelines) >= 2:
        wait_method = (
            "barrier-timestamp estimate on one host clock"
            if len(hosts) == 1
            else "barrier-timestamp estimate, clocks aligned at each call's start barrier"
        )
    else:
        wait_method = "not estimated (needs the collective timings of at least two ranks)"
    stats = [_rank_stats(r, name, rows, profiles, timelines, peer) for r in range(world)]
    rep = RankReport(name=name, world_size=world, ranks=stats, wait_method=wait_method, notes=notes)
    _job_totals(rep, profiles)
    return rep


def _rank_stats(
    r: int,
    name: str,
    rows: dict[int, Any],
    profiles: dict[int, Profile],
    timelines: dict[int, RankTimeline],
    peer: dict[int, dict[int, float]],
) -> RankStats:
    """One rank's line of the report (status "missing" when it is not in the DB)."""
    row = rows.get(r)
    if row is None:
        return RankStats(rank=r, run=f"{name}/rank{r}", status="missing")
    p = profiles.get(r)
    if p is None:
        return RankStats(rank=r, run=row.name, status=row.status, error=row.error or "")
    run = p.run
    coll_ops = [op for op in p.ops if is_collective(op.name)]
    st = RankStats(
        rank=r,
        run=run.name,
        status=run.status,
        host=run.host,
        device=run.device,
        time_s=run.time_s,
        energy_j=run.energy_j,
        energy_method=run.energy_method,
        power_source=run.power_source,
        idle_w=run.idle_w,
        collective_count=len(coll_ops),
        flops=sum(op.flops for op in p.ops if not is_collective(op.name)),
        collective_time_s=sum(op.time_s for op in coll_ops),
        collective_energy_j=sum(op.energy_j for op in coll_ops),
    )
    tl = timelines.get(r)
    if tl is not None:
        n = max(1, len(tl.iterations))
        st.wait_s = sum(sum(c.wait_ns) for c in tl.collectives) / n / 1e9
        st.busy_wait_s = (
            sum(
                min(w, c)
                for col in tl.collectives
                for w, c in zip(col.wait_ns, col.wait_cpu_ns, strict=False)
            )
            / n
            / 1e9
        )
        if tl.cpu_ns:
            st.cpu_s = sum(tl.cpu_ns) / len(tl.cpu_ns) / 1e9
    st.peer_wait_s = min(sum(peer.get(r, {}).values()), st.time_s)
    if st.cpu_s is not None:
        st.blocked_s = max(0.0, st.time_s - st.cpu_s)
    if st.cpu_s is not None and not st.device.startswith("cuda"):
        # a CPU rank's own work is what it spent on the CPU; robust to waits of any kind
        # (async collectives included) and to being descheduled on a shared host
        st.busy_s, st.busy_basis = min(st.cpu_s, st.time_s), "cpu time"
    else:
        st.busy_s, st.busy_basis = max(0.0, st.time_s - st.peer_wait_s), "time - peer wait"
    return st


def _job_totals(rep: RankReport, profiles: dict[int, Profile]) -> None:
    """Job time and energy, imbalance, busiest rank and notes, from the ranks' lines."""
    stats, world = rep.ranks, rep.world_size
    ok = [s for s in stats if s.status == "ok"]
    if ok:
        slowest = max(ok, key=lambda s: s.time_s)
        rep.job_time_s = slowest.time_s
        rep.slowest_rank = slowest.rank
        for s in ok:
            s.idle_tail_s = max(0.0, rep.job_time_s - s.time_s)
            s.idle_tail_energy_j = s.idle_w * s.idle_tail_s
        rep.job_energy_j = sum(s.energy_j + s.idle_tail_energy_j for s in ok)
        busy = [s.busy_s for s in ok]
        flops = [s.flops for s in ok]
        if min(flops) > 0:
            rep.busiest_rank = max(ok, key=lambda s: s.flops).rank
            rep.work_ratio = max(flops) / min(flops)
        else:
            rep.busiest_rank = max(ok, key=lambda s: s.busy_s).rank
        if len(ok) >= 2 and min(busy) > 0:
            rep.imbalance_ratio = max(busy) / min(busy)
        rep.energy_methods = sorted({s.energy_method for s in ok if s.energy_method})
        rep.power_sources = sorted({s.power_source for s in ok if s.power_source})
        shared: dict[tuple[str, str, str], list[RankStats]] = {}
        for s in ok:
            shared.setdefault(_sensor_key(s, profiles.get(s.rank)), []).append(s)
        for (host, source, _), group in shared.items():
            if len(group) > 1:
                rep.notes.append(
                    f"ranks {', '.join(str(s.rank) for s in group)} share host {host} and the "
                    f"same power source ({source}): each rank's energy covers everything that "
                    "source sees, so the job total counts it once per rank (an upper bound)"
                )
    missing = [s.rank for s in stats if s.status == "missing"]
    if missing:
        rep.notes.append(
            f"{len(missing)} of {world} ranks are not in the DB: {rank_ranges(missing)} "
            "(merge their shards, or import their traces)"
        )
    for s in stats:
        if s.status == "missing":
            continue
        elif s.status != "ok":
            rep.notes.append(f"rank {s.rank} {s.status}: {s.error or 'no error recorded'}")


def _sensor_key(s: RankStats, p: Profile | None) -> tuple[str, str, str]:
    """What one energy figure covers: `nvml:N` names its GPU and RAPL/meters/CPU models
    the whole host, but a GPU model ("model:h100") prices each rank's own GPU, so the
    rank's CUDA device is part of the key."""
    gpu = ""
    if p is not None and s.power_source.startswith("model") and s.device.startswith("cuda"):
        counts: dict[str, int] = {}
        for op in p.ops:
            if op.device.startswith("cuda"):
                counts[op.device] = counts.get(op.device, 0) + 1
        gpu = max(counts, key=counts.__getitem__) if counts else f"rank{s.rank}"
    return (s.host, s.power_source, gpu)


def rank_ranges(ranks: list[int]) -> str:
    """`2–127` or `0, 3–5`: sorted ranks as ranges."""
    spans: list[list[int]] = []  # [first, last]
    for r in sorted(ranks):
        if spans and r == spans[-1][1] + 1:
            spans[-1][1] = r
        else:
            spans.append([r, r])
    return ", ".join(str(a) if a == b else f"{a}–{b}" for a, b in spans)


def rank_report(db: DBArg, name: str) -> RankReport | None:
    """The multi-rank report of job `name`, or None when `name` has no `name/rank<r>` runs
    (a single-process run: use the ordinary report)."""
    with _handle(db) as h:
        rows, profiles = _load_job(h, name)
    if not rows:
        return None
    return _report(name, rows, profiles)
