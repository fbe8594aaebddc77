"""A distributed job's typed facts: a rank's place and collective timings, and which ranks
a job diff's finding concerns."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from typing import Any

from .jsonfields import pick_fields

# --- Distributed job info ---
# What a rank of a distributed job recorded besides its operators: where it ran, how it
# was launched and when each collective started, completed and was waited on. Typed here
# rather than read back as JSON strings from `Profile.config`; the DB and shard files
# still store it as `dist.*` config rows (`to_config`/`from_config`), so neither format
# changed.

DIST_CONFIG_PREFIX = "dist."  # no knob uses it, so config diffs never see these rows
_CALL_CLOCK = "time.perf_counter_ns (CLOCK_MONOTONIC: shared by processes of one host)"


@dataclass
class CollectiveTimes:
    """One collective operator of a rank, with its times in each usable timing iteration.

    Lists are per iteration (`DistInfo.iterations`), all in `perf_counter_ns`. `done_ns`
    is when the work completed (0 when unknown), `wait_ns` how long the rank waited for
    it; `sync` says the caller waited at once (no overlap with compute)."""

    op: int  # OpRecord.idx
    name: str
    group: str = ""
    group_size: int = 0
    sync: bool = False
    size_bytes: int = 0
    start_ns: list[int] = field(default_factory=list)
    end_ns: list[int] = field(default_factory=list)
    done_ns: list[int] = field(default_factory=list)
    wait_ns: list[int] = field(default_factory=list)
    wait_cpu_ns: list[int] = field(default_factory=list)

    def to_json(self) -> dict:
        return {
            "op": self.op,
            "name": self.name,
            "group": self.group,
            "group_size": self.group_size,
            "sync": self.sync,
            "bytes": self.size_bytes,
            "start_ns": self.start_ns,
            "end_ns": self.end_ns,
            "done_ns": self.done_ns,
            "wait_ns": self.wait_ns,
            "wait_cpu_ns": self.wait_cpu_ns,
        }

    @classmethod
    def from_json(cls, d: dict) -> CollectiveTimes:
        def ints(key: str) -> list[int]:
            return [int(x) for x in d.get(key, [])]

        return cls(
            op=int(d["op"]),
            name=str(d["name"]),
            group=str(d.get("group", "")),
            group_size=int(d.get("group_size", 0)),
            sync=bool(d.get("sync")),
            size_bytes=int(d.get("bytes", 0)),
            start_ns=ints("start_ns"),
            end_ns=ints("end_ns"),
            done_ns=ints("done_ns"),
            wait_ns=ints("wait_ns"),
            wait_cpu_ns=ints("wait_cpu_ns"),
        )


@dataclass
class DistInfo:
    """A rank's place in its job and the timings of its timing-pass iterations.

    `call_*_ns` are per timing iteration of the entry function: its start and end, its
    CPU time, and `call_ref_ns` the release from the barrier before it (the common
    reference point that makes the ranks' timelines comparable)."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    host: str = ""
    initialized: bool = False  # whether the script had a process group
    backend: str = ""  # of that process group ("" when none)
    master: str = ""  # MASTER_ADDR:MASTER_PORT
    launcher: str = ""  # "torchrun" | "slurm": whose environment named the rank
    job_id: str = ""  # the launcher's job id (TORCHELASTIC_RUN_ID, SLURM_JOB_ID)
    iterations: list[int] = field(default_factory=list)  # usable timing iterations
    mismatched_iterations: int = 0  # iterations whose collectives did not line up
    collectives: list[CollectiveTimes] = field(default_factory=list)
    call_start_ns: list[int] = field(default_factory=list)
    call_end_ns: list[int] = field(default_factory=list)
    call_cpu_ns: list[int] = field(default_factory=list)
    call_ref_ns: list[int] = field(default_factory=list)

    def to_config(self) -> dict[str, str]:
        """The `dist.*` config rows this info is stored as (DB and shard files)."""

        def dumps(doc: dict) -> str:
            return json.dumps(doc, separators=(",", ":"))

        p = DIST_CONFIG_PREFIX
        cfg = {
            p + "collectives": dumps(
                {
                    "iterations": self.iterations,
                    "mismatched_iterations": self.mismatched_iterations,
                    "ops": [c.to_json() for c in self.collectives],
                }
            ),
            p + "calls": dumps(
                {
                    "start_ns": self.call_start_ns,
                    "end_ns": self.call_end_ns,
                    "cpu_ns": self.call_cpu_ns,
                    "ref_ns": self.call_ref_ns,
                    "clock": _CALL_CLOCK,
                }
            ),
            p + "rank": str(self.rank),
            p + "world_size": str(self.world_size),
            p + "local_rank": str(self.local_rank),
            p + "host": self.host,
            p + "initialized": str(self.initialized),
        }
        if self.backend:
            cfg[p + "backend"] = self.backend
        cfg[p + "master"] = self.master
        if self.launcher:
            cfg[p + "launcher"] = self.launcher
        if self.job_id:
            cfg[p + "job_id"] = self.job_id
        return cfg

    @classmethod
    def from_config(cls, config: dict[str, str]) -> DistInfo | None:
        """Inverse of `to_config`; None when the rows are not there (not a rank)."""
        p = DIST_CONFIG_PREFIX
        if not any(k.startswith(p) for k in config):
            return None
        colls = json.loads(config.get(p + "collectives") or "{}")
        calls = json.loads(config.get(p + "calls") or "{}")

        def ints(doc: dict, key: str) -> list[int]:
            return [int(x) for x in doc.get(key, [])]

        return cls(
            rank=int(config.get(p + "rank", "0")),
            world_size=int(config.get(p + "world_size", "1")),
            local_rank=int(config.get(p + "local_rank", "0")),
            host=config.get(p + "host", ""),
            initialized=config.get(p + "initialized") == "True",
            backend=config.get(p + "backend", ""),
            master=config.get(p + "master", ""),
            launcher=config.get(p + "launcher", ""),
            job_id=config.get(p + "job_id", ""),
            iterations=ints(colls, "iterations"),
            mismatched_iterations=int(colls.get("mismatched_iterations", 0)),
            collectives=[CollectiveTimes.from_json(r) for r in colls.get("ops", [])],
            call_start_ns=ints(calls, "start_ns"),
            call_end_ns=ints(calls, "end_ns"),
            call_cpu_ns=ints(calls, "cpu_ns"),
            call_ref_ns=ints(calls, "ref_ns"),
        )


@dataclass
class CollectiveInfo:
    """Collectives of one rank with no counterpart on the other side (job diffs)."""

    count: int
    phases: dict[str, int]  # phase of the issuing API ("shadow", ...) -> collectives
    ops: list[int]
    energy_j: float
    time_s: float
    measured_wait_s: float  # per call, in work.wait() (measured)
    busy_wait_share: float | None  # share of that wait that burned CPU

    def to_json(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_json(cls, d: dict) -> CollectiveInfo:
        return cls(**pick_fields(cls, d))


_JOB_KEYS = ("rank", "runs", "collectives", "saving_basis", "rank_time_s", "rank_energy_j", "notes")


@dataclass
class JobInfo:
    """Which ranks of two multi-rank jobs a finding concerns, and the ranks' totals.
    Its keys are written into the JSON "divergence" object (the contract since job diffs
    existed); keys left None are not written."""

    rank: int | None = None
    runs: dict[str, str] | None = None  # side -> the rank's run ("job/rank0")
    collectives: CollectiveInfo | None = None
    saving_basis: str | None = None  # how the saving of a redundant collective is priced
    rank_time_s: dict[str, float] | None = None  # side -> the rank's time per call
    rank_energy_j: dict[str, float] | None = None
    notes: list[str] | None = None  # what could not be compared

    def to_json(self) -> dict:
        d: dict[str, Any] = {}
        for k in _JOB_KEYS:
            v = getattr(self, k)
            if v is not None:
                d[k] = v.to_json() if isinstance(v, CollectiveInfo) else v
        return d

    @classmethod
    def from_json(cls, d: dict) -> JobInfo | None:
        """The job keys of a JSON "divergence", or None when it has none."""
        kw = {k: d[k] for k in _JOB_KEYS if d.get(k) is not None}
        if not kw:
            return None
        if "collectives" in kw:
            kw["collectives"] = CollectiveInfo.from_json(kw["collectives"])
        return cls(**kw)
