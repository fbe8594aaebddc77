"""`magneton import-trace FILE_OR_DIR --db DIR --run NAME`: load torch.profiler traces.

A file becomes run NAME; a directory of per-rank traces (one file per rank, rank from each
file's `distributedInfo`, else from a `rank<N>` in its name) becomes job NAME with runs
`NAME/rank<r>`, stored through the same merge as a multi-rank recording
(tracer/distributed.py), so `magneton diff NAME OTHER` compares the jobs rank by rank.
Every trace is parsed and priced before anything is written: a bad file in a directory
leaves the DB untouched. What is read and how energy is obtained: tracer/kineto.py,
docs/traces.md.
"""

from __future__ import annotations

import argparse

from magneton.graphdb.model import MagnetonError


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
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from magneton.tracer.distributed import Shard, merge_shards, rank_run_name
    from magneton.tracer.kineto import (
        estimate_energy,
        find_trace_files,
        meter_energy,
        profile_from_trace,
        read_trace,
    )

    if args.power and not args.power.startswith("meter:"):
        raise MagnetonError(f"--power must be meter:FILE[@OFFSET_S], not {args.power!r}")
    files = find_trace_files(args.trace)
    per_rank = len(files) > 1 or _is_dir(args.trace)
    traces = [read_trace(f) for f in files]
    if per_rank:
        ranks = [t.rank for t in traces]
        dup = sorted({r for r in ranks if ranks.count(r) > 1})
        if dup:
            raise MagnetonError(f"two traces for rank {dup[0]} in {args.trace}; keep one per rank")
    shards = []
    for tf in traces:
        name = rank_run_name(args.run, tf.rank) if per_rank else args.run
        profile, stats = profile_from_trace(tf, name)
        if not profile.ops:
            raise MagnetonError(f"{tf.path} has no cpu_op or GPU events to import")
        if args.power:
            base = int(tf.doc.get("baseTimeNanoseconds", 0) or 0)
            meter_energy(profile, args.power, base_time_ns=base)
        else:
            estimate_energy(profile, args.model)
        world = max(tf.world_size, len(traces)) if per_rank else tf.world_size
        shards.append(Shard(args.run, tf.rank, world, profile.run, profile, str(tf.path)))
        linked = f"{stats.launched}/{stats.gpu_activities}"
        print(
            f"{tf.path.name} -> run '{name}': {stats.operators} operators "
            f"({stats.cpu_ops} cpu_ops), {stats.kernels} kernels, {stats.memcpys} memcpys, "
            f"{stats.memsets} memsets; launches linked {linked}, from an operator "
            f"{stats.from_operator}; {profile.run.energy_j:.4g} J ({profile.run.energy_method}, "
            f"{profile.run.power_source})"
        )
    merge_shards(args.db, shards, replace=args.replace)
    if per_rank:
        world = shards[0].world_size
        print(f"job '{args.run}': {len(shards)} of {world} ranks imported -> {args.db}")
    return 0


def _is_dir(path: str) -> bool:
    from pathlib import Path

    return Path(path).is_dir()
