"""`magneton record SCRIPT --db DIR --run NAME`: record one workload into the DB."""

from __future__ import annotations

import argparse
import sys

from magneton.model import MagnetonError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "record",
        help="record a script's entry function, or a window of a program (-- python ...)",
        description=(
            "Import SCRIPT as a module, call setup() outside the measured region, then "
            "entry(*setup_result): `warmup` untraced calls, one structure pass (dataflow, "
            "values, call paths) and `repeat` timed calls with the power sampler running. "
            "Or run an unmodified program after `--` (`-- python train.py ARGS`) and record "
            "a window of it: --steps WAIT:WARMUP:ACTIVE or a magneton.window() block."
        ),
    )
    p.add_argument("script", nargs="?", help="Python file defining setup() and main()")
    p.add_argument(
        "command",
        nargs="*",
        help="or, after `--`: an unmodified program, `python SCRIPT ARGS` or `python -m MOD ARGS`"
        " (see docs/programs.md)",
    )
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
    p.add_argument(
        "--steps",
        metavar="WAIT:WARMUP:ACTIVE",
        help="program: record steps (optimizer.step() / magneton.step()), e.g. 1:1:3",
    )
    p.add_argument(
        "--window", default="", help="program: record the magneton.window(NAME) block NAME"
    )
    p.add_argument(
        "--step-fn",
        default="",
        metavar="NAME",
        help="JAX/TensorFlow program: the compiled function whose calls are its steps "
        "(default: the first one it calls twice)",
    )
    p.add_argument(
        "--steady",
        action="store_true",
        help="measure in a steadier environment than the program's own: OMP_WAIT_POLICY="
        "PASSIVE (unless set) and pinned malloc thresholds; the run says so (docs/programs.md)",
    )
    p.add_argument("--nproc", type=int, default=1, help="ranks to launch (torch.distributed)")
    p.add_argument(
        "-q", "--quiet", action="store_true", help="no progress display (phases, iterations)"
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import os

    # where the DB is, fixed before the workload runs: a script may change directories
    args.db_path = os.path.abspath(args.db)
    from magneton.tracer.api import check_torch_fits

    # under `ulimit -v` too low for torch its import aborts the process (exit 134):
    # tried first in a child, and refused in one line
    check_torch_fits()
    if args.steady:  # before anything imports torch (libgomp reads the policy then)
        from magneton.tracer.api import request_steady

        request_steady()
    from magneton.tracer.api import RecordOptions, check_run_name, rank_env, record_script

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
    if args.command or args.steps or args.window:
        return _record_program(args, opts)
    if not args.script:
        raise MagnetonError("nothing to record: give SCRIPT, or `-- python SCRIPT ARGS`")
    # Under torchrun or srun every rank runs this command: each must write its own shard, never
    # the shared Kùzu DB (one writer only).
    if args.nproc > 1 or rank_env() is not None:
        from magneton.tracer.api import JobSpec, record_distributed

        job = JobSpec(args.script, args.db_path, args.run, args.nproc, args.entry, args.setup)
        return record_distributed(job, opts)
    profile = record_script(
        args.script, db=args.db_path, run=args.run, entry=args.entry, setup=args.setup, options=opts
    )

    return _print_recorded(profile, args.db)


def _print_recorded(profile, db: str, described: str = "", advice: str = "") -> int:
    """The run's summary, its repeatability (± CV over timed iterations) and what to do
    when it is unstable or could not be priced; 1 when it cannot be compared."""
    from rich.console import Console

    from magneton.render.report import record_lines, spread_line
    from magneton.tracer.api import unrecorded_thread_warning

    warning = unrecorded_thread_warning(profile)
    if warning:
        print(f"magneton: {warning}", file=sys.stderr)
    out, warn = record_lines(profile, db, described)
    for line in out:
        print(line)
    for line in warn + ([advice] if advice else []):
        print(f"magneton: {line}", file=sys.stderr)
    if profile.run.status != "ok":
        return 1
    line = spread_line(profile, db)
    if line:
        Console(highlight=False, soft_wrap=True, emoji=False).print(line)
    return 0


def _record_program(args: argparse.Namespace, opts) -> int:
    from magneton.tracer.api import parse_command, record_program

    command = ([args.script] if args.script else []) + list(args.command)
    if args.nproc > 1:
        raise MagnetonError("--nproc is not supported with `-- python ...` programs yet")
    if args.warmup != 1 or args.repeat != 3:
        raise MagnetonError("--warmup/--repeat count calls of main(); for programs use --steps")
    spec = parse_command(command, steps=args.steps, window=args.window, step_fn=args.step_fn)
    profile = record_program(spec, db=args.db_path, run=args.run, options=opts)
    advice = few_units_advice(spec, profile, args.db)
    return _print_recorded(profile, args.db, spec.describe(), advice)


def few_units_advice(spec, profile, db: str) -> str:
    """One line when a program run has too few timed units for a stable estimate
    (tracer/programs/program.py `MIN_TIMED_UNITS`), with a command that records enough; "" else.
    An unstable run already got the same command from its spread line."""
    from magneton.tracer.api import MIN_TIMED_UNITS, ProgramSpec, suggested_steps, timed_units

    spec = ProgramSpec.from_config(profile.config) or spec  # names the recorded window
    n = timed_units(spec.schedule)
    if n >= MIN_TIMED_UNITS or profile.energy.spread.unstable:
        return ""
    what = "timed unit" if n == 1 else "timed units"
    base = (
        f"{n} {what} (ACTIVE {spec.schedule.active} minus the structure unit): "
        f"too few for a stable estimate, a diff needs about {MIN_TIMED_UNITS}"
        + (
            " (priced from the traced unit itself, its times include the capture's overhead)"
            if n == 0
            else ""
        )
    )
    return f"{base}; record again with {spec.command(suggested_steps(spec.schedule), profile.run.name, db)}"
