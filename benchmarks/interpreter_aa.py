"""Interpreter findings on a population: how often an A/A pair is flagged, how often a real
Python difference is found.

Records tests/test_interpreter_e2e.py's two scripts N times each with `magneton record`
(fresh processes, as a user would; `--power model --repeat 10`): `a.py` builds an
attention mask in a Python list comprehension (about 1.2 ms per call here), `b.py`
builds it with two tensor ops. Then, as `magneton diff --no-rerun` decides (matching and
detection, no re-measurement):

* every A/A pair of the N recordings of `a.py` (N(N-1)/2 pairs): how many have an
  interpreter finding (goal: none), and the largest ratio of a place's interpreter
  energy between the two recordings;
* the N A/B pairs (the i-th `a` against the i-th `b`): how many find the mask loop as an
  interpreter finding with `a` the wasteful side (goal: all).

`--db-dir DIR` keeps the recordings (and reuses those already there), so two versions of
the code can be compared on the same recordings. Timings on a shared machine mean little;
run it alone.

    python benchmarks/interpreter_aa.py [-n 12] [--db-dir DIR] [--json OUT]
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import json
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]


def _scripts() -> tuple[str, str]:
    spec = importlib.util.spec_from_file_location(
        "_interp_tests", ROOT / "tests" / "test_interpreter_e2e.py"
    )
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.SCRIPT_A, mod.SCRIPT_B


def _record(db: Path, script: Path, run: str) -> None:
    argv = [sys.executable, "-m", "magneton", "record", str(script), "--db", str(db)]
    argv += ["--run", run, "--power", "model", "--repeat", "10", "-q"]
    proc = subprocess.run(argv, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"recording {run} failed: {proc.stderr.strip()[-500:]}")


def _recordings(where: Path, n: int) -> list[Path]:
    """n DBs, each holding runs `a` and `b` (recorded unless already there)."""
    from magneton.graphdb import open_db

    script_a, script_b = _scripts()
    dbs = []
    for i in range(n):
        d = where / f"pair{i:02d}"
        d.mkdir(parents=True, exist_ok=True)
        (d / "a.py").write_text(script_a)
        (d / "b.py").write_text(script_b)
        have: set[str] = set()
        if (d / "db").exists():
            with open_db(d / "db", read_only=True) as db:
                have = {r.name for r in db.list_runs()}
        for run in ("a", "b"):
            if run not in have:
                _record(d / "db", d / f"{run}.py", run)
        dbs.append(d / "db")
    return dbs


def _interpreter(pa, pb) -> list:
    from magneton.diagnose.matching.diff import diff_profiles

    result, _ = diff_profiles(pa, pb)
    return [f for f in result.findings if f.kind == "interpreter"]


def _largest_place_ratio(pa, pb) -> float:
    from magneton.diagnose.matching.interpreter import places

    pl_a, pl_b = places(pa, pb), places(pb, pa)
    ratios = [
        max(pl_a[k].energy_j, pl_b[k].energy_j) / min(pl_a[k].energy_j, pl_b[k].energy_j)
        for k in set(pl_a) & set(pl_b)
        if min(pl_a[k].energy_j, pl_b[k].energy_j) > 0
    ]
    return max(ratios, default=1.0)


def measure(dbs: list[Path]) -> dict:
    from magneton.graphdb import open_db

    runs = []
    for db_dir in dbs:
        with open_db(db_dir, read_only=True) as db:
            runs.append((db.load_profile("a"), db.load_profile("b")))
    aa_flagged, aa_ratio = [], 1.0
    for (i, (a1, _)), (j, (a2, _)) in itertools.combinations(enumerate(runs), 2):
        found = _interpreter(a1, a2)
        aa_ratio = max(aa_ratio, _largest_place_ratio(a1, a2))
        if found:
            ratios = [round(f.interval.ratio, 2) for f in found if f.interval is not None]
            aa_flagged.append({"pair": [i, j], "ratios": ratios})
    ab_found = sum(any(f.wasteful == "a" for f in _interpreter(a, b)) for a, b in runs)
    n = len(runs)
    return {
        "recordings_per_script": n,
        "aa_pairs": n * (n - 1) // 2,
        "aa_flagged": len(aa_flagged),
        "aa_flagged_pairs": aa_flagged,
        "aa_largest_place_ratio": round(aa_ratio, 2),
        "ab_pairs": n,
        "ab_found": ab_found,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=12, help="recordings of each script")
    ap.add_argument("--db-dir", help="keep (and reuse) the recordings here")
    ap.add_argument("--json", metavar="OUT", help="write the numbers as JSON")
    args = ap.parse_args(argv)
    warnings.filterwarnings("ignore")
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from context import OtherCpu, context, line

    ctx = context()
    others = OtherCpu()
    with tempfile.TemporaryDirectory() as tmp:
        where = Path(args.db_dir) if args.db_dir else Path(tmp)
        result = measure(_recordings(where, args.n))
    ctx.update(others.report())
    result["context"] = ctx
    table = Table(title="interpreter findings, `diff --no-rerun`")
    for col in ("pairs", "count", "with an interpreter finding", "goal"):
        table.add_column(col, justify="left" if col == "pairs" else "right")
    table.add_row("A/A (a vs a)", str(result["aa_pairs"]), str(result["aa_flagged"]), "0")
    table.add_row(
        "A/B (loop vs tensor ops)", str(result["ab_pairs"]), str(result["ab_found"]), "all"
    )
    console = Console()
    console.print(table)
    console.print(
        f"largest ratio of one place's interpreter energy over the A/A pairs: "
        f"{result['aa_largest_place_ratio']}x"
    )
    console.print(line(ctx))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
