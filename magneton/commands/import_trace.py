"""`magneton import-trace FILE_OR_DIR --db DIR --run NAME`: load torch.profiler traces.

A file becomes run NAME; a directory of per-rank traces (one file per rank, rank from each
file's `distributedInfo`, else from a `rank<N>` in its name) becomes job NAME with runs
`NAME/rank<r>`, stored through the same merge as a multi-rank recording
(tracer/distributed/worker.py), so `magneton diff NAME OTHER` compares the jobs rank by rank.
Every trace is parsed and priced before anything is written: a bad file in a directory
leaves the DB untouched. The parse runs under the import's memory and time limits
(`--memory-mb`, `--time-limit-s`; graphdb/limits.py): a gzip that inflates past a quarter
of the memory limit, or a parse past it, is refused in one line. Neither a single file nor a
job imports torch (a job is stored by tracer/distributed/merge.py, as `magneton merge` stores
one), which keeps a 40k-event import's memory to the trace and the DB. What is read and how
energy is obtained: tracer/capture/kineto.py, docs/traces.md.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from magneton.model import MagnetonError, Profile

if TYPE_CHECKING:  # the parser loads numpy; `magneton --help` should not
    from magneton.tracer.api import ImportStats, TraceFile


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "import-trace",
        help="load torch.profiler (Kineto) JSON traces as runs",
        description=(
            "Load Chrome/Kineto JSON traces written by torch.profiler (gzipped or not). A "
            "directory with one trace per rank becomes one run per rank, NAME/rank<r>. "
            "Imported runs have no tensor values: diff matches them by operator path and "
            "kernel names."
        ),
    )
    p.add_argument("trace", metavar="FILE_OR_DIR", help="trace file, or directory of rank traces")
    p.add_argument("--db", required=True, help="profile DB directory (created if missing)")
    p.add_argument("--run", required=True, help="run name (job name for a directory)")
    p.add_argument(
        "--power",
        default="",
        help="meter:FILE[@OFFSET_S]: a power log (timestamp_s,watts CSV or nvidia-smi "
        "timestamp,power.draw CSV) charged to the trace (measured); default: estimated from "
        "kernel durations and the GPU's model profile",
    )
    p.add_argument(
        "--model",
        default="",
        help="energy model profile for the estimate (default: from the trace's GPU name)",
    )
    p.add_argument("--replace", action="store_true", help="overwrite runs of the same names")
    from magneton.commands.query import add_limit_args

    add_limit_args(p, "import", "4096", "1800")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from magneton.graphdb import import_limits, limited
    from magneton.tracer.api import find_trace_files

    if args.power and not args.power.startswith("meter:"):
        raise MagnetonError(f"--power must be meter:FILE[@OFFSET_S], not {args.power!r}")
    limits = import_limits(args.memory_mb, args.time_limit_s)
    files = find_trace_files(args.trace)
    per_rank = len(files) > 1 or Path(args.trace).is_dir()
    with limited(limits):  # the parse and pricing; the DB write below is not starved
        profiles = _parse_all(files, per_rank, args, limits.memory_mb << 20)
    if not per_rank:
        _save_one(args.db, profiles[next(iter(profiles))][0], args.replace)
        return 0
    # a job is stored the way `magneton merge` stores a recorded one
    from magneton.tracer.api import Shard, merge_shards

    world = max(max(w for _, w, _ in profiles.values()), len(profiles))
    shards = [Shard(args.run, r, world, p.run, p, path) for r, (p, _, path) in profiles.items()]
    merge_shards(args.db, shards, replace=args.replace)
    print(f"job '{args.run}': {len(shards)} of {world} ranks imported -> {args.db}")
    return 0


def _parse_all(files: list[Path], per_rank: bool, args: argparse.Namespace, memory_b: int) -> dict:
    """rank → (profile, world size, path) of every trace, each checked and priced."""
    from magneton.tracer.api import read_trace

    profiles = {}
    for f in files:  # one parsed trace in memory at a time: a job may have many ranks
        # the JSON text may take a quarter of the memory limit: its parse takes the rest
        tf = read_trace(f, max_bytes=memory_b // 4)
        if per_rank and tf.rank in profiles:
            raise MagnetonError(f"two traces for rank {tf.rank} in {args.trace}; keep one per rank")
        name = f"{args.run}/rank{tf.rank}" if per_rank else args.run
        profiles[tf.rank] = (_convert(tf, name, args), tf.world_size, str(tf.path))
    return profiles


def _convert(tf: TraceFile, name: str, args: argparse.Namespace) -> Profile:
    from magneton.tracer.api import estimate_energy, meter_energy, profile_from_trace

    profile, stats = profile_from_trace(tf, name)
    if not profile.ops:
        raise MagnetonError(f"{tf.path} has no cpu_op or GPU events to import")
    if args.power:
        meter_energy(profile, args.power, base_time_ns=tf.base_time_ns)
    else:
        estimate_energy(profile, args.model)
    from magneton.tracer.api import check_profile

    check_profile(profile, str(tf.path))  # a power log's NaN, say: never stored as ok
    collided = stats.collision_line(tf.path.name)
    if collided:  # imported (the operators and kernels are sound), but said where it shows
        print(f"magneton: warning: {collided}", file=sys.stderr)
    run = profile.run
    print(
        f"{tf.path.name} -> run '{name}': {stats.operators} operators "
        f"({stats.cpu_ops} cpu_ops), {stats.kernels} kernels, {stats.memcpys} memcpys, "
        f"{stats.memsets} memsets; launches linked {stats.launched}/{stats.gpu_activities}"
        + _ambiguous(stats)
        + f", from an operator {stats.from_operator}; {run.energy_j:.4g} J "
        f"({run.energy_method}, {run.power_source})"
    )
    return profile


def _ambiguous(stats: ImportStats) -> str:
    """The GPU activities left unlinked because their correlation ids collide
    (tracer/capture/kineto.py): said, so "linked 0/5" is not a mystery."""
    if not stats.ambiguous:
        return ""
    if stats.shared_launches > stats.shared_ids:  # each id carried by several launches
        return f" ({stats.ambiguous} not linked: several launches share their correlation id)"
    return f" ({stats.ambiguous} not linked: several GPU activities share one launch's id)"


def _save_one(db_path: str, profile: Profile, replace: bool) -> None:
    from magneton.graphdb import open_db
    from magneton.tracer.api import defer_sigint

    with open_db(db_path) as db:
        if db.has_run(profile.run.name) and not replace:
            raise MagnetonError(
                f"run(s) already in the DB: {profile.run.name}; pass --replace "
                "or import under another --run name"
            )
        with defer_sigint():  # as `merge` and `record`: a load is never cut half-way
            db.save_profile(profile, replace=replace)
