"""Offline diagnosis time per case of examples/cases (target: ≤ 10 s per case).

Offline = everything after recording, as one `run_diff` (what `magneton diff` runs):
matching, detection and confirmation ("diff", up to its "detected" progress), then
diagnosis — divergence (Cypher), static analysis, the key-variable re-run of both
scripts (for Python-level divergences) and the backward data-flow. Confirmation and the
re-run share the diff's warm workers (tracer/timing/warm.py `WarmPool`). Recording is done
first (or reused with --db-dir) and not timed: it is the recorder's cost.

Reported per case: diff seconds, diagnosis seconds, the re-run's phases — the warm
worker's imports (wall and CPU, tracer/timing/warm.py), then per side (the slowest) the script's
own import, `setup()` and the traced call — the CPU time of this process and of the
re-run's processes (`children CPU`), and whether the total meets the budget. CPU time is
shown because this machine is shared: wall time includes waiting for other work.

`--compare` diagnoses each case twice, interleaved: first with every side re-run in a
fresh interpreter that imports everything itself (the re-run before the warm worker),
then with the warm worker; the ratios of one run are the result.

    python benchmarks/diagnosis_time.py [--cases examples/cases] [--case NAME ...]
        [--db-dir DIR] [--budget 10] [--compare] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
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
    ap.add_argument("--budget", type=float, default=10.0, help="seconds per case")
    ap.add_argument("--no-rerun", action="store_true")
    ap.add_argument(
        "--compare", action="store_true", help="also time fresh re-run processes (before)"
    )
    ap.add_argument("--json", dest="json_out", help="write results as JSON to this file")
    args = ap.parse_args(argv)

    from rich.console import Console
    from rich.table import Table

    from magneton.commands.eval import case_dirs, load_expect, record, record_args
    from magneton.graphdb import open_db
    from magneton.tracer.timing import warm

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
            # the options `magneton eval` records the case with (its min_repeat, power)
            opts = record_args(load_expect(case), 3)
            record([str(case / "a.py")], db_path, "a", opts)
            record([str(case / "b.py")], db_path, "b", opts)
        for mode in ("fresh", "warm") if args.compare else ("warm",):
            warm.FORK = mode == "warm"
            rows.append(_diagnose_case(db_path, case.name, mode, args))
    if tmp is not None:
        tmp.cleanup()
    table = Table(title=f"Offline diagnosis time per case (budget {args.budget:.0f} s)")
    cols = (
        "case",
        "re-run",
        "findings",
        "diff s",
        "diagnose s",
        "re-run wait s",
        "imports s (CPU)",
        "side: script/setup/call s",
        "total s",
        "CPU s",
        "children CPU s",
        "ok",
    )
    for col in cols:
        table.add_column(col, justify="left" if col in ("case", "re-run") else "right")
    for r in rows:
        ph = r["phases"]
        table.add_row(
            r["case"],
            r["mode"],
            str(r["findings"]),
            f"{r['diff_s']:.2f}",
            f"{r['diagnose_s']:.2f}",
            "-" if r["rerun_s"] is None else f"{r['rerun_s']:.2f}",
            "-" if not ph else _imports(ph),
            "-" if not ph else f"{ph['script_s']:.2f}/{ph['setup_s']:.2f}/{ph['call_s']:.2f}",
            f"{r['total_s']:.2f}",
            f"{r['cpu_s']:.2f}",
            f"{r['children_cpu_s']:.2f}",
            "✓" if r["within_budget"] else "✗",
        )
    Console(width=200).print(table)
    by_case: dict[str, dict[str, dict]] = {}
    for r in rows:
        by_case.setdefault(r["case"], {})[r["mode"]] = r
    for name, modes in by_case.items():
        if "fresh" in modes and "warm" in modes:
            f, w = modes["fresh"], modes["warm"]
            Console().print(
                f"{name}: warm/fresh total {w['total_s'] / f['total_s']:.2f}×, re-run CPU "
                f"(children) {w['children_cpu_s'] / max(f['children_cpu_s'], 1e-9):.2f}×"
            )
    Console().print(f"load average at the end: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    if args.json_out:
        Path(args.json_out).write_text(
            json.dumps(
                {"budget_s": args.budget, "load_avg": os.getloadavg(), "cases": rows}, indent=2
            )
        )
    return 0 if all(r["within_budget"] for r in rows) else 1


def _imports(ph: dict) -> str:
    cpu = ph["imports_cpu_s"]
    return f"{ph['imports_s']:.2f}" + ("" if cpu is None else f" ({cpu:.2f})")


def _children_cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def _phases(rr: dict) -> dict[str, float | None]:
    """The re-run's phases: the worker's imports, then the slowest side's script import,
    setup() and traced call (cumulative seconds in the side's child, differenced)."""
    sides = rr.get("phases") or {}
    if not sides:
        return {}
    slow = max(sides.values(), key=lambda p: p.get("entry_s", 0.0))
    pre = slow.get("preimport_s", 0.0)
    imported = slow.get("import_s", pre)
    setup = slow.get("setup_s", imported)
    forked = rr.get("forked", False)
    return {
        # fresh processes import everything in the side's own preimport
        "imports_s": slow.get("worker_ready_s", 0.0) if forked else pre,
        "imports_cpu_s": slow.get("worker_ready_cpu_s") if forked else None,
        "script_s": imported - (pre if not forked else 0.0),
        "setup_s": setup - imported,
        "call_s": slow.get("entry_s", setup) - setup,
        "side_cpu_s": slow.get("cpu_s", 0.0),
    }


def _diagnose_case(db_path: str, name: str, mode: str, args: argparse.Namespace) -> dict:
    from magneton.diagnose.pipeline import run_diff
    from magneton.graphdb import open_db

    detected: list[float] = []

    def progress(stage: str, result: object, done: int, total: int) -> None:
        if stage == "detected":
            detected.append(time.perf_counter())

    with open_db(db_path) as db:
        k0, c0, t0 = _children_cpu_s(), time.process_time(), time.perf_counter()
        # one diff as `magneton diff` runs it: confirmation and diagnosis share the
        # diff's warm workers (tracer/timing/warm.py WarmPool)
        out = run_diff(db, "a", "b", rerun=not args.no_rerun, progress=progress)
        t2, c2, k2 = time.perf_counter(), time.process_time(), _children_cpu_s()
    result = out.result
    t1 = detected[0] if detected else t2
    rr = out.rerun_info or {}
    return {
        "case": name,
        "mode": mode,
        "findings": len(result.findings),
        "diff_s": round(t1 - t0, 2),
        "diagnose_s": round(t2 - t1, 2),
        "rerun_s": rr.get("seconds"),
        "rerun": rr,
        "phases": _phases(rr),
        "total_s": round(t2 - t0, 2),
        "cpu_s": round(c2 - c0, 2),
        "children_cpu_s": round(k2 - k0, 2),
        "within_budget": (t2 - t0) <= args.budget,
    }


if __name__ == "__main__":
    sys.exit(main())
