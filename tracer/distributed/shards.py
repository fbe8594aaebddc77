"""Shards: one rank's recording as a gzipped JSON file, written by the rank, read by merge.

Kùzu admits one writer process, so the N ranks of a job never write the DB: each writes a
shard, and one process merges them afterwards (`merge.py`). Choices, and the failure each
prevents:

* Written atomically (temp file + rename): a rank killed mid-write never leaves half a
  shard behind for merge to choke on.
* JSON, not pickle: shards travel between machines, and `magneton merge` must not execute
  whatever a copied file contains.
* A failed rank writes a shard too (its `RunInfo` with the error, no profile), so the
  failure lands in the DB with the other ranks.
* Typed run metadata (`Profile.dist`) travels as the same config rows the DB stores, so
  the shard format did not change when it became typed.
* Read as data from outside (`read_shard`): every field typed and bounded
  (tracer/capture/validate.py), the version an integer, the profile's indices dense and
  its references in range, the inflated JSON within the merge's memory limit; any
  offence is one line and nothing is merged.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from magneton.model import (
    FrameRecord,
    KernelRecord,
    MagnetonError,
    ModuleRecord,
    OpRecord,
    PowerSeries,
    Profile,
    RunInfo,
    TensorRecord,
    gc_paused,
    split_stored_config,
    stored_config,
)

SHARD_FORMAT = "magneton-shard"
SHARD_VERSION = 1
SHARD_SUFFIX = ".shard.json.gz"


def rank_run_name(job: str, rank: int) -> str:
    return f"{job}/rank{rank}"


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
    metadata (`dist`, `energy`) travels as config rows, as in the DB, so the shard format is
    the same for every reader."""
    d = dataclasses.asdict(profile)
    d.pop("dist", None)
    d.pop("energy", None)
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
    config, dist, energy = split_stored_config(
        {str(k): str(v) for k, v in d.get("config", {}).items()}
    )
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
        energy=energy,
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


@gc_paused()  # hundreds of thousands of small dicts, then records: no cycles
def read_shard(path: str | Path, max_bytes: int | None = None) -> Shard:
    """A shard file, every value checked before anything is merged; `max_bytes` bounds
    its JSON text (inflated), so a gzip bomb is refused before it fills the memory."""
    path = Path(path)
    doc = _load(path, max_bytes)
    if not isinstance(doc, dict) or doc.get("format") != SHARD_FORMAT:
        raise MagnetonError(f"{path} is not a Magneton shard")
    from magneton.tracer.capture.validate import BadValue, check_profile, check_record, integer

    try:  # "version": "abc" or null was a traceback
        version = integer(doc.get("version"), "version", low=1)
    except BadValue as e:
        raise MagnetonError(f"{path}: {e}; nothing was merged") from None
    if version > SHARD_VERSION:
        raise MagnetonError(
            f"{path} was written by a newer Magneton (shard version {version}); upgrade"
        )

    # Every value is checked here, before anything is merged (tracer/capture/validate.py): a
    # shard is a file that travelled between machines, and a rank "zero" or a NaN energy
    # used to crash the merge or be stored as an ok run that every later load called
    # damaged.
    try:
        if not isinstance(doc.get("job"), str) or not doc["job"]:
            raise BadValue(f"job: expected a non-empty string, got {doc.get('job')!r:.40}")
        rank = integer(doc.get("rank"), "rank", low=0)
        world = integer(doc.get("world_size"), "world_size", low=1)
        if rank >= world:
            raise BadValue(f"rank: {rank} is not below world_size {world}")
        if not isinstance(doc.get("run"), dict):
            raise BadValue(f"run: expected an object, got {doc.get('run')!r:.40}")
        if doc.get("profile") is not None and not isinstance(doc["profile"], dict):
            raise BadValue(f"profile: expected an object, got {doc['profile']!r:.40}")
        run = _known(RunInfo, doc["run"])
        check_record(run, "run")
    except BadValue as e:
        raise MagnetonError(f"{path}: {e}; nothing was merged") from None
    except (TypeError, ValueError, KeyError, AttributeError) as e:
        raise MagnetonError(f"{path} is not a valid Magneton shard ({e})") from None
    try:
        profile = profile_from_dict(doc["profile"]) if doc.get("profile") else None
    except (TypeError, ValueError, KeyError, AttributeError) as e:
        raise MagnetonError(f"{path} is not a valid Magneton shard ({e})") from None
    if profile is not None:
        check_profile(profile, f"{path}: profile", stored="merged")
        _check_indices(profile, path)
    return Shard(
        job=doc["job"],
        rank=rank,
        world_size=world,
        run=profile.run if profile is not None else run,
        profile=profile,
        path=str(path),
    )


def _load(path: Path, max_bytes: int | None) -> Any:
    try:
        with gzip.open(path, "rb") as f:
            raw = f.read() if max_bytes is None else f.read(max_bytes + 1)
        if max_bytes is not None and len(raw) > max_bytes:
            raise MagnetonError(
                f"{path}: its JSON is larger than {max_bytes >> 20} MB, more than the merge's "
                "memory limit allows (--memory-mb raises it); nothing was merged",
                exit_code=1,
            )
        return json.loads(raw)
    except (OSError, EOFError, ValueError) as e:
        raise MagnetonError(f"{path} is not a readable Magneton shard ({e})") from None
    except RecursionError:
        raise MagnetonError(f"{path} is not a readable Magneton shard (nested too deep)") from None


def _check_indices(profile: Profile, path: Path) -> None:
    """Dense indices and references in range (duplicate op indices, an input naming a
    tensor that does not exist were tracebacks in the merge's write)."""
    from magneton.graphdb.codec import check_structure

    try:
        check_structure(profile)
    except (ValueError, IndexError) as e:
        raise MagnetonError(f"{path}: profile: {e}; nothing was merged") from None


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
