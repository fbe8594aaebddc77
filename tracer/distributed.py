"""Multi-rank recording: every rank of a torch.distributed job becomes its own run.

`magneton record SCRIPT --nproc N --db DIR --run NAME` starts N ranks through
torch.distributed's own launcher (the elastic agent behind `torchrun`) on loopback; each
rank records `NAME/rank<r>` with the usual two-pass recorder (`record_callable`) and writes
a *shard* (gzipped JSON of its Profile); after the job the launcher merges the shards into
the DB. For multi-node jobs each node runs

    torchrun --nnodes M --nproc-per-node N ... -m magneton.tracer.distributed SCRIPT \
        --db DIR --job NAME

and the shards (DIR/shards/NAME/) are copied to one machine and loaded with
`magneton merge --db DIR SHARD_DIR...` (docs/distributed.md).

Choices, and the failure each one prevents:

* Shards instead of direct DB writes: Kùzu admits one writer process, so N ranks writing
  the DB would fail or serialize behind a lock. A shard is written atomically (temp file +
  rename) so a rank killed mid-write never leaves half a shard behind.
* JSON, not pickle: shards travel between machines and `magneton merge` must not execute
  whatever a copied file contains.
* A rank that fails records itself as a failed run with its error; a rank that dies
  without a word (os._exit, SIGKILL, OOM) gets a failed run written by the launcher from
  the agent's exit status. The other ranks' runs still land.
* SIGTERM from the agent (sent to the surviving ranks when one rank fails) is turned into
  a failed-run record while the rank may still need its peers, but is *deferred* once the
  last measured call has returned: from then on the rank needs nobody, so it finishes
  attribution and writes its shard instead of losing a complete recording.
* Before every entry call each rank passes a `dist.barrier()` outside the dispatch modes
  and outside the measured window: without it the first timed call of a fast rank would
  include waiting for a slow peer's structure pass, and per-call skew would accumulate.
  The run's `time_s` is the entry's own wall time (barrier excluded); the time a rank
  then waits for the slowest rank is reported by `magneton report` as its idle tail.
* Collectives are operators already: c10d ops (`c10d::allreduce_`, `c10d::broadcast_`,
  `c10d::barrier`, the DDP reducer's bucket all-reduces launched from C++) go through the
  dispatcher, so both recorder passes see them. `CollectiveRecorder` registers a
  `torch.library.register_torch_dispatch` rule for every collective on the recorder's
  mode classes and adds what the dispatcher alone does not show:
  - the process group and bytes of each collective, and its issue instant per timing
    iteration (compared across ranks to estimate peer waits, diagnose/ranks.py);
  - for collectives the Python caller waits on right away (`dist.all_reduce(t)` with
    `async_op=False`), it calls `work.wait()` itself, inside the mode's timing window, so
    the operator's window - and the energy charged to it - covers the wait instead of
    leaving it in the gap after the op. Python's own `wait()` then returns at once;
  - process CPU time during that wait, which tells a blocked wait (idle) from a spinning
    one (busy-wait).
  Rules, unlike a second dispatch mode, cost nothing for the other operators, whose timed
  windows therefore stay as tight as in a single-process recording.
  Async collectives (DDP's buckets, `async_op=True`) are left async: their completion is
  not timed, because the only hook, a Python callback on the Work's future, runs on the
  backend's worker thread and must take the GIL - it delayed gloo's next collective by up
  to the interpreter's 5 ms switch interval and perturbed exactly what is measured.
  Everything lands in the run's `Profile.dist` (`DistInfo`).
* `--replay` is refused: replaying a collective on one rank blocks waiting for peers that
  are not replaying.
* The workers get `GLOO_SOCKET_IFNAME` set to the loopback interface (unless set) and the
  rendezvous on 127.0.0.1, so a local job never listens on or talks to another address.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime as _dt
import gzip
import json
import logging
import os
import signal
import socket
import sys
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

from magneton.graphdb.model import (
    CollectiveTimes,
    DistInfo,
    FrameRecord,
    KernelRecord,
    MagnetonError,
    ModuleRecord,
    OpRecord,
    PowerSeries,
    Profile,
    RunInfo,
    TensorRecord,
    split_stored_config,
    stored_config,
)
from magneton.graphdb.vocab import is_collective
from magneton.tracer.record import defer_sigint

SHARD_FORMAT = "magneton-shard"
SHARD_VERSION = 1
SHARD_SUFFIX = ".shard.json.gz"


def rank_run_name(job: str, rank: int) -> str:
    return f"{job}/rank{rank}"


# --------------------------------------------------------------------------------------
# Shards: one rank's recording as gzipped JSON
# --------------------------------------------------------------------------------------


@dataclass
class Shard:
    """One rank's result: a profile (status ok) or a failed RunInfo with its error."""

    job: str
    rank: int
    world_size: int
    run: RunInfo
    profile: Profile | None = None
    path: str = ""  # where it was read from (not serialized)

    @property
    def ok(self) -> bool:
        return self.profile is not None and self.run.status == "ok"


def _known(cls: type, d: dict) -> Any:
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in d.items() if k in names})


def profile_to_dict(profile: Profile) -> dict:
    """Plain JSON-able dict of a Profile, including the in-memory `windows_ns`. Typed
    metadata (`dist`) travels as config rows, as in the DB, so the shard format is the same
    for every reader."""
    d = dataclasses.asdict(profile)
    d.pop("dist", None)
    d["config"] = stored_config(profile)
    return d


def profile_from_dict(d: dict) -> Profile:
    """Inverse of `profile_to_dict`; unknown keys (a newer writer) are ignored."""
    ops = []
    for o in d.get("ops", []):
        op = _known(OpRecord, o)
        op.windows_ns = [(int(a), int(b)) for a, b in op.windows_ns]
        ops.append(op)
    power = []
    for s in d.get("power", []):
        ps = _known(PowerSeries, s)
        ps.gaps = [(int(a), int(b)) for a, b in ps.gaps]
        power.append(ps)
    config, dist = split_stored_config({str(k): str(v) for k, v in d.get("config", {}).items()})
    return Profile(
        run=_known(RunInfo, d["run"]),
        ops=ops,
        tensors=[_known(TensorRecord, t) for t in d.get("tensors", [])],
        modules=[_known(ModuleRecord, m) for m in d.get("modules", [])],
        frames=[_known(FrameRecord, f) for f in d.get("frames", [])],
        kernels=[_known(KernelRecord, k) for k in d.get("kernels", [])],
        config=config,
        power=power,
        dist=dist,
    )


def shard_path(shard_dir: str | Path, rank: int) -> Path:
    return Path(shard_dir) / f"rank{rank}{SHARD_SUFFIX}"


def write_shard(path: str | Path, shard: Shard) -> Path:
    """Write atomically: a reader (or a rank killed mid-write) never sees half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {
        "format": SHARD_FORMAT,
        "version": SHARD_VERSION,
        "job": shard.job,
        "rank": shard.rank,
        "world_size": shard.world_size,
        "run": dataclasses.asdict(shard.run),
        "profile": profile_to_dict(shard.profile) if shard.profile is not None else None,
    }
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with gzip.open(tmp, "wt", encoding="utf-8", compresslevel=5) as f:
        json.dump(doc, f, separators=(",", ":"))
    os.replace(tmp, path)
    return path


def read_shard(path: str | Path) -> Shard:
    path = Path(path)
    try:
        with gzip.open(path, "rt", encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, EOFError, ValueError) as e:
        raise MagnetonError(f"{path} is not a readable Magneton shard ({e})") from None
    if not isinstance(doc, dict) or doc.get("format") != SHARD_FORMAT:
        raise MagnetonError(f"{path} is not a Magneton shard")
    if int(doc.get("version", 0)) > SHARD_VERSION:
        raise MagnetonError(
            f"{path} was written by a newer Magneton (shard version {doc['version']}); upgrade"
        )
    run = _known(RunInfo, doc["run"])
    profile = profile_from_dict(doc["profile"]) if doc.get("profile") else None
    return Shard(
        job=str(doc["job"]),
        rank=int(doc["rank"]),
        world_size=int(doc["world_size"]),
        run=profile.run if profile is not None else run,
        profile=profile,
        path=str(path),
    )


def find_shards(paths: list[str | Path]) -> list[Path]:
    """Shard files named by `paths`: files as given, directories searched recursively."""
    out: list[Path] = []
    for p in paths:
        p = Path(p)
        if p.is_dir():
            found = sorted(p.rglob(f"*{SHARD_SUFFIX}"))
            if not found:
                raise MagnetonError(f"no shards (*{SHARD_SUFFIX}) under {p}")
            out.extend(found)
        elif p.is_file():
            out.append(p)
        else:
            raise MagnetonError(f"no such shard file or directory: {p}")
    return list(dict.fromkeys(out))


def default_shard_dir(db: str | Path, job: str) -> Path:
    """DIR/shards/<job> next to the DB (job names may hold '/', hence the quoting)."""
    base = Path(db)
    if base.is_file():
        base = base.parent
    return base / "shards" / quote(job, safe="")


# --------------------------------------------------------------------------------------
# Merging shards into the DB
# --------------------------------------------------------------------------------------


@dataclass
class MergedRun:
    run: str
    rank: int
    status: str
    error: str = ""
    ops: int = 0
    time_s: float = 0.0
    energy_j: float = 0.0
    energy_method: str = ""
    power_source: str = ""


def merge_shards(
    db: Any,
    shards: list[Shard],
    *,
    replace: bool = False,
    world_sizes: dict[str, int] | None = None,
) -> list[MergedRun]:
    """Load shards into the DB (a path or an open ProfileDB), one writer, all or nothing on
    name conflicts: with `replace=False` an existing run of the same name aborts the merge
    before anything is written. With `replace=True` existing runs are replaced, and runs
    `JOB/rank<r>` with r >= the job's world size (left over from a bigger earlier job of
    that name) are deleted so the job is not mixed with stale ranks."""
    by_name: dict[str, Shard] = {}
    for s in shards:
        name = s.run.name
        if name in by_name:
            raise MagnetonError(
                f"two shards for run '{name}': {by_name[name].path} and {s.path}; merge one"
            )
        by_name[name] = s
    sizes = dict(world_sizes or {})
    for s in shards:
        sizes.setdefault(s.job, s.world_size)
    out: list[MergedRun] = []
    with _opened(db) as handle:
        if not replace:
            taken = [n for n in by_name if handle.has_run(n)]
            if taken:
                raise MagnetonError(
                    f"run(s) already in the DB: {', '.join(sorted(taken))}; pass --replace "
                    "or record under another --run name"
                )
        with defer_sigint():
            if replace:
                for job, size in sizes.items():
                    for r in _existing_ranks(handle, job):
                        if r >= size:
                            handle.delete_run(rank_run_name(job, r))
            for name, s in sorted(by_name.items(), key=lambda kv: (kv[1].job, kv[1].rank)):
                if s.profile is not None:
                    handle.save_profile(s.profile, replace=replace)
                    r = s.profile.run
                    out.append(
                        MergedRun(
                            run=name,
                            rank=s.rank,
                            status=r.status,
                            ops=len(s.profile.ops),
                            time_s=r.time_s,
                            energy_j=r.energy_j,
                            energy_method=r.energy_method,
                            power_source=r.power_source,
                        )
                    )
                else:
                    s.run.status = "failed"
                    handle.save_failed_run(s.run, replace=replace)
                    out.append(MergedRun(run=name, rank=s.rank, status="failed", error=s.run.error))
    return out


@contextlib.contextmanager
def _opened(db: Any) -> Iterator[Any]:
    """An open ProfileDB as is, or a path opened (and closed) for the block."""
    if hasattr(db, "save_profile"):
        yield db
        return
    from magneton.graphdb import open_db

    handle = open_db(db)
    try:
        yield handle
    finally:
        handle.close()


def _existing_ranks(handle: Any, job: str) -> list[int]:
    prefix = f"{job}/rank"
    ranks = []
    for row in handle.list_runs():
        tail = row.name[len(prefix) :] if row.name.startswith(prefix) else ""
        if tail.isdigit():
            ranks.append(int(tail))
    return sorted(ranks)


# --------------------------------------------------------------------------------------
# Collectives: what the recorder's modes see of them, and what they cannot see
# --------------------------------------------------------------------------------------


@dataclass
class CollectiveEvent:
    call: int  # which entry call (0-based, warmup first)
    name: str
    group: str  # process group name ("0" = default group)
    group_size: int
    start_ns: int  # issued (perf_counter_ns)
    end_ns: int  # dispatcher returned (the op's own issue cost)
    done_ns: int = 0  # completed (end of our wait); 0 = unknown (async, waited on later)
    sync: bool = False  # the Python caller waits right away; we waited inside the window
    wait_ns: int = 0  # time in work.wait() (sync only)
    wait_cpu_ns: int = 0  # process CPU time during that wait
    nbytes: int = 0


def _c10d_file() -> str:
    import torch.distributed.distributed_c10d as c10d

    return c10d.__file__  # (imports are cached: this is a dict lookup after the first)


class _CollectiveCall:
    """Stands in for a collective operator inside a recorder mode's `__torch_dispatch__`:
    calling it runs the operator through `CollectiveRecorder.run` (which may wait); every
    other attribute (`_schema`, `name`, ...) is the operator's, so the mode records it
    exactly as it would record the operator itself."""

    __slots__ = ("_op", "_recorder")

    def __init__(self, op: Any, recorder: CollectiveRecorder):
        self._op = op
        self._recorder = recorder

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._recorder.run(self._op, args, kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._op, name)


class CollectiveRecorder:
    """Sees every collective the recorder's dispatch modes see, and nothing else.

    It registers, with `torch.library.register_torch_dispatch`, a rule for each collective
    operator (namespaces c10d and _c10d_functional) on the recorder's mode classes
    (TimingCapture, StructureCapture). The rule hands the mode a `_CollectiveCall` in
    place of the operator, so the mode's own window around "the operator" covers what
    `run` does: issue, and for collectives the caller waits on at once, the wait. A second
    dispatch mode would do the same but cost every operator of the run another Python
    dispatch inside its timed window (measured on the c9 MLP: +33% CPU time per call over
    the timing mode alone); rules cost nothing for operators that are not collectives.
    """

    def __init__(self) -> None:
        self.call = -1  # which entry call is running (set by the rank's entry wrapper)
        self.wait_all = False  # structure pass: settle values before they are summarized
        self.events: list[CollectiveEvent] = []
        self._libs: list[Any] = []
        self._lock = threading.Lock()

    # -- registration ------------------------------------------------------------------

    def install(self, mode_classes: list[type]) -> CollectiveRecorder:
        import torch

        names = sorted(
            n
            for n in torch._C._dispatch_get_all_op_names()
            if "." not in n and is_collective(n) and not n.endswith("::check_for_nan")
        )
        libs: dict[str, Any] = {}
        for qualname in names:
            ns = qualname.split("::", 1)[0]
            if ns not in libs:
                libs[ns] = torch.library.Library(ns, "FRAGMENT")
            for cls in mode_classes:
                torch.library.register_torch_dispatch(qualname, cls, self._rule, lib=libs[ns])
        self._libs = list(libs.values())
        return self

    def remove(self) -> None:
        for lib in self._libs:
            with contextlib.suppress(Exception):
                lib._destroy()  # drops the rules registered through it
        self._libs = []

    def __enter__(self) -> CollectiveRecorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()

    def _rule(self, mode: Any, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        return type(mode).__torch_dispatch__(mode, _CollectiveCall(func, self), types, args, kwargs)

    # -- one collective ----------------------------------------------------------------

    def run(self, func: Any, args: tuple, kwargs: dict) -> Any:
        import torch
        import torch.distributed as dist
        from torch.utils._pytree import tree_flatten

        flat = tree_flatten((args, kwargs))[0]
        group, size = _group_of(flat, torch, dist)
        nbytes = sum(a.numel() * a.element_size() for a in flat if isinstance(a, torch.Tensor))
        t0 = time.perf_counter_ns()
        out = func(*args, **kwargs)
        t1 = time.perf_counter_ns()
        ev = CollectiveEvent(
            call=self.call,
            name=func._schema.name,
            group=group,
            group_size=size,
            start_ns=t0,
            end_ns=t1,
            nbytes=nbytes,
        )
        work = _work_of(out, getattr(dist.distributed_c10d, "Work", None), torch)
        if work is not None:
            if self.wait_all or _caller_waits_now(_c10d_file(), dist):
                c0, w0 = time.process_time_ns(), time.perf_counter_ns()
                work.wait()
                w1 = time.perf_counter_ns()
                ev.sync = True
                ev.wait_ns = w1 - w0
                ev.wait_cpu_ns = time.process_time_ns() - c0
                ev.done_ns = w1
        else:
            ev.done_ns = t1  # no work handle: the op itself was the whole collective
        with self._lock:
            self.events.append(ev)
        return out


def _group_of(flat: list, torch: Any, dist: Any) -> tuple[str, int]:
    """(name, size) of the process group a collective's arguments name."""
    pg_cls = getattr(dist, "ProcessGroup", None)
    for a in flat:
        try:
            if isinstance(a, torch.ScriptObject) and pg_cls is not None:
                pg = pg_cls.unbox(a)
            elif isinstance(a, str) and a:  # functional collectives name their group
                pg = dist.distributed_c10d._resolve_process_group(a)
            else:
                continue
            return (str(pg.group_name), int(pg.size()))
        except Exception:  # a ReduceOp, or a string that names no group
            continue
    return ("", 0)


def _work_of(out: Any, work_cls: Any, torch: Any) -> Any:
    """The Work handle a c10d op returned (boxed as a ScriptObject), or None."""
    if work_cls is None or not hasattr(work_cls, "unbox"):
        return None
    items = out if isinstance(out, (tuple, list)) else (out,)
    for o in items:
        if isinstance(o, torch.ScriptObject):
            try:
                return work_cls.unbox(o)
            except Exception:
                continue
    return None


def _caller_waits_now(c10d_file: str, dist: Any) -> bool:
    """Whether the Python c10d wrapper that issued this op will `wait()` right after it
    returns (`async_op=False`), so waiting here changes nothing but where the time lands.
    Never inside a coalescing manager, whose works complete together at its end."""
    f = sys._getframe(1)
    depth = 0
    while f is not None and depth < 64:
        if f.f_code.co_filename == c10d_file:
            if "async_op" not in f.f_code.co_varnames:
                f = f.f_back
                depth += 1
                continue
            if f.f_locals.get("async_op") is not False:
                return False
            world = getattr(dist.distributed_c10d, "_world", None)
            coalescing = getattr(world, "pg_coalesce_state", None)
            return not coalescing
        f = f.f_back
        depth += 1
    return False


# --------------------------------------------------------------------------------------
# Recording one rank
# --------------------------------------------------------------------------------------


def env_rank() -> tuple[int, int, int] | None:
    """(rank, world_size, local_rank) from the launcher's environment, or None."""
    rank, world = os.environ.get("RANK"), os.environ.get("WORLD_SIZE")
    if rank is None or world is None or not rank.isdigit() or not world.isdigit():
        return None
    local = os.environ.get("LOCAL_RANK", rank)
    return int(rank), int(world), int(local) if local.isdigit() else int(rank)


class _Terminated(BaseException):
    """SIGTERM from the launcher while this rank may still need its peers."""


class _SigtermPolicy:
    """Raise on SIGTERM while measuring; defer it once the last measured call returned."""

    def __init__(self) -> None:
        self.deferring = False
        self.pending = False
        self._old: Any = None

    def _handler(self, signum, frame):
        if self.deferring:
            self.pending = True
            return
        raise _Terminated()

    def __enter__(self) -> _SigtermPolicy:
        if threading.current_thread() is threading.main_thread():
            self._old = signal.signal(signal.SIGTERM, self._handler)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._old is not None:
            signal.signal(signal.SIGTERM, self._old)


@dataclass
class _CallLog:
    """Per entry call: the entry's own wall window, CPU time and the barrier release."""

    start_ns: list[int] = field(default_factory=list)
    end_ns: list[int] = field(default_factory=list)
    cpu_ns: list[int] = field(default_factory=list)
    ref_ns: list[int] = field(default_factory=list)  # right after the pre-call barrier


def _make_entry(
    entry_fn: Callable,
    recorder: CollectiveRecorder,
    total_calls: int,
    structure_call: int,
    policy: _SigtermPolicy,
    log: _CallLog,
) -> Callable:
    import torch.distributed as dist
    from torch.utils._python_dispatch import _disable_current_modes

    state = {"n": 0}

    def magneton_rank_entry(*args: Any, **kwargs: Any) -> Any:
        n = state["n"]
        state["n"] += 1
        recorder.call = n
        recorder.wait_all = n == structure_call
        if dist.is_available() and dist.is_initialized():
            # outside every dispatch mode: not an operator of the run, not in its window
            with _disable_current_modes():
                dist.barrier()
        log.ref_ns.append(time.perf_counter_ns())
        c0 = time.process_time_ns()
        t0 = time.perf_counter_ns()
        try:
            return entry_fn(*args, **kwargs)
        finally:
            log.end_ns.append(time.perf_counter_ns())
            log.start_ns.append(t0)
            log.cpu_ns.append(time.process_time_ns() - c0)
            recorder.wait_all = False
            if n + 1 >= total_calls:
                policy.deferring = True  # no peer is needed any more

    return magneton_rank_entry


def _collective_times(
    profile: Profile, events: list[CollectiveEvent], timing_calls: list[int]
) -> tuple[list[CollectiveTimes], list[int]]:
    """Per-iteration issue/completion times of each collective op (timing pass), and the
    timing iterations (indices into `timing_calls`) whose collectives lined up with the
    structure pass's operators; only those are kept."""
    coll_ops = [op for op in profile.ops if is_collective(op.name)]
    per_call: dict[int, list[CollectiveEvent]] = {c: [] for c in timing_calls}
    for ev in events:
        if ev.call in per_call:
            per_call[ev.call].append(ev)
    usable = [
        c
        for c in timing_calls
        if len(per_call[c]) == len(coll_ops)
        and all(e.name == op.name for e, op in zip(per_call[c], coll_ops, strict=True))
    ]
    rows = []
    for k, op in enumerate(coll_ops):
        evs = [per_call[c][k] for c in usable]
        if not evs:
            first = next((e for e in events if e.name == op.name), None)
            group, size = (first.group, first.group_size) if first else ("", 0)
        else:
            group, size = evs[0].group, evs[0].group_size
        rows.append(
            CollectiveTimes(
                op=op.idx,
                name=op.name,
                group=group,
                group_size=size,
                sync=bool(evs and evs[0].sync),
                size_bytes=evs[0].nbytes if evs else 0,
                start_ns=[e.start_ns for e in evs],
                end_ns=[e.end_ns for e in evs],
                done_ns=[e.done_ns for e in evs],
                wait_ns=[e.wait_ns for e in evs],
                wait_cpu_ns=[e.wait_cpu_ns for e in evs],
            )
        )
    return rows, [timing_calls.index(c) for c in usable]


def record_rank(
    script: str | Path,
    *,
    job: str,
    shard_dir: str | Path,
    entry: str = "main",
    setup: str = "setup",
    options: Any = None,
) -> Shard:
    """Record this process's rank of a launched job (RANK/WORLD_SIZE in the environment)
    as run `job/rank<r>` and write its shard. Failures are written as failed shards and
    re-raised as MagnetonError."""
    from magneton.tracer.record import RecordOptions, load_script, record_callable

    opts = options or RecordOptions()
    ids = env_rank()
    if ids is None:
        raise MagnetonError(
            "RANK/WORLD_SIZE are not set: start ranks with `magneton record --nproc N` or "
            "torchrun (`torchrun --nproc-per-node N -m magneton.tracer.distributed ...`)"
        )
    rank, world, local = ids
    if opts.replay:
        raise MagnetonError(
            "--replay cannot record a multi-rank job: replaying a collective on one rank "
            "blocks waiting for peers that are not replaying"
        )
    script = str(Path(script).resolve())
    run = rank_run_name(job, rank)
    info = RunInfo(
        name=run,
        script=script,
        entry=entry,
        setup=setup,
        started_at=_dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        status="failed",
        warmup=opts.warmup,
        repeat=opts.repeat,
        host=socket.gethostname(),
        rank=rank,
        world_size=world,
    )
    out = shard_path(shard_dir, rank)
    policy = _SigtermPolicy()
    old_argv = sys.argv
    sys.argv = [script]
    try:
        with policy:
            try:
                if not os.path.isfile(script):
                    raise MagnetonError(f"no such script: {script}")
                module = load_script(script)
                entry_fn = getattr(module, entry, None)
                if not callable(entry_fn):
                    raise MagnetonError(f"{script} has no function '{entry}' (use --entry NAME)")
                setup_fn = getattr(module, setup, None) if setup else None
                if setup and setup_fn is None and setup != "setup":
                    raise MagnetonError(f"{script} has no function '{setup}' (use --setup NAME)")
                result = setup_fn() if callable(setup_fn) else None
                args = () if result is None else result if isinstance(result, tuple) else (result,)
                profile = _record_rank_profile(
                    record_callable,
                    entry_fn,
                    args,
                    run=run,
                    opts=opts,
                    script=script,
                    entry=entry,
                    setup=setup if callable(setup_fn) else "",
                    globals_=vars(module),
                    policy=policy,
                    local_rank=local,
                )
                policy.deferring = True
                shard = Shard(
                    job=job, rank=rank, world_size=world, run=profile.run, profile=profile
                )
                write_shard(out, shard)
                return shard
            except _Terminated:
                info.error = (
                    "stopped by the launcher (SIGTERM) while recording: another rank failed "
                    "or the job was stopped"
                )
                policy.deferring = True
                write_shard(out, Shard(job=job, rank=rank, world_size=world, run=info))
                raise MagnetonError(f"rank {rank}: {info.error}", exit_code=143) from None
            except KeyboardInterrupt:
                info.error = "interrupted (Ctrl-C) while recording"
                policy.deferring = True
                write_shard(out, Shard(job=job, rank=rank, world_size=world, run=info))
                raise MagnetonError(f"rank {rank}: {info.error}", exit_code=130) from None
            except MagnetonError as e:
                info.error = str(e)
                policy.deferring = True
                write_shard(out, Shard(job=job, rank=rank, world_size=world, run=info))
                raise
            except Exception as e:
                if os.environ.get("MAGNETON_DEBUG"):
                    traceback.print_exc()
                msg = " ".join(str(e).split()) or "(no message)"
                if len(msg) > 400:
                    msg = msg[:397] + "..."
                info.error = f"{type(e).__name__}{_user_location(e, script)}: {msg}"
                policy.deferring = True
                write_shard(out, Shard(job=job, rank=rank, world_size=world, run=info))
                raise MagnetonError(
                    f"rank {rank}: {os.path.basename(script)} raised {info.error}", exit_code=1
                ) from None
    finally:
        sys.argv = old_argv


def _record_rank_profile(
    record_callable: Callable,
    entry_fn: Callable,
    args: tuple,
    *,
    run: str,
    opts: Any,
    script: str,
    entry: str,
    setup: str,
    globals_: dict,
    policy: _SigtermPolicy,
    local_rank: int,
) -> Profile:
    import torch.distributed as dist
    from magneton.tracer.capture import StructureCapture, TimingCapture

    log = _CallLog()
    total = opts.warmup + 1 + opts.repeat
    with CollectiveRecorder().install([TimingCapture, StructureCapture]) as recorder:
        fn = _make_entry(entry_fn, recorder, total, opts.warmup, policy, log)
        profile = record_callable(
            fn,
            args,
            run=run,
            db=None,
            options=opts,
            script=script,
            entry=entry,
            setup=setup,
            globals_=globals_,
        )
    timing_calls = list(range(opts.warmup + 1, total))
    # the run's time is the entry's own time, without the alignment barrier
    walls = [(log.end_ns[c] - log.start_ns[c]) / 1e9 for c in timing_calls if c < len(log.end_ns)]
    if walls:
        profile.run.time_s = sum(walls) / len(walls)
    profile.run.rank, profile.run.world_size = (
        int(os.environ["RANK"]),
        int(os.environ["WORLD_SIZE"]),
    )
    colls, iterations = _collective_times(profile, recorder.events, timing_calls)
    initialized = dist.is_available() and dist.is_initialized()

    def per_call(values: list[int]) -> list[int]:
        return [values[c] for c in timing_calls if c < len(values)]

    profile.dist = DistInfo(
        rank=profile.run.rank,
        world_size=profile.run.world_size,
        local_rank=local_rank,
        host=profile.run.host,
        initialized=initialized,
        backend=str(dist.get_backend()) if initialized else "",
        master=f"{os.environ.get('MASTER_ADDR', '')}:{os.environ.get('MASTER_PORT', '')}".strip(
            ":"
        ),
        iterations=iterations,
        mismatched_iterations=len(timing_calls) - len(iterations),
        collectives=colls,
        call_start_ns=per_call(log.start_ns),
        call_end_ns=per_call(log.end_ns),
        call_cpu_ns=per_call(log.cpu_ns),
        call_ref_ns=per_call(log.ref_ns),
    )
    return profile


def _user_location(exc: BaseException, script: str) -> str:
    for fr in reversed(traceback.extract_tb(exc.__traceback__)):
        if os.path.abspath(fr.filename) == script:
            return f" at {os.path.basename(fr.filename)}:{fr.lineno}"
    return ""


def _teardown() -> None:
    """Destroy the process group if the script left one (never blocks on dead peers: gloo's
    destroy does not communicate)."""
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()
    except Exception:
        pass


# --------------------------------------------------------------------------------------
# Launching N local ranks (the elastic agent behind torchrun)
# --------------------------------------------------------------------------------------


def free_loopback_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _loopback_ifname() -> str:
    with contextlib.suppress(OSError, AttributeError):
        for _, name in socket.if_nameindex():
            if name in ("lo", "lo0"):
                return name
    return ""


@contextlib.contextmanager
def _quiet_elastic_logs() -> Iterator[None]:
    """The agent logs each SIGTERM it sends and each failure it sees; Magneton reports the
    outcome per rank itself (MAGNETON_DEBUG=1 keeps the agent's lines)."""
    if os.environ.get("MAGNETON_DEBUG"):
        yield
        return
    lg = logging.getLogger("torch.distributed.elastic")
    old = lg.level
    lg.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        lg.setLevel(old)


def _worker_argv(args: argparse.Namespace, shard_dir: Path) -> list[str]:
    argv = [
        "-m",
        "magneton.tracer.distributed",
        str(Path(args.script).resolve()),
        "--job",
        args.run,
        "--shards",
        str(shard_dir),
        "--entry",
        args.entry,
        "--setup",
        args.setup,
        "--warmup",
        str(args.warmup),
        "--repeat",
        str(args.repeat),
        "--power",
        args.power,
        "--interval-ms",
        str(args.interval_ms),
    ]
    if getattr(args, "no_call_paths", False):
        argv.append("--no-call-paths")
    return argv


def _failure_text(failure: Any) -> str:
    code = getattr(failure, "exitcode", None)
    if code is None:
        return "exited without writing its profile"
    if code < 0:
        try:
            sig = signal.Signals(-code).name
        except ValueError:
            sig = f"signal {-code}"
        return f"killed by {sig} before writing its profile"
    return f"exited with code {code} before writing its profile"


def launch(
    args: argparse.Namespace,
    opts: Any,
    *,
    shutdown_timeout_s: int = 30,
) -> list[MergedRun]:
    """Start `args.nproc` ranks on this host, wait for them, merge their shards."""
    import torch.distributed as dist

    if not dist.is_available():
        raise MagnetonError("this PyTorch build has no torch.distributed")
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    nproc = int(args.nproc)
    script = Path(args.script).resolve()
    if not script.is_file():
        raise MagnetonError(f"no such script: {script}")
    if opts.replay:
        raise MagnetonError(
            "--replay cannot record a multi-rank job: replaying a collective on one rank "
            "blocks waiting for peers that are not replaying"
        )
    with _opened(args.db) as handle:
        if not opts.replace:
            taken = [rank_run_name(args.run, r) for r in range(nproc)]
            taken = [n for n in taken if handle.has_run(n)]
            if taken:
                raise MagnetonError(
                    f"run(s) {', '.join(taken)} already exist in the DB; pick another --run "
                    "name or pass --replace"
                )
    shard_dir = default_shard_dir(args.db, args.run)
    shard_dir.mkdir(parents=True, exist_ok=True)
    for old in shard_dir.glob(f"rank*{SHARD_SUFFIX}"):
        old.unlink()  # left over from an aborted attempt: never merge stale ranks

    env_set = {
        "MAGNETON_LAUNCHER": "1",
        "KINETO_LOG_LEVEL": os.environ.get("KINETO_LOG_LEVEL") or "5",  # no USDT lines
        # torchrun's default for more than one rank per node: no thread oversubscription
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS") or "1",
    }
    lo = _loopback_ifname()
    if lo and not os.environ.get("GLOO_SOCKET_IFNAME"):
        env_set["GLOO_SOCKET_IFNAME"] = lo
    from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs

    port = free_loopback_port()
    config = LaunchConfig(
        min_nodes=1,
        max_nodes=1,
        nproc_per_node=nproc,
        run_id=f"magneton-{uuid.uuid4().hex[:8]}",
        rdzv_backend="c10d",
        rdzv_endpoint=f"127.0.0.1:{port}",
        rdzv_configs={"timeout": 120},
        max_restarts=0,
        monitor_interval=0.1,
        start_method="spawn",
        local_addr="127.0.0.1",
        logs_specs=DefaultLogsSpecs(log_dir=os.devnull),
        shutdown_timeout=shutdown_timeout_s,
    )
    failures: dict[int, Any] = {}
    interrupted = False
    saved = {k: os.environ.get(k) for k in env_set}
    os.environ.update(env_set)
    try:
        with _quiet_elastic_logs():
            elastic_launch(config, sys.executable)(*_worker_argv(args, shard_dir))
    except ChildFailedError as e:
        failures = dict(e.failures)
    except KeyboardInterrupt:
        interrupted = True
    except Exception as e:  # rendezvous/agent errors: nothing recorded
        if type(e).__name__ == "SignalException":
            interrupted = True
        else:
            raise MagnetonError(f"could not launch {nproc} ranks: {e}") from None
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v

    shards: list[Shard] = []
    for p in sorted(shard_dir.glob(f"rank*{SHARD_SUFFIX}")):
        with contextlib.suppress(MagnetonError):
            shards.append(read_shard(p))
    have = {s.rank for s in shards}
    for r in range(nproc):
        if r in have:
            continue
        error = (
            "interrupted before writing its profile"
            if interrupted
            else _failure_text(failures.get(r))
        )
        shards.append(
            Shard(
                job=args.run,
                rank=r,
                world_size=nproc,
                run=RunInfo(
                    name=rank_run_name(args.run, r),
                    script=str(script),
                    entry=args.entry,
                    setup=args.setup,
                    started_at=_dt.datetime.now().astimezone().isoformat(timespec="seconds"),
                    status="failed",
                    error=error,
                    warmup=opts.warmup,
                    repeat=opts.repeat,
                    host=socket.gethostname(),
                    rank=r,
                    world_size=nproc,
                ),
            )
        )
    merged = merge_shards(args.db, shards, replace=opts.replace, world_sizes={args.run: nproc})
    for s in shards:
        if s.path:
            with contextlib.suppress(OSError):
                Path(s.path).unlink()
    with contextlib.suppress(OSError):
        shard_dir.rmdir()
        shard_dir.parent.rmdir()  # DIR/shards, when empty
    if interrupted:
        raise MagnetonError(
            f"interrupted; {sum(m.status == 'ok' for m in merged)} of {nproc} ranks recorded",
            exit_code=130,
        )
    return merged


def record_distributed(args: argparse.Namespace, opts: Any) -> int:
    """`magneton record ... --nproc N` (N > 1): launch N local ranks and merge them; inside
    a torchrun worker (RANK/WORLD_SIZE set) record this rank's shard instead."""
    if env_rank() is not None and not os.environ.get("MAGNETON_LAUNCHER"):
        return _worker(
            args.script,
            job=args.run,
            shard_dir=getattr(args, "shards", None) or default_shard_dir(args.db, args.run),
            entry=args.entry,
            setup=args.setup,
            opts=opts,
        )
    merged = launch(args, opts)
    failed = [m for m in merged if m.status != "ok"]
    for m in merged:
        if m.status == "ok":
            print(
                f"recorded run '{m.run}': {m.ops} operators, {m.time_s * 1e3:.2f} ms/call, "
                f"{m.energy_j:.4g} J/call ({m.energy_method}, {m.power_source})"
            )
        else:
            print(f"run '{m.run}' failed: {m.error}")
    print(
        f"{len(merged) - len(failed)} of {len(merged)} ranks recorded as '{args.run}/rank*' "
        f"-> {args.db}"
    )
    if failed:
        others = "the others are in the DB" if len(failed) < len(merged) else "none recorded"
        raise MagnetonError(
            f"{len(failed)} of {len(merged)} ranks failed ({', '.join(m.run for m in failed)}; "
            f"errors kept in the DB, see `magneton runs`); {others}",
            exit_code=1,
        )
    return 0


def _worker(
    script: str, *, job: str, shard_dir: str | Path, entry: str, setup: str, opts: Any
) -> int:
    quiet = bool(os.environ.get("MAGNETON_LAUNCHER"))
    try:
        shard = record_rank(
            script, job=job, shard_dir=shard_dir, entry=entry, setup=setup, options=opts
        )
    except MagnetonError as e:
        if not quiet:  # under `magneton record --nproc` the launcher reports every rank
            print(f"magneton: {e}", file=sys.stderr)
        _teardown()
        return e.exit_code
    _teardown()
    if not quiet:
        r = shard.run
        print(
            f"rank {shard.rank}: recorded '{r.name}' ({len(shard.profile.ops)} operators, "
            f"{r.time_s * 1e3:.2f} ms/call) -> {shard_path(shard_dir, shard.rank)}"
        )
    return 0


# --------------------------------------------------------------------------------------
# Worker command line: python -m magneton.tracer.distributed (what torchrun starts)
# --------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m magneton.tracer.distributed",
        description=(
            "Record this rank of a torch.distributed job (started by torchrun or "
            "`magneton record --nproc`) as run NAME/rank<RANK> and write its shard; load "
            "the shards with `magneton merge --db DIR SHARD_DIR...`."
        ),
    )
    p.add_argument("script")
    # not `--run`: torchrun's own parser (Python 3.11 argparse) takes it for an abbreviation
    # of its `--run-path` even after the script name, and refuses to start
    p.add_argument(
        "--job", required=True, metavar="NAME", help="job name; ranks become NAME/rank<r>"
    )
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--db", help="DB directory; shards go to DB/shards/NAME/")
    where.add_argument("--shards", help="directory for the shards")
    p.add_argument("--entry", default="main")
    p.add_argument("--setup", default="setup")
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--power", default="auto")
    p.add_argument("--interval-ms", type=float, default=5.0)
    p.add_argument("--no-call-paths", action="store_true")
    return p


def main(argv: list[str] | None = None) -> int:
    from magneton.tracer.record import RecordOptions

    a = build_parser().parse_args(argv)
    if a.warmup < 0 or a.repeat < 1:
        print("magneton: --warmup must be >= 0 and --repeat >= 1", file=sys.stderr)
        return 2
    opts = RecordOptions(
        warmup=a.warmup,
        repeat=a.repeat,
        power=a.power,
        interval_s=a.interval_ms / 1000.0,
        call_paths=not a.no_call_paths,
    )
    shard_dir = Path(a.shards) if a.shards else default_shard_dir(a.db, a.job)
    return _worker(
        a.script, job=a.job, shard_dir=shard_dir, entry=a.entry, setup=a.setup, opts=opts
    )


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # The shard is on disk and the process group destroyed; skip the interpreter's
    # teardown of torch (seconds per rank on small machines, during which the launcher
    # waits before it can merge).
    os._exit(code)
