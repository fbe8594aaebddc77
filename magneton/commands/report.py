"""`magneton report --db DIR RUN`: where one run's energy went, and how it was obtained.

Prints the per-operator energy table (name, calls, time, energy, J/call, avg W, share, method) grouped
by operator or kernel, or by module as a tree to `--depth` levels (repeated blocks folded,
`--top N` children per node); the idle baseline; the power source and method (an estimate
says so and names its model); and the folded module tree (repeated blocks as `h.*`).
`--json` and `--csv` give the same numbers for scripts: the operators' energies always sum
to the run's (with `--top N` the remainder is one "(other N)" row). What is printed is
magneton/render/report.py's (and, for a job, magneton/render/ranks.py's); this module
reads the DB and picks.
"""

from __future__ import annotations

import argparse
import json
import sys

from magneton.model.names import add_full_names
from magneton.render.report import (
    print_rank_breakdowns,
    print_report,
    report_json,
    write_report_csv,
)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "report",
        help="per-operator / module / kernel energy of one run",
        description=(
            "Energy breakdown of one recorded run: a table by operator (or module, kernel), "
            "the idle baseline, the power source and method, and the module tree with "
            "repeated blocks folded."
        ),
    )
    p.add_argument("run", help="run name")
    p.add_argument("--db", required=True, help="profile DB directory")
    fmt = p.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help="print JSON")
    fmt.add_argument("--csv", action="store_true", help="print the table as CSV")
    p.add_argument(
        "--by", choices=("op", "module", "kernel"), default="op", help="grouping (default op)"
    )
    p.add_argument("--top", type=int, default=None, help="show the N costliest rows")
    p.add_argument("--no-fold", action="store_true", help="do not fold repeated blocks")
    p.add_argument(
        "--depth",
        type=int,
        default=4,
        help="module tree depth shown (default 4); with --by module, the table's depth",
    )
    add_full_names(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from magneton.diagnose.api import flatten_tree, module_tree, operator_table, top_rows
    from magneton.graphdb import open_db
    from magneton.model import MagnetonError
    from magneton.model.names import set_full_names

    if args.top is not None and args.top < 1:
        raise MagnetonError("--top must be at least 1")
    set_full_names(args.full_names)
    from magneton.diagnose.api import rank_report
    from magneton.render.ranks import print_rank_report

    per_rank = args.by != "op" or args.top is not None  # asked for a breakdown
    with open_db(args.db, read_only=True) as db:
        # a torch.distributed job is stored as NAME/rank0, NAME/rank1, ...
        job = None if db.has_run(args.run) else rank_report(db, args.run)
        if job is None:
            db.require_run(args.run)
            profile = db.load_profile(args.run)
        elif per_rank and not args.json and not args.csv:
            from magneton.diagnose.api import job_runs

            runs = job_runs(db, args.run)
            ok = {s.rank for s in job.ranks if s.status == "ok"}
            rank_profiles = [db.load_profile(runs[r].name) for r in sorted(ok) if r in runs]
    if job is not None:
        if args.json:
            print(json.dumps(job.to_json(), indent=2))
            return 0
        print_rank_report(job)
        if per_rank and not args.csv:
            print_rank_breakdowns(rank_profiles, args)
        return 0
    if profile.run.status != "ok":
        raise MagnetonError(
            f"run '{args.run}' is {profile.run.status}"
            + (f": {profile.run.error}" if profile.run.error else "")
            + "; record it again"
        )
    from magneton.model.wording import unrecorded_threads_warning

    warning = unrecorded_threads_warning(profile.config)
    if warning:  # the totals below leave that work out
        print(f"magneton: {warning}", file=sys.stderr)
    total = profile.run.energy_j
    rows = top_rows(operator_table(profile, by=args.by), args.top, total)
    tree = module_tree(profile, fold=not args.no_fold)
    if args.json:
        print(json.dumps(report_json(profile, rows, tree, args.by, flatten_tree), indent=2))
        return 0
    if args.csv:
        write_report_csv(rows, sys.stdout)
        return 0
    print_report(profile, rows, tree, args.by, args.depth, args.db, top=args.top)
    return 0
