"""`magneton runs --db DIR [--json]`: list the runs stored in a profile DB."""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
from dataclasses import asdict, fields
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "runs",
        help="list the recorded runs in a DB",
        description="List the runs of a profile DB: status, script, operators, energy, time.",
    )
    p.add_argument("--db", required=True, help="profile DB directory")
    fmt = p.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help="print a JSON list instead of a table")
    fmt.add_argument("--csv", action="store_true", help="print the table as CSV (one run a row)")
    p.set_defaults(func=run)


def _console() -> Console:
    """A rich console. Piped output gets a wide page instead of rich's 80 columns, so
    `magneton runs | less` and captured output keep whole cells. No emoji codes: a run
    named `:x:` (or a query cell holding it) printed as an emoji; user text is escaped
    for markup by the callers, and emoji codes are not markup."""
    from rich.console import Console

    console = Console(emoji=False)
    if not console.is_terminal:
        console = Console(width=200, emoji=False)
    return console


def _script(path: str) -> str:
    """The script relative to the working directory when it lies below it (narrower)."""
    if not path:
        return "(python block)"
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return path
    return path if rel.startswith("..") else rel


def run(args: argparse.Namespace) -> int:
    from rich.markup import escape
    from rich.table import Table

    from magneton.graphdb import db_file, ghost_message, open_db

    with open_db(args.db, read_only=True) as db:
        runs = db.list_runs()
        spreads = db.run_spreads()
    for r in runs:  # the same words `report` and `diff` use for such a run
        if r.status == "loading":
            r.error = ghost_message(r.name, db_file(Path(args.db)))
    if args.json:
        print(json.dumps([asdict(r) for r in runs], indent=2))
        return 0
    if args.csv:
        write_csv(runs, spreads)
        return 0
    console = _console()
    if not runs:
        console.print(
            f"no runs in {escape(args.db)} (record one: magneton record SCRIPT --db DIR --run NAME)"
        )
        return 0
    show_errors = any(r.error for r in runs)
    # run names, paths and errors are user text: `[/]` or `bert[fp64]` must print as is
    table = Table(title=f"runs in {escape(args.db)}")
    table.add_column("name", style="bold")
    table.add_column("status")
    table.add_column("script")
    table.add_column("started")
    table.add_column("ops", justify="right")
    table.add_column("energy J (method)", justify="right")
    table.add_column("time s", justify="right")
    table.add_column("± CV", justify="right")  # repeatability over the timed iterations
    if show_errors:
        table.add_column("error", overflow="fold")
    for r in runs:
        status = {"ok": "[green]ok[/]", "failed": "[red]failed[/]"}.get(
            r.status, f"[yellow]{r.status}[/]"
        )
        ok = r.status == "ok"
        energy = f"{r.energy_j:.4g} ({r.energy_method or '?'})" if ok else "-"
        cells = [
            escape(r.name),
            status,
            escape(_script(r.script)),
            r.started_at.replace("T", " ")[:19],
            str(r.op_count) if ok else "-",
            energy,
            f"{r.time_s:.4g}" if ok else "-",
            _spread_cell(spreads.get(r.name)) if ok else "-",
        ]
        if show_errors:
            cells.append(escape(r.error))
        table.add_row(*cells)
    console.print(table)
    if any(sp.unstable for sp in spreads.values()):
        console.print(
            "[yellow]unstable[/]: energy varied more than ±5% between timed iterations; "
            "diffs against such a run need a larger difference to count. Re-record it on a "
            "quieter machine with more timed iterations (a larger --repeat for a script, a "
            "larger ACTIVE in --steps for a program; `report RUN` prints the command)."
        )
    return 0


def write_csv(runs: list, spreads: dict) -> None:
    """`runs --csv`: every RunRow field (script as stored, energy and time per call)
    plus the repeatability of its timed iterations (CV, blank when not measured)."""
    from magneton.graphdb import RunRow

    w = csv.writer(sys.stdout)
    cols = [f.name for f in fields(RunRow)]
    w.writerow([*cols, "cv", "iterations"])
    for r in runs:
        sp = spreads.get(r.name)
        spread = (
            [f"{sp.cv:.6g}", sp.iterations] if sp is not None and sp.iterations >= 2 else ["", ""]
        )
        w.writerow([*(getattr(r, c) for c in cols), *spread])


def _spread_cell(sp) -> str:
    """`±1.2%`, yellow when too unstable to compare at the default threshold."""
    if sp is None or sp.iterations < 2:
        return "-"
    cell = f"±{100 * sp.cv:.1f}%"
    return f"[yellow]{cell} unstable[/]" if sp.unstable else cell
