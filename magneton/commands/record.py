"""`magneton record SCRIPT --db DIR --run NAME`: record one workload into the DB."""

from __future__ import annotations

import argparse
import os
import sys

from magneton.graphdb.model import MagnetonError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "record",
        help="run a script's entry function and record it as a run",
        description=(
            "Import SCRIPT as a module, call setup() outside the measured region, then "
            "entry(*setup_result): `warmup` untraced calls, one structure pass (dataflow, "
            "values, call paths) and `repeat` timed calls with the power sampler running."
        ),
    )
    p.add_argument("script", help="Python file defining setup() and main()")
    p.add_argument("--db", required=True, help="profile DB directory (created if missing)")
    p.add_argument("--run", required=True, help="name of this run in the DB")
    p.add_argument("--entry", default="main", help="entry function (default: main)")
    p.add_argument(
        "--setup", default="setup", help="setup function, not measured (default: setup; '' none)"
    )
    p.add_argument("--warmup", type=int, default=1, help="untraced calls first (default 1)")
    p.add_argument("--repeat", type=int, default=3, help="timed calls (default 3)")
    p.add_argument(
        "--power",
        default="auto",
        help="auto | nvml | rapl | meter:FILE[@OFFSET_S] | model[:PROFILE] (default auto)",
    )
    p.add_argument(
        "--interval-ms", type=float, default=5.0, help="power sampling cadence (default 5 ms)"
    )
    p.add_argument("--replay", action="store_true", help="replay each operator for its energy")
    p.add_argument("--replace", action="store_true", help="overwrite a run of the same name")
    p.add_argument(
        "--no-call-paths",
        action="store_true",
        help="skip the profiler-based dispatch chains (faster structure pass)",
    )
    p.add_argument("--nproc", type=int, default=1, help="ranks to launch (torch.distributed)")
    p.add_argument(
        "-q", "--quiet", action="store_true", help="no progress display (phases, iterations)"
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from magneton.tracer.record import RecordOptions, check_run_name, record_script

    check_run_name(args.run)
    if args.warmup < 0 or args.repeat < 1:
        raise MagnetonError("--warmup must be >= 0 and --repeat >= 1")
    opts = RecordOptions(
        warmup=args.warmup,
        repeat=args.repeat,
        power=args.power,
        interval_s=args.interval_ms / 1000.0,
        replay=args.replay,
        replace=args.replace,
        call_paths=not args.no_call_paths,
        progress=not args.quiet,
    )
    # Under torchrun every rank runs this command: each must write its own shard, never
    # the shared Kùzu DB (one writer only).
    if args.nproc > 1 or ("RANK" in os.environ and "WORLD_SIZE" in os.environ):
        from magneton.tracer.distributed import record_distributed

        return record_distributed(args, opts)
    profile = record_script(
        args.script, db=args.db, run=args.run, entry=args.entry, setup=args.setup, options=opts
    )
    from magneton.tracer.record import unrecorded_thread_warning

    warning = unrecorded_thread_warning(profile)
    if warning:
        print(f"magneton: {warning}", file=sys.stderr)
    r = profile.run
    print(
        f"recorded run '{r.name}': {len(profile.ops)} operators, {len(profile.tensors)} tensors, "
        f"{r.time_s * 1e3:.2f} ms/call, {r.energy_j:.4g} J/call "
        f"({r.energy_method}, {r.power_source}) -> {args.db}"
    )
    return 0
