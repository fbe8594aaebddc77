"""Repeatability: the same script recorded N times must give the same energy and no findings.

For each script (default: the GPT-2 gelu case and the eager-attention case of
examples/cases), and for each load condition - `quiet`, and `busy` with one background
process spinning on a core (started before the recordings and stopped after them by this
benchmark, bounded by --busy-timeout) - it records the script N times with `magneton
record` (separate processes, as a user would), then:

* run-energy spread: max/min of the N runs' J/call (goal: ≤ 1.05 under load);
* the per-run CV over timed iterations that `record` measured (Profile.energy.spread);
* every A/A pair diffed as a user would (`magneton diff --json`: candidates confirmed by
  interleaved re-measurement, under the same load): the number of findings of each
  verdict (goal: zero of any verdict); printed as shown/detected, where "detected" is
  what detection alone flagged (`--no-rerun`), plus how many confirmed differences
  diagnosis dismissed (the same kernels, arguments and settings on both sides: no finding).

Timings on a shared machine mean little; run it alone.

    python benchmarks/repeatability.py [-n 3] [--script PATH ...] [--conditions quiet,busy]
        [--repeat 3] [--busy-timeout 900] [--db-dir DIR] [--json OUT]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_SCRIPTS = [
    ROOT / "examples" / "cases" / "gelu_backend" / "a.py",
    ROOT / "examples" / "cases" / "attn_impl" / "a.py",
]
BUSY = "import time\nend = time.monotonic() + {t}\nwhile time.monotonic() < end: pass\n"


def magneton(*args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "magneton", *args]
    return subprocess.run(cmd, capture_output=True, text=True, check=False)


def _record(script: Path, db: Path, run: str, repeat: int) -> None:
    p = magneton("record", str(script), "--db", str(db), "--run", run, "--repeat", str(repeat))
    if p.returncode != 0:
        raise SystemExit(f"record {script} failed: {p.stderr.strip()}")


def _run_stats(db: Path, run: str) -> dict:
    p = magneton("report", "--db", str(db), run, "--json")
    if p.returncode != 0:
        raise SystemExit(f"report {run} failed: {p.stderr.strip()}")
    rep = json.loads(p.stdout)
    sp = rep.get("spread") or {}
    return {
        "run": run,
        "energy_j": rep["energy_j"],
        "time_s": rep["time_s"],
        "cv": sp.get("cv"),
        "iterations": sp.get("iterations"),
    }


def _findings(db: Path, a: str, b: str, *extra: str) -> tuple[list[dict], list[dict]]:
    """(findings, dismissed: differences diagnosis found no software cause for)."""
    p = magneton("diff", "--db", str(db), a, b, *extra, "--json")
    if p.returncode not in (0, 1):
        raise SystemExit(f"diff {a} {b} failed: {p.stderr.strip()}")
    out = json.loads(p.stdout)
    return out["findings"], out.get("dismissed", [])


def _diff_counts(db: Path, a: str, b: str) -> dict:
    """What a user is shown (`diff`: candidates confirmed by interleaved re-measurement,
    diagnosed) and what detection alone flagged (`diff --no-rerun`)."""
    shown, dismissed = _findings(db, a, b)
    detected = _findings(db, a, b, "--no-rerun")[0]
    counts: dict[str, int] = {}
    for f in shown:
        counts[f["verdict"]] = counts.get(f["verdict"], 0) + 1
    return {
        "a": a,
        "b": b,
        "findings": len(shown),
        "by_verdict": counts,
        "dismissed": len(dismissed),
        "detected_unconfirmed": len(detected),
    }


def measure(script: Path, condition: str, n: int, repeat: int, db: Path, busy_s: float) -> dict:
    busy = None
    if condition == "busy":
        busy = subprocess.Popen([sys.executable, "-c", BUSY.format(t=busy_s)])
    try:  # the load stays on through the diffs: confirmation re-measures under it too
        runs = [f"{condition}{i}" for i in range(n)]
        for r in runs:
            _record(script, db, r, repeat)
        diffs = [_diff_counts(db, a, b) for a, b in itertools.combinations(runs, 2)]
    finally:
        if busy is not None:
            busy.terminate()
            busy.wait()
    stats = [_run_stats(db, r) for r in runs]
    energies = [s["energy_j"] for s in stats]
    return {
        "script": str(script.relative_to(ROOT) if script.is_relative_to(ROOT) else script),
        "condition": condition,
        "runs": stats,
        "spread": max(energies) / min(energies) if min(energies) > 0 else float("inf"),
        "diffs": diffs,
        "findings_total": sum(d["findings"] for d in diffs),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=3, help="recordings per script and condition")
    ap.add_argument("--script", action="append", help="default: gelu_backend, attn_impl")
    ap.add_argument("--conditions", default="quiet,busy")
    ap.add_argument("--repeat", type=int, default=3, help="`record --repeat` (the minimum)")
    ap.add_argument("--busy-timeout", type=float, default=900.0, help="busy process bound, s")
    ap.add_argument("--db-dir", help="keep recordings here (default: a temp dir)")
    ap.add_argument("--json", dest="json_out", help="write results as JSON to this file")
    args = ap.parse_args(argv)
    if args.n < 2:
        raise SystemExit("-n must be at least 2 (an A/A diff needs two recordings)")
    scripts = [Path(s).resolve() for s in args.script] if args.script else DEFAULT_SCRIPTS
    conditions = [c.strip() for c in args.conditions.split(",") if c.strip()]
    if not set(conditions) <= {"quiet", "busy"}:
        raise SystemExit("--conditions takes quiet and/or busy")
    base = Path(args.db_dir) if args.db_dir else Path(tempfile.mkdtemp(prefix="magneton-rep-"))
    results = []
    header = (
        f"{'script':36s} {'load':5s} {'J/call per run':34s} {'spread':>7s} {'CV':>12s} findings"
    )
    print(header)
    for script in scripts:
        for cond in conditions:
            db = base / f"{script.parent.name}-{script.stem}-{cond}"
            r = measure(script, cond, args.n, args.repeat, db, args.busy_timeout)
            results.append(r)
            js = " ".join(f"{s['energy_j']:.3g}" for s in r["runs"])
            cvs = " ".join(f"{100 * (s['cv'] or 0):.0f}%" for s in r["runs"])
            counts = [
                f"{d['findings']}/{d['detected_unconfirmed']}"
                + (f" ({d['dismissed']} dismissed)" if d["dismissed"] else "")
                for d in r["diffs"]
            ]
            print(
                f"{r['script'][-36:]:36s} {cond:5s} {js:34s} {r['spread']:7.3f} {cvs:>12s} {counts}"
            )
    if args.json_out:
        Path(args.json_out).write_text(json.dumps({"results": results}, indent=2))
    ok = all(r["spread"] <= 1.05 and r["findings_total"] == 0 for r in results)
    print("goal (spread ≤ 1.05, zero findings):", "met" if ok else "not met")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("KINETO_LOG_LEVEL", "99")
    sys.exit(main())
