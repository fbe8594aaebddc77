"""`magneton demo`: the README's first command — record a shipped example pair and diff it.

Records `examples/cases/gelu_backend` (a Hugging Face GPT-2 built from a config with
`activation_function="gelu_new"` vs `"gelu_pytorch_tanh"`), then shows what a user would
run next: the runs, each run's top operators, and the differential diagnosis. Each step
goes through the same code as the corresponding command, so the demo can't drift from it.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from magneton.graphdb.model import MagnetonError


def _find_case(name: str) -> Path:
    here = Path(__file__).resolve()
    for base in (Path.cwd(), *here.parents):
        cand = base / "examples" / "cases" / name
        if (cand / "a.py").is_file() and (cand / "b.py").is_file():
            return cand
    raise MagnetonError(
        f"example case '{name}' not found (run from a Magneton checkout, or pass --case DIR)"
    )


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="record the shipped example pair and diagnose it")
    p.add_argument("--db", default="magneton-demo", help="DB directory (default ./magneton-demo)")
    p.add_argument("--case", default=None, help="case directory with a.py and b.py")
    p.add_argument("--power", default="auto", help="power source (default auto)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from magneton.cli import main as cli
    from magneton.tracer.record import RecordOptions, record_script

    console = Console()
    case = Path(args.case) if args.case else _find_case("gelu_backend")
    if not ((case / "a.py").is_file() and (case / "b.py").is_file()):
        raise MagnetonError(f"{case} must contain a.py and b.py")
    opts = RecordOptions(power=args.power, replace=True)
    for side in ("a", "b"):
        console.rule(f"[bold]magneton record {case.name}/{side}.py --run {side}")
        prof = record_script(case / f"{side}.py", db=args.db, run=side, options=opts)
        console.print(
            f"{len(prof.ops)} operators, {prof.run.time_s * 1e3:.1f} ms/call, "
            f"{prof.run.energy_j:.4g} J/call ({prof.run.energy_method}: {prof.run.power_source})"
        )
    steps = [
        ["runs", "--db", args.db],
        ["report", "--db", args.db, "a", "--top", "8"],
        ["report", "--db", args.db, "b", "--top", "8"],
    ]
    for step in steps:
        console.rule("[bold]magneton " + " ".join(step))
        rc = cli(step)
        if rc:
            return rc
    # the diff runs here rather than through the CLI so the hint below can name a
    # finding worth patching (finding 1 is the largest difference, which may be noise)
    from magneton.commands.diff import print_diagnosis, print_result
    from magneton.diagnose.diff import diff_runs
    from magneton.graphdb import open_db

    console.rule(f"[bold]magneton diff --db {args.db} a b")
    with open_db(args.db, create=False) as db:
        result = diff_runs(db, "a", "b")
    print_result(result)
    print_diagnosis(result)
    act = [f for f in result.ordered() if f.verdict != "noise"]
    best = next((f for f in act if (f.fix or {}).get("patch")), act[0] if act else None)
    hint = f"explore with magneton-tui --db {args.db} a b"
    if best is not None:
        hint = (
            f"magneton export-patch --db {args.db} a b --finding {best.id} -o fix.patch, or {hint}"
        )
    console.print(f"\nNext: {hint}")
    return 0
