"""`magneton report --db DIR RUN`: where one run's energy went, and how it was obtained.

Prints the per-operator energy table (name, calls, time, energy, J/call, avg W, share, method) grouped
by operator, module or kernel; the idle baseline; the power source and method (an estimate
says so and names its model); and the folded module tree (repeated blocks as `h.*`).
`--json` and `--csv` give the same numbers for scripts: the operators' energies always sum
to the run's (with `--top N` the remainder is one "(other N)" row).
"""

from __future__ import annotations

import argparse
import csv
import json
import sys

from rich.markup import escape

from magneton.graphdb.names import add_full_names


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
    p.add_argument("--depth", type=int, default=4, help="module tree depth shown (default 4)")
    add_full_names(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from magneton.diagnose.breakdown import (
        flatten_tree,
        module_tree,
        operator_table,
        top_rows,
    )
    from magneton.graphdb import open_db
    from magneton.graphdb.model import MagnetonError
    from magneton.graphdb.names import set_full_names

    if args.top is not None and args.top < 1:
        raise MagnetonError("--top must be at least 1")
    set_full_names(args.full_names)
    from magneton.diagnose.jobs.ranks import print_rank_report, rank_report

    per_rank = args.by != "op" or args.top is not None  # asked for a breakdown
    with open_db(args.db, read_only=True) as db:
        # a torch.distributed job is stored as NAME/rank0, NAME/rank1, ...
        job = None if db.has_run(args.run) else rank_report(db, args.run)
        if job is None:
            db.require_run(args.run)
            profile = db.load_profile(args.run)
        elif per_rank and not args.json and not args.csv:
            from magneton.diagnose.jobs.ranks import job_runs

            runs = job_runs(db, args.run)
            ok = {s.rank for s in job.ranks if s.status == "ok"}
            rank_profiles = [db.load_profile(runs[r].name) for r in sorted(ok) if r in runs]
    if job is not None:
        if args.json:
            print(json.dumps(job.to_json(), indent=2))
            return 0
        print_rank_report(job)
        if per_rank and not args.csv:
            _print_ranks(rank_profiles, args)
        return 0
    if profile.run.status != "ok":
        raise MagnetonError(
            f"run '{args.run}' is {profile.run.status}"
            + (f": {profile.run.error}" if profile.run.error else "")
            + "; record it again"
        )
    from magneton.graphdb.wording import unrecorded_threads_warning

    warning = unrecorded_threads_warning(profile.config)
    if warning:  # the totals below leave that work out
        print(f"magneton: {warning}", file=sys.stderr)
    total = profile.run.energy_j
    rows = top_rows(operator_table(profile, by=args.by), args.top, total)
    tree = module_tree(profile, fold=not args.no_fold)
    if args.json:
        print(json.dumps(_json(profile, rows, tree, args.by, flatten_tree), indent=2))
        return 0
    if args.csv:
        w = csv.writer(sys.stdout)
        w.writerow(
            ["name", "calls", "time_s", "energy_j", "j_per_call", "avg_w", "share", "method"]
        )
        for r in rows:
            w.writerow(
                [r.name, r.calls, r.time_s, r.energy_j, r.j_per_call, r.avg_w, r.share, r.method]
            )
        return 0
    _print(profile, rows, tree, args)
    return 0


def _json(profile, rows, tree, by, flatten_tree) -> dict:
    r = profile.run
    key = {"op": "operators", "module": "modules_table", "kernel": "kernels"}[by]
    sp = profile.energy.spread
    out = {
        "run": r.name,
        "power_source": r.power_source,
        "energy_method": r.energy_method,
        "method_note": profile.energy.note,
        "energy_j": r.energy_j,
        "energy_above_idle_j": r.energy_above_idle_j,
        "time_s": r.time_s,
        "idle_w": r.idle_w,
        "by": by,
        "operators": [],
        "modules": flatten_tree(tree),
        "spread": {**sp.__dict__, "unstable": sp.unstable} if sp.iterations else None,
        "clock": profile.energy.clock,
    }
    if by == "op":
        out["operators"] = [x.to_json() for x in rows]
    else:
        # "operators" is always the per-operator table; the requested grouping is extra
        from magneton.diagnose.breakdown import operator_table

        out["operators"] = [x.to_json() for x in operator_table(profile, by="op")]
        out[key] = [x.to_json() for x in rows]
    if profile.energy.model is not None:
        out["model"] = profile.energy.model
    gaps = sum(len(s.gaps) for s in profile.power)
    if gaps:
        out["sensor_gaps"] = gaps
    return out


def spread_line(profile, db: str = "DB") -> str:
    """How repeatable the run's energy was over its timed iterations, and what to do
    when it is too noisy to compare ("" when the run has no per-iteration record)."""
    sp = profile.energy.spread
    if sp.iterations < 2:
        return ""
    line = (
        f"spread: ±{100 * sp.cv:.1f}% (CV of the call's energy over {sp.iterations} timed "
        f"iterations, min {_fmt(sp.min_j)} J, max {_fmt(sp.max_j)} J"
        + (f"; stopped: {sp.stop_reason}" if sp.stop_reason else "")
        + ")"
    )
    e = profile.run.energy_j
    if e > 0 and not (sp.min_j <= e <= sp.max_j):
        # the model prices each operator on its own cheapest iteration (docs/energy.md),
        # and no whole call has every operator at its cheapest at once: the headline
        # sits below the cheapest call. Said here, so "11.4 J/call … min 12.15 J" is no
        # contradiction left for the reader to resolve.
        where = "below the cheapest" if e < sp.min_j else "above the costliest"
        line += (
            f"\nheadline {_fmt(e)} J/call is {where} whole call: it sums each operator's "
            "own cheapest iteration (robust to load), while min/max are whole calls"
        )
    if sp.unstable:
        line = (
            f"[yellow]{line}\nunstable: the call's energy varied ±{100 * sp.cv:.0f}% between "
            "iterations (another process competing for the CPU, most likely); a diff "
            "against this run needs a larger difference to count as a finding. Record it "
            f"again on a quieter machine, or {more_iterations(profile, db)}.[/]"
        )
    return line


def more_iterations(profile, db: str = "DB") -> str:
    """How to record more timed iterations of this run: `--repeat` for a script, a
    larger ACTIVE in `--steps` for a program (`record` refuses `--repeat` there)."""
    from magneton.tracer.program import ProgramSpec, suggested_steps

    spec = ProgramSpec.from_config(profile.config)
    if spec is None:
        return f"with --repeat {2 * profile.energy.spread.iterations} for more iterations"
    new = suggested_steps(spec.schedule)
    unit = "steps" if spec.mode == "steps" else "window executions"
    return f"with more timed {unit}: {spec.command(new, profile.run.name, db)}"


def _fmt(x: float, unit: str = "") -> str:
    if x == 0:
        return "0"
    ax = abs(x)
    if ax >= 1e4 or ax < 1e-3:
        return f"{x:.3g}{unit}"
    return f"{x:.4g}{unit}"


def _print_ranks(profiles: list, args: argparse.Namespace) -> None:
    """`report JOB --by kernel --top N`: the job's report, then each recorded rank's
    breakdown (the job report alone ignored --by and --top)."""
    from rich.console import Console

    from magneton.diagnose.breakdown import operator_table, top_rows

    console = Console()
    if not console.is_terminal:
        console = Console(width=max(console.width, 120))
    for p in profiles:
        rows = top_rows(operator_table(p, by=args.by), args.top or 10, p.run.energy_j)
        console.print(_table(p, rows, args.by))


def _table(profile, rows, by: str):
    """The breakdown table of one run (rows as `top_rows` gives them, plus the total)."""
    from rich import box
    from rich.table import Table

    from magneton.graphdb.names import name_column, short_name

    r = profile.run
    title = {"op": "operator", "module": "module", "kernel": "kernel"}[by]
    # run and operator names are user text: `bert[fp64]` must not be read as markup
    table = Table(
        title=f"run '{escape(r.name)}': energy by {title} (per entry call)", box=box.SIMPLE_HEAD
    )
    # names shortened (graphdb/names.py) and the column capped: one kernel's C++
    # signature folded into 30 lines per row
    table.add_column(title, min_width=12, **name_column())
    for col in ("calls", "time (s)", "energy (J)", "J/call", "avg W", "share"):
        table.add_column(col, justify="right")
    table.add_column("method")
    for row in rows:
        table.add_row(
            escape(short_name(row.name)),
            str(row.calls),
            _fmt(row.time_s),
            _fmt(row.energy_j),
            _fmt(row.j_per_call),
            f"{row.avg_w:.1f}",
            f"{100 * row.share:.1f}%",
            row.method,
        )
    table.add_section()
    span = profile.energy.span_s
    span = span if span > 0 else r.time_s  # charged time of the whole call
    table.add_row(
        "total",
        str(sum(x.calls for x in rows)),
        _fmt(span),
        _fmt(r.energy_j),
        "",
        f"{r.energy_j / span:.1f}" if span > 0 else "",
        "100%",
        r.energy_method,
    )
    return table


def _print(profile, rows, tree, args) -> None:
    from rich.console import Console
    from rich.tree import Tree

    from magneton.tracer.energy import method_line

    r = profile.run
    console = Console()
    if not console.is_terminal:
        console = Console(width=max(console.width, 120))  # a pipe: no wrapping of names
    table = _table(profile, rows, args.by)
    span = profile.energy.span_s
    span = span if span > 0 else r.time_s  # charged time of the whole call
    console.print(table)
    console.print(
        f"idle baseline ~ {r.idle_w:.1f} W; above idle {_fmt(r.energy_above_idle_j)} J "
        f"of {_fmt(r.energy_j)} J per call"
    )
    if r.time_s > 0 and abs(span - r.time_s) > 0.05 * r.time_s:
        # the total's time is what the energy covers; say where the rest of the wall went
        if profile.energy.clock == "process-cpu":
            console.print(
                f"time: energy covers {_fmt(span * 1e3)} ms of CPU time per call (operators "
                f"and the Python between them); a call took {_fmt(r.time_s * 1e3)} ms wall "
                "on average (the rest: waiting for a CPU while other processes ran, Python "
                "before the first or after the last operator)"
            )
        else:
            console.print(
                f"time: energy covers {_fmt(span * 1e3)} ms per call (operators and the gaps "
                f"between them); a call took {_fmt(r.time_s * 1e3)} ms wall on average (the "
                "rest: Python before the first or after the last operator, and variation "
                "between iterations)"
            )
    console.print(f"energy: {method_line(profile)}")
    line = spread_line(profile, args.db)
    if line:
        console.print(line)
    gaps = sum(len(s.gaps) for s in profile.power)
    if gaps:
        console.print(
            f"[yellow]sensor gaps: {gaps} (readings failed; power interpolated across them)[/]"
        )
    if r.timing == "combined":
        console.print("[yellow]timing includes structure-capture overhead (one-pass block)[/]")

    def label(n) -> str:
        name = n.name if n.path else (n.type or n.name)
        times = f" ×{n.instances}" if n.instances > 1 else ""
        own = (
            f", self {_fmt(n.self_energy_j)} J"
            if n.children and n.self_energy_j > 0.005 * n.energy_j
            else ""
        )
        return (
            f"[bold]{escape(name)}[/]{times} {_fmt(n.energy_j)} J ({100 * n.share:.1f}%{own})"
            + (f" [dim]{escape(n.type)}[/]" if n.type and n.path else "")
        )

    root = Tree(label(tree))

    def add(parent, node, depth):
        if depth >= args.depth:
            if node.children:
                parent.add(f"[dim]… {len(node.children)} submodules[/]")
            return
        for c in node.children:
            add(parent.add(label(c)), c, depth + 1)

    add(root, tree, 0)
    console.print(root)
