"""Multi-rank analysis: one report over all ranks of a job, and rank-by-rank job diffs.

A job recorded with `magneton record --nproc N --run NAME` (tracer/distributed.py) is the
runs `NAME/rank0 … NAME/rank<N-1>`. This module reads them back and answers:

* `rank_report(db, NAME)` - per rank: time and energy per entry call, time and energy in
  collectives, time waiting for peers, how much of the measured waiting burned CPU
  (busy-wait) or blocked (idle), the idle tail (the rank finished its call before the
  slowest rank), and the job's imbalance ratio (max/min busy time).
* `diff_jobs(db, A, B)` - compares two jobs rank by rank: value-matched regions per rank
  (`diagnose.diff.diff_runs`), plus collectives present on one side with no counterpart
  on the other, reported as *redundant* with their energy and the library call that issued
  them (case c9: the shadow all-reduces `dist.Join` runs on a rank that ran out of data).

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
* A redundant collective's saving is its energy above the rank's idle baseline when the
  rank is not the job's slowest (without the collective it would idle until the slowest
  rank finishes, and idling is not free), and its whole energy when it is the slowest
  (removing it shortens the job).
"""

from __future__ import annotations

import contextlib
import difflib
import json
import os
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

from magneton.graphdb.model import (
    DiffResult,
    Finding,
    MagnetonError,
    OpRecord,
    Profile,
    Region,
    RunSummary,
)

# Frame files (relative to the torch package) whose functions issue collectives for a
# known API. Join's own file is the signature of case c9.
_JOIN_FILE = os.path.join("distributed", "algorithms", "join.py")
_DDP_FILE = os.path.join("nn", "parallel", "distributed.py")
JOIN_API = "torch.distributed.algorithms.join.Join"
# DistributedDataParallel methods that only run when DDP is inside a Join context (its
# join hook and the per-forward bookkeeping Join enables): collectives they issue exist
# because of Join even when no join.py frame is on their stack.
_DDP_JOIN_ONLY = frozenset(
    {
        "_check_global_requires_backward_grad_sync",
        "_match_all_reduce_for_bwd_pass",
        "_match_unused_params_allreduce",
        "_sync_final_model",
        "_find_common_rank",
        "main_hook",
        "post_hook",
    }
)
_COLLECTIVE_NAMESPACES = ("c10d", "_c10d_functional", "c10d_functional")


def is_collective(name: str) -> bool:
    ns = name.split("::", 1)[0]
    return ns in _COLLECTIVE_NAMESPACES and not name.endswith("::wait_tensor")


# --------------------------------------------------------------------------------------
# Finding a job's ranks
# --------------------------------------------------------------------------------------


@contextlib.contextmanager
def _handle(db: Any) -> Iterator[Any]:
    if hasattr(db, "load_profile"):
        yield db
        return
    from magneton.graphdb import open_db

    h = open_db(db, read_only=True)
    try:
        yield h
    finally:
        h.close()


def job_runs(db: Any, name: str) -> dict[int, Any]:
    """rank -> RunRow of the runs `name/rank<r>` in the DB (empty when none)."""
    prefix = f"{name}/rank"
    out: dict[int, Any] = {}
    with _handle(db) as h:
        for row in h.list_runs():
            tail = row.name[len(prefix) :] if row.name.startswith(prefix) else ""
            if tail.isdigit():
                out[int(tail)] = row
    return dict(sorted(out.items()))


def is_multirank(db: Any, name: str) -> bool:
    """True when `name` is a job recorded rank by rank (runs `name/rank<r>` exist)."""
    return bool(job_runs(db, name))


# --------------------------------------------------------------------------------------
# Collective timings recorded by tracer/distributed.py
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


def _load_job(h: Any, name: str) -> tuple[dict[int, Any], dict[int, Profile]]:
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
    stats: list[RankStats] = []
    for r in range(world):
        row = rows.get(r)
        if row is None:
            stats.append(RankStats(rank=r, run=f"{name}/rank{r}", status="missing"))
            continue
        p = profiles.get(r)
        if p is None:
            stats.append(RankStats(rank=r, run=row.name, status=row.status, error=row.error or ""))
            continue
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
        stats.append(st)
    ok = [s for s in stats if s.status == "ok"]
    rep = RankReport(name=name, world_size=world, ranks=stats, wait_method=wait_method, notes=notes)
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
    for s in stats:
        if s.status == "missing":
            rep.notes.append(f"rank {s.rank} of {world} is not in the DB (merge its shard)")
        elif s.status != "ok":
            rep.notes.append(f"rank {s.rank} {s.status}: {s.error or 'no error recorded'}")
    return rep


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
        gpu = max(counts, key=counts.get) if counts else f"rank{s.rank}"
    return (s.host, s.power_source, gpu)


def rank_report(db: Any, name: str) -> RankReport | None:
    """The multi-rank report of job `name`, or None when `name` has no `name/rank<r>` runs
    (a single-process run: use the ordinary report)."""
    with _handle(db) as h:
        rows, profiles = _load_job(h, name)
    if not rows:
        return None
    return _report(name, rows, profiles)


def print_rank_report(rep: RankReport, console: Any = None) -> None:
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    methods = ", ".join(rep.energy_methods) or "no energy"
    sources = ", ".join(rep.power_sources)
    console.print(
        f"job '{rep.name}': {rep.world_size} ranks, {rep.job_time_s * 1e3:.2f} ms/call "
        f"(slowest rank {rep.slowest_rank}), {rep.job_energy_j:.4g} J/call incl. idle tails "
        f"({methods}{'; ' + sources if sources else ''})"
    )
    if rep.imbalance_ratio:
        basis = ", ".join(sorted({s.busy_basis for s in rep.ranks if s.busy_basis}))
        work = f"; work ratio (max/min FLOPs): {rep.work_ratio:.2f}" if rep.work_ratio else ""
        console.print(
            f"imbalance ratio (max/min busy time, busy = {basis}): {rep.imbalance_ratio:.2f}"
            f"{work}; most work: rank {rep.busiest_rank}; peer wait: {rep.wait_method}"
        )

    def ms(x: float | None) -> str:
        return "" if x is None else f"{x * 1e3:.1f}"

    # two narrow tables rather than one of 14 columns: both fit an 80-column terminal
    t = Table(title=f"ranks of '{rep.name}': time and energy per entry call")
    for col in ("rank", "status", "ms", "J", "busy ms", "blocked ms", "tail ms", "tail J"):
        t.add_column(col, justify="left" if col == "status" else "right")
    c = Table(title="collectives per entry call")
    for col in ("rank", "ops", "ms", "J", "waited ms", "busy-wait ms", "peer wait ms"):
        c.add_column(col, justify="right")
    for s in rep.ranks:
        if s.status != "ok":
            t.add_row(str(s.rank), f"[red]{s.status}[/]", *[""] * 6)
            continue
        t.add_row(
            str(s.rank),
            "ok",
            ms(s.time_s),
            f"{s.energy_j:.3g}",
            ms(s.busy_s),
            ms(s.blocked_s),
            ms(s.idle_tail_s),
            f"{s.idle_tail_energy_j:.3g}",
        )
        c.add_row(
            str(s.rank),
            str(s.collective_count),
            ms(s.collective_time_s),
            f"{s.collective_energy_j:.3g}",
            ms(s.wait_s),
            ms(s.busy_wait_s),
            ms(s.peer_wait_s),
        )
    console.print(t)
    console.print(
        "busy = own work (CPU time on CPU ranks); blocked = time the rank used no CPU (wall - "
        "CPU time, measured); tail = idle until the slowest rank finished, priced at the "
        "idle baseline (estimated)"
    )
    console.print(c)
    console.print(
        "ms/J = the collective operators' windows and energy; waited = time in work.wait() "
        "of collectives waited on at once (measured); busy-wait = CPU time burned in it, the "
        "rest blocked; peer wait = part of it until the last peer arrived (estimated)"
    )
    for n in rep.notes:
        console.print(f"note: {n}")


# --------------------------------------------------------------------------------------
# Which library call issued a collective
# --------------------------------------------------------------------------------------


def _torch_rel(path: str) -> str | None:
    """Path relative to the installed torch package, or None for other files."""
    norm = path.replace("\\", "/")
    i = norm.rfind("/torch/")
    return norm[i + len("/torch/") :] if i >= 0 else None


@dataclass(frozen=True)
class Cause:
    api: str  # "torch.distributed.algorithms.join.Join", "torch.autograd.backward", ...
    phase: str  # what the call was doing (Join: shadow / notify / final-sync)


def collective_cause(p: Profile, op: OpRecord) -> Cause:
    """The library API whose call put this collective on the rank's schedule."""
    frames = [p.frames[i] for i in op.frames if 0 <= i < len(p.frames)]
    rels = [(_torch_rel(f.file), f) for f in frames]
    join_fns = [f.function for rel, f in rels if rel == _JOIN_FILE.replace(os.sep, "/")]
    ddp_fns = [f.function for rel, f in rels if rel == _DDP_FILE.replace(os.sep, "/")]
    if join_fns or any(fn in _DDP_JOIN_ONLY for fn in ddp_fns):
        if "notify_join_context" in join_fns:
            phase = "notify"  # per-iteration all-reduce Join adds to every DDP forward
        elif "post_hook" in ddp_fns or "_sync_final_model" in ddp_fns:
            phase = "final-sync"
        elif "__exit__" in join_fns:
            phase = "shadow"  # this rank ran out of data and shadows the others
        else:
            phase = "per-iteration"
        return Cause(JOIN_API, phase)
    for rel, f in rels:
        if rel is not None:
            mod = "torch." + rel.removesuffix(".py").replace("/", ".").removesuffix(".__init__")
            return Cause(f"{mod}.{f.function}", "")
    return Cause("(issued from C++)", "")


def job_causes(profiles: dict[int, Profile]) -> dict[int, dict[int, Cause]]:
    """rank -> {collective op idx: Cause}, with causes shared across ranks: the k-th
    collective of a process group is one collective on all its members, so when Join issued
    it on one rank (a shadow all-reduce), its partners on the other ranks (the DDP bucket
    all-reduces of the batches only they still had) exist because of Join too, although
    nothing on their own stacks says so."""
    own: dict[int, dict[int, Cause]] = {}
    groups: dict[int, dict[str, list[int]]] = {}
    for r, p in profiles.items():
        own[r] = {op.idx: collective_cause(p, op) for op in p.ops if is_collective(op.name)}
        tl = timeline(p)
        group_of = {c.op: c.group for c in tl.collectives} if tl is not None else {}
        g: dict[str, list[int]] = {}
        for idx in own[r]:
            g.setdefault(group_of.get(idx, ""), []).append(idx)
        groups[r] = g
    out = {r: dict(c) for r, c in own.items()}
    names = {name for g in groups.values() for name in g}
    for name in names:
        members = {r: g[name] for r, g in groups.items() if name in g}
        if len(members) < 2 or len({len(v) for v in members.values()}) != 1:
            continue
        for k in range(len(next(iter(members.values())))):
            join = [
                (r, own[r][ops[k]]) for r, ops in members.items() if own[r][ops[k]].api == JOIN_API
            ]
            if not join:
                continue
            if len(join) == len(members) and all(c.phase == "shadow" for _, c in join):
                # every rank is in Join.__exit__: the final "has everyone joined?" check,
                # not a shadow of anyone's work
                for r, ops in members.items():
                    out[r][ops[k]] = Cause(JOIN_API, "all-joined check")
                continue
            src_rank, src = join[0]
            for r, ops in members.items():
                if own[r][ops[k]].api != JOIN_API:
                    out[r][ops[k]] = Cause(JOIN_API, f"partner of rank {src_rank} {src.phase}")
    return out


def _user_site(p: Profile, op: OpRecord) -> Any:
    """The innermost frame of the recorded script on the op's stack (where to look)."""
    script = os.path.realpath(p.run.script) if p.run.script else ""
    for i in reversed(op.frames):
        f = p.frames[i]
        if script and os.path.realpath(f.file) == script:
            return f
    return None


def _join_with_line(p: Profile, ops: list[OpRecord]) -> tuple[Any, str]:
    """(frame, code) of the user's `with Join(...)` statement: the script frame just
    outside Join.__exit__ on a shadow collective's stack (Python reports the exit call at
    the `with` line), checked - or, when no op passed through __exit__, found - with libcst
    by the qualified name of the context manager."""
    from magneton.diagnose.dataflow import source_index

    script = os.path.realpath(p.run.script) if p.run.script else ""
    for op in ops:
        frames = [p.frames[i] for i in op.frames]
        for k, f in enumerate(frames[:-1]):
            nxt = frames[k + 1]
            rel = _torch_rel(nxt.file)
            if (
                rel == _JOIN_FILE.replace(os.sep, "/")
                and nxt.function in ("__exit__", "__enter__")
                and os.path.realpath(f.file) == script
            ):
                idx = source_index(f.file)
                return f, idx.line_text(f.line) if idx is not None else ""
    idx = source_index(script) if script else None
    if idx is None:
        return None, ""
    import libcst as cst

    for node in idx.nodes_of(cst.With):
        for item in node.items:
            call = item.item
            if isinstance(call, cst.Call) and any(
                q == JOIN_API or q.endswith(".Join") for q in idx.qualified_names(call.func)
            ):
                line = idx.line_of(node)
                from magneton.graphdb.model import FrameRecord

                return FrameRecord(idx=-1, file=script, line=line, function=""), idx.line_text(line)
    return None, ""


# --------------------------------------------------------------------------------------
# Rank-by-rank job diff
# --------------------------------------------------------------------------------------


def _signature(p: Profile, op: OpRecord, causes: dict[int, Cause] | None) -> tuple[str, str]:
    c = (causes or {}).get(op.idx) or collective_cause(p, op)
    return (op.name, c.api + ("#" + c.phase if c.phase else ""))


def unmatched_collectives(
    pa: Profile,
    pb: Profile,
    causes_a: dict[int, Cause] | None = None,
    causes_b: dict[int, Cause] | None = None,
) -> tuple[list[int], list[int]]:
    """Collective op idx of A with no counterpart in B, and of B with none in A: the two
    schedules aligned by (operator, issuing API) with a longest-matching-blocks diff."""
    ca = [op for op in pa.ops if is_collective(op.name)]
    cb = [op for op in pb.ops if is_collective(op.name)]
    sa = [_signature(pa, op, causes_a) for op in ca]
    sb = [_signature(pb, op, causes_b) for op in cb]
    only_a: list[int] = []
    only_b: list[int] = []
    sm = difflib.SequenceMatcher(None, sa, sb, autojunk=False)
    for tag, i1, i2, j1, j2 in sm.get_opcodes():
        if tag in ("delete", "replace"):
            only_a.extend(op.idx for op in ca[i1:i2])
        if tag in ("insert", "replace"):
            only_b.extend(op.idx for op in cb[j1:j2])
    return only_a, only_b


def _companions(p: Profile, cause: Cause) -> list[int]:
    """For Join: every op its hooks ran (the zeros/ones/item around the shadow
    collectives), which exist only because of Join. (Partnered collectives bring no
    companions: the compute around them is the rank's own training.)"""
    if cause.api != JOIN_API:
        return []
    return [
        op.idx
        for op in p.ops
        if not is_collective(op.name) and collective_cause(p, op).api == JOIN_API
    ]


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
    model = p.config.get("energy.model")
    if p.run.energy_method == "estimated" and model:
        from magneton.tracer.power import ModelCoefficients

        m = json.loads(model)
        coeffs = ModelCoefficients(
            name=m.get("name", ""),
            p_static_w=float(m["p_static_w"]),
            e_flop_pj={k: float(v) for k, v in m["e_flop_pj"].items()},
            e_byte_pj=float(m["e_byte_pj"]),
        )
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
    from magneton.tracer.energy import tile

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
    try:
        span_mean = float(p.config.get("energy.span_s", "nan"))
    except ValueError:
        span_mean = float("nan")
    if span_first > 0 and span_mean == span_mean and span_mean > 0:
        first *= span_mean / span_first
    return first


def _frame_json(f: Any, code: str = "") -> dict:
    return {"kind": "frame", "file": f.file, "line": f.line, "function": f.function, "code": code}


def _redundant_findings(
    side: str,
    p: Profile,
    other_run: str,
    unmatched: list[int],
    stats: RankStats,
    job: RankReport,
    timeline_: RankTimeline | None,
    op_causes: dict[int, Cause] | None = None,
) -> list[Finding]:
    """One finding per issuing API for the unmatched collectives of one rank."""
    op_causes = op_causes or {}
    by_cause: dict[str, list[int]] = {}
    causes: dict[str, Cause] = {}

    def cause_of(i: int) -> Cause:
        return op_causes.get(i) or collective_cause(p, p.ops[i])

    for i in unmatched:
        c = cause_of(i)
        by_cause.setdefault(c.api, []).append(i)
        causes.setdefault(c.api, c)
    out: list[Finding] = []
    waits = {c.op: c for c in (timeline_.collectives if timeline_ else [])}
    for api, colls in by_cause.items():
        cause = causes[api]
        ops = sorted(set(colls) | set(_companions(p, cause)))
        region = _region(p, ops)
        critical = stats.rank == job.busiest_rank
        charged_s = _charged_time_s(p, ops)
        above_idle_j, basis = _above_idle_j(p, ops, stats.idle_w, charged_s)
        saving = region.energy_j if critical else above_idle_j
        phases: dict[str, int] = {}
        for i in colls:
            ph = cause_of(i).phase or "-"
            phases[ph] = phases.get(ph, 0) + 1
        w_ns = sum(sum(waits[i].wait_ns) for i in colls if i in waits)
        w_cpu = sum(
            sum(min(a, b) for a, b in zip(waits[i].wait_ns, waits[i].wait_cpu_ns, strict=False))
            for i in colls
            if i in waits
        )
        own_join = [i for i in colls if collective_cause(p, p.ops[i]).api == api]
        first = p.ops[(own_join or colls)[0]]
        lib_frame = None
        for fi in reversed(first.frames):
            fr = p.frames[fi]
            if _torch_rel(fr.file) is not None and "distributed_c10d" not in fr.file:
                lib_frame = fr
        if api == JOIN_API:
            shadow = [p.ops[i] for i in colls if cause_of(i).phase == "shadow"]
            site, code = _join_with_line(p, shadow or [p.ops[i] for i in colls])
            summary = (
                f"rank {stats.rank}: {len(colls)} collectives issued by dist.Join "
                f"({', '.join(f'{n} {ph}' for ph, n in sorted(phases.items()))}) have no "
                f"counterpart in '{other_run}'"
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
        else:
            site = _user_site(p, first)
            idx_code = ""
            if site is not None:
                from magneton.diagnose.dataflow import source_index

                si = source_index(site.file)
                idx_code = si.line_text(site.line) if si is not None else ""
            code = idx_code
            summary = (
                f"rank {stats.rank}: {len(colls)} collectives issued by {api} have no "
                f"counterpart in '{other_run}'"
            )
        rule = _rule_json("join-redundant-allreduce") if api == JOIN_API else None
        root = {
            "kind": "code",
            "variable": api,
            "values": {side: code or None, ("b" if side == "a" else "a"): None},
            "file": site.file if site is not None else None,
            "line": site.line if site is not None else None,
            "code": code or None,
            "library_default": False,
            "origins": {},
            "key_variable": None,
            "data_flow": [],
            "rule": rule,
            "rules": [rule["id"]] if rule else [],
            "api": api,
            "rank": stats.rank,
            "summary": summary,
        }
        fix_text = (
            rule.get("fix")
            if rule and rule.get("fix")
            else f"Remove the call to {api} at this line, or issue its collectives only when "
            "the other ranks need them."
        )
        if api == JOIN_API and not rule:
            fix_text = (
                "Exit early on the rank that ran out of data (train the remaining batches "
                "of the other ranks on the local module) instead of joining with shadow "
                "collectives."
            )
        other = "b" if side == "a" else "a"
        f = Finding(
            id=0,
            wasteful=side,
            verdict="waste",
            region_a=region if side == "a" else Region(),
            region_b=region if side == "b" else Region(),
            saving_j=saving,
            saving_share=0.0,
            output_rel_diff=0.0,
            ops_a=[p.ops[i].name for i in ops] if side == "a" else [],
            ops_b=[p.ops[i].name for i in ops] if side == "b" else [],
            modules_a=sorted({p.ops[i].module for i in ops}) if side == "a" else [],
            modules_b=sorted({p.ops[i].module for i in ops}) if side == "b" else [],
            category="redundant",
            divergence={
                "level": "python",
                "ops": {side: colls[0], other: None},
                side: _frame_json(lib_frame) if lib_frame is not None else {"kind": "none"},
                other: {"kind": "none"},
                "site": {side: _frame_json(site, code) if site is not None else None, other: None},
                "common_prefix": [],
                "identical_paths": 0,
                "rank": stats.rank,
                "runs": {side: p.run.name, other: other_run},
                "collectives": {
                    "count": len(colls),
                    "phases": phases,
                    "ops": colls,
                    "energy_j": sum(p.ops[i].energy_j for i in colls),
                    "time_s": sum(p.ops[i].time_s for i in colls),
                    "measured_wait_s": w_ns
                    / max(1, len(timeline_.iterations) if timeline_ else 1)
                    / 1e9,
                    "busy_wait_share": (w_cpu / w_ns) if w_ns else None,
                },
                "saving_basis": (
                    "whole energy: this rank has the most work, the others wait for it, so "
                    "removing these operators shortens the job"
                    if critical
                    else f"energy above idle ({basis}): this rank has less work than rank "
                    f"{job.busiest_rank}, so without these operators it would sit idle until "
                    "that rank finishes, and idling is not free"
                ),
            },
            root_cause=root,
            fix={
                "summary": fix_text,
                "patch": None,
                "file": site.file if site is not None else None,
                "snippet": code or None,
                "rule": rule["id"] if rule else None,
                "references": rule.get("references", []) if rule else [],
            },
        )
        out.append(f)
    return out


def _rule_json(rule_id: str) -> dict | None:
    try:
        from magneton.knowledge.base import default_knowledge

        r = default_knowledge().rule(rule_id)
    except Exception:  # the knowledge base is optional for this diagnosis
        return None
    return {
        "id": r.id,
        "title": r.title,
        "category": r.category,
        "knob": getattr(r, "knob", None),
        "references": list(r.references),
        "grounding": r.grounding,
        "orientation": "as-written",
        "fix": getattr(r, "fix", ""),
    }


def _job_summary(name: str, rep: RankReport) -> RunSummary:
    return RunSummary(
        run=name,
        energy_j=rep.job_energy_j,
        time_s=rep.job_time_s,
        power_source=", ".join(rep.power_sources),
        energy_method=", ".join(rep.energy_methods),
    )


def diff_jobs(
    db: Any,
    a: str,
    b: str,
    threshold: float = 0.10,
    *,
    match_values: bool = True,
) -> DiffResult:
    """Compare multi-rank jobs `a` and `b` rank by rank (see the module docstring).

    Per rank r: collectives of `a/rank r` with no counterpart in `b/rank r` (and the other
    way round) become "redundant" findings naming the API that issued them, diagnosed;
    with `match_values`, `diff_runs` also matches the ranks' compute by value (its findings
    get `divergence["rank"]` and `divergence["runs"]`, and are diagnosed by
    `diagnose_job_findings`). Finding ids are renumbered over the job, findings sorted by
    saving.
    """
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
        msgs: list[str] = []
        if rep_a.world_size != rep_b.world_size:
            msgs.append(
                f"world sizes differ ({a}: {rep_a.world_size}, {b}: {rep_b.world_size}); "
                "ranks compared where both exist"
            )
        ranks = sorted(set(prof_a) & set(prof_b))
        for r in sorted((set(rows_a) | set(rows_b)) - set(ranks)):
            msgs.append(f"rank {r} not compared: it did not record successfully in both jobs")
        findings: list[Finding] = []
        per_rank: list[str] = []
        stats_a = {s.rank: s for s in rep_a.ranks}
        stats_b = {s.rank: s for s in rep_b.ranks}
        causes_a, causes_b = job_causes(prof_a), job_causes(prof_b)
        for r in ranks:
            pa, pb = prof_a[r], prof_b[r]
            ca, cb = causes_a.get(r, {}), causes_b.get(r, {})
            only_a, only_b = unmatched_collectives(pa, pb, ca, cb)
            found: list[Finding] = []
            if only_a:
                found += _redundant_findings(
                    "a", pa, pb.run.name, only_a, stats_a[r], rep_a, timeline(pa), ca
                )
            if only_b:
                found += _redundant_findings(
                    "b", pb, pa.run.name, only_b, stats_b[r], rep_b, timeline(pb), cb
                )
            ta, tb = stats_a[r].time_s, stats_b[r].time_s
            per_rank.append(
                f"rank {r}: {ta * 1e3:.2f} vs {tb * 1e3:.2f} ms/call"
                + (f" ({ta / tb:.2f}x)" if tb > 0 else "")
                + f", {stats_a[r].energy_j:.3g} vs {stats_b[r].energy_j:.3g} J/call"
            )
            if match_values:
                more, pairs = _value_findings(h, pa.run.name, pb.run.name, r, threshold, msgs)
                found += more
                result.matched_pairs += pairs
            for f in found:
                f.divergence["rank_time_s"] = {"a": ta, "b": tb}
                f.divergence["rank_energy_j"] = {
                    "a": stats_a[r].energy_j,
                    "b": stats_b[r].energy_j,
                }
            findings += found
        for f in findings:
            total = result.a.energy_j if f.wasteful == "a" else result.b.energy_j
            if f.category == "redundant":
                f.saving_share = f.saving_j / total if total > 0 else 0.0
        findings.sort(key=lambda f: f.saving_j, reverse=True)
        for k, f in enumerate(findings, 1):
            f.id = k
        result.findings = findings
        # `message` explains an empty or partial comparison (printers show it instead of
        # the findings table); per-rank times travel in each finding's divergence
        if not findings:
            result.message = "; ".join(
                ["no collective without a counterpart and no energy difference"] + per_rank + msgs
            )
        elif msgs:
            result.message = ""
            for f in findings:
                f.divergence.setdefault("notes", msgs)
    return result


def _value_findings(
    h: Any, run_a: str, run_b: str, rank: int, threshold: float, msgs: list[str]
) -> tuple[list[Finding], int]:
    """diff_runs on one rank pair (value matching of the compute), annotated with the rank.
    Returns the findings and the number of matched region pairs."""
    try:
        from magneton.diagnose.diff import diff_runs
    except ImportError:
        return [], 0
    sub = diff_runs(h, run_a, run_b, threshold, diagnose=False)
    if sub.message:
        msgs.append(f"rank {rank}: {sub.message}")
    for f in sub.findings:
        d = dict(f.divergence or {})
        d["rank"] = rank
        d["runs"] = {"a": run_a, "b": run_b}
        f.divergence = d
    return sub.findings, sub.matched_pairs


def diagnose_job_findings(db: Any, result: DiffResult) -> DiffResult:
    """Diagnose the value-matched findings of a job diff, rank pair by rank pair, with the
    single-run diagnosis (`diagnose_result`) - which cannot take the job result itself,
    whose a/b name jobs, not runs. Never with re-runs: re-executing one rank of a
    distributed script would block in its first collective waiting for absent peers.
    Redundant-collective findings are diagnosed already and left alone."""
    from magneton.diagnose.rootcause import diagnose_result

    by_pair: dict[tuple[str, str], list[Finding]] = {}
    for f in result.findings:
        runs = (f.divergence or {}).get("runs") or {}
        if f.category is None and runs.get("a") and runs.get("b"):
            by_pair.setdefault((runs["a"], runs["b"]), []).append(f)
    with _handle(db) as h:
        for (ra, rb), found in by_pair.items():
            keep = {id(f): dict(f.divergence or {}) for f in found}
            sub = DiffResult(
                a=RunSummary(ra, 0.0, 0.0, ""),
                b=RunSummary(rb, 0.0, 0.0, ""),
                findings=found,
                threshold=result.threshold,
            )
            diagnose_result(h, sub, rerun=False)
            for f in found:  # diagnosis replaces divergence; keep which ranks it concerns
                extra = {k: v for k, v in keep[id(f)].items() if k not in (f.divergence or {})}
                f.divergence = {**(f.divergence or {}), **extra}
    return result
