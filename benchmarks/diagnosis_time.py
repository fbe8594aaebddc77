"""Offline diagnosis time per case of examples/cases (target: ≤ 30 s per case here).

Offline = everything after recording: `run_diff` (matching + detection), then
`diagnose_result` — divergence (Cypher), static analysis, the key-variable re-run of
both scripts (for Python-level divergences) and the backward data-flow. Recording is
done first (or reused with --db-dir) and not timed: it is the recorder's cost.

Reported per case: diff seconds, diagnosis seconds (of which: the re-run wall time and
the slowest re-run's phases — preimport of the script's libraries dominates), number of
findings, and whether the total meets the budget. The process CPU time is shown next to
wall time because this machine is shared: wall time includes waiting for other work.

    python benchmarks/diagnosis_time.py [--cases examples/cases] [--case NAME ...]
        [--db-dir DIR] [--budget 30] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default=str(ROOT / "examples" / "cases"))
    ap.add_argument("--case", action="append")
    ap.add_argument("--db-dir", help="keep/reuse recordings here (default: temp dir)")
    ap.add_argument("--budget", type=float, default=30.0, help="seconds per case")
    ap.add_argument("--no-rerun", action="store_true")
    ap.add_argument("--json", dest="json_out", help="write results as JSON to this file")
    args = ap.parse_args(argv)

    from rich.console import Console
    from rich.table import Table

    from magneton.commands.eval import case_dirs, record
    from magneton.diagnose.pipeline import run_diff
    from magneton.diagnose.rootcause import Diagnoser
    from magneton.graphdb import open_db

    tmp = None
    db_dir = args.db_dir
    if db_dir is None:
        tmp = tempfile.TemporaryDirectory(prefix="magneton-bench-")
        db_dir = tmp.name
    rows = []
    for case in case_dirs(args.cases, args.case):
        db_path = os.path.join(db_dir, case.name)
        with_runs = False
        if os.path.exists(db_path):
            with open_db(db_path, read_only=True) as db:
                with_runs = db.has_run("a") and db.has_run("b")
        if not with_runs:
            record(case / "a.py", db_path, "a", 3)
            record(case / "b.py", db_path, "b", 3)
        with open_db(db_path) as db:
            c0, t0 = time.process_time(), time.perf_counter()
            result = run_diff(db, "a", "b", diagnose=False).result
            t1 = time.perf_counter()
            d = Diagnoser(db, result, rerun=not args.no_rerun)
            d.diagnose_all(result.findings)
            t2, c2 = time.perf_counter(), time.process_time()
        rr = d.rerun_info or {}
        rows.append(
            {
                "case": case.name,
                "findings": len(result.findings),
                "diff_s": round(t1 - t0, 2),
                "diagnose_s": round(t2 - t1, 2),
                "rerun_s": rr.get("seconds"),
                "rerun": rr,
                "total_s": round(t2 - t0, 2),
                "cpu_s": round(c2 - c0, 2),
                "within_budget": (t2 - t0) <= args.budget,
            }
        )
    if tmp is not None:
        tmp.cleanup()
    table = Table(title=f"Offline diagnosis time per case (budget {args.budget:.0f} s)")
    for col in ("case", "findings", "diff s", "diagnose s", "re-run s", "total s", "CPU s", "ok"):
        table.add_column(col, justify="left" if col == "case" else "right")
    for r in rows:
        table.add_row(
            r["case"],
            str(r["findings"]),
            f"{r['diff_s']:.2f}",
            f"{r['diagnose_s']:.2f}",
            "-" if r["rerun_s"] is None else f"{r['rerun_s']:.2f}",
            f"{r['total_s']:.2f}",
            f"{r['cpu_s']:.2f}",
            "✓" if r["within_budget"] else "✗",
        )
    Console().print(table)
    Console().print(f"load average at the end: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    if args.json_out:
        Path(args.json_out).write_text(
            json.dumps({"budget_s": args.budget, "cases": rows}, indent=2)
        )
    return 0 if all(r["within_budget"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
