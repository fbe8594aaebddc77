"""Merging shards into the DB: the one writer of a multi-rank job.

Used by the local launcher after its ranks exit and by `magneton merge` for shards
copied from other nodes. Choices, and the failure each prevents:

* All or nothing on name conflicts: without `replace`, an existing run of the same name
  aborts the merge before anything is written, so a re-merge never half-overwrites a job.
* With `replace`, runs `JOB/rank<r>` with r >= the job's world size (left over from a
  bigger earlier job of that name) are deleted, so a job is never mixed with stale ranks.
* Ctrl-C is deferred while writing (`defer_sigint`): an interrupted merge leaves whole
  runs, never a half-saved one.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

from magneton.graphdb.store import DBArg, opened
from magneton.model import MagnetonError
from magneton.tracer.distributed.shards import Shard, rank_run_name
from magneton.tracer.programs.signals import defer_sigint

if TYPE_CHECKING:
    from magneton.graphdb.db import ProfileDB


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
    db: DBArg,
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
    with opened_db(db) as handle:
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
                    info = s.profile.run
                    out.append(
                        MergedRun(
                            run=name,
                            rank=s.rank,
                            status=info.status,
                            ops=len(s.profile.ops),
                            time_s=info.time_s,
                            energy_j=info.energy_j,
                            energy_method=info.energy_method,
                            power_source=info.power_source,
                        )
                    )
                else:
                    s.run.status = "failed"
                    handle.save_failed_run(s.run, replace=replace)
                    out.append(MergedRun(run=name, rank=s.rank, status="failed", error=s.run.error))
    return out


def opened_db(db: DBArg) -> contextlib.AbstractContextManager[ProfileDB]:
    """An open ProfileDB as is, or a path opened for writing (and closed) for the block."""
    return opened(db)


def _existing_ranks(handle: ProfileDB, job: str) -> list[int]:
    prefix = f"{job}/rank"
    ranks = []
    for row in handle.list_runs():
        tail = row.name[len(prefix) :] if row.name.startswith(prefix) else ""
        if tail.isdigit():
            ranks.append(int(tail))
    return sorted(ranks)
