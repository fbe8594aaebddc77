"""`magneton demo`: the README's first command — record a shipped example pair and diff it.

Copies `examples/cases/gelu_backend` (a Hugging Face GPT-2 built from a config with
`activation_function="gelu_new"` vs `"gelu_pytorch_tanh"`) into a scratch directory of
its own (`./magneton-demo`, a fresh git repository holding the two scripts and the DB),
records both there, then shows what a user would run next: the runs, each run's top
operators, and the differential diagnosis. Each step goes through the same code as the
corresponding command, so the demo can't drift from it.

Why a scratch copy: the patch the closing hint suggests edits the recorded script. On the
shipped example it would change a file the tests check, and inside the Magneton checkout
`git apply` resolves paths from the repository root and fails; in the scratch repository
the hint works exactly as printed.
"""

from __future__ import annotations

import argparse
import shlex
import shutil
import subprocess
from pathlib import Path

from magneton.model import MagnetonError


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
    p.add_argument(
        "--dir", default="magneton-demo", help="scratch directory (default ./magneton-demo)"
    )
    p.add_argument("--case", default=None, help="case directory with a.py and b.py")
    p.add_argument("--power", default="auto", help="power source (default auto)")
    p.set_defaults(func=run)


def _scratch(case: Path, target: Path) -> None:
    """Copy the case's scripts into `target` and make it a git repository of its own,
    so a patch of the copy applies with a plain `git apply` run there."""
    target.mkdir(parents=True, exist_ok=True)
    for side in ("a.py", "b.py"):
        shutil.copyfile(case / side, target / side)
    if shutil.which("git") and not (target / ".git").exists():
        subprocess.run(["git", "init", "-q", str(target)], check=False)
        # the starting state as a commit, so `git diff` after the patch shows exactly it
        (target / ".gitignore").write_text("db/\nfix.patch\n")
        identity = ["-c", "user.name=magneton demo", "-c", "user.email=demo@magneton.invalid"]
        subprocess.run(["git", "-C", str(target), "add", "a.py", "b.py", ".gitignore"], check=False)
        subprocess.run(
            ["git", "-C", str(target), *identity, "commit", "-q", "-m", "the example as shipped"],
            check=False,
        )


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.markup import escape

    from magneton.cli import main as cli
    from magneton.tracer.api import RecordOptions, record_script

    console = Console(emoji=False)
    case = Path(args.case) if args.case else _find_case("gelu_backend")
    if not ((case / "a.py").is_file() and (case / "b.py").is_file()):
        raise MagnetonError(f"{case} must contain a.py and b.py")
    scratch = Path(args.dir)
    _scratch(case, scratch)
    db = str(scratch / "db")
    opts = RecordOptions(power=args.power, replace=True)
    for side in ("a", "b"):
        console.rule(f"[bold]magneton record {escape(str(scratch / side))}.py --run {side}")
        prof = record_script(scratch / f"{side}.py", db=db, run=side, options=opts)
        console.print(
            f"{len(prof.ops)} operators, {prof.run.time_s * 1e3:.1f} ms/call, "
            f"{prof.run.energy_j:.4g} J/call ({prof.run.energy_method}: "
            f"{escape(prof.run.power_source)})"
        )
    steps = [
        ["runs", "--db", db],
        ["report", "--db", db, "a", "--top", "8"],
        ["report", "--db", db, "b", "--top", "8"],
    ]
    for step in steps:
        console.rule("[bold]magneton " + escape(" ".join(step)))
        rc = cli(step)
        if rc:
            return rc
    # the diff runs here rather than through the CLI so the hint below can name a
    # finding worth patching (finding 1 is the largest difference, which may be noise)
    from magneton.commands.diff import diff_progress
    from magneton.diagnose.api import run_diff, store_outcome
    from magneton.graphdb import open_db
    from magneton.render.diff import print_diagnosis, print_result

    console.rule(f"[bold]magneton diff --db {escape(db)} a b")
    with open_db(db, create=False) as pdb, diff_progress() as progress:
        out = run_diff(pdb, "a", "b", progress=progress)
        store_outcome(pdb, out)
    result = out.result
    groups = result.groups
    print_result(result, groups)
    print_diagnosis(result, groups)
    act = [g.lead for g in groups if g.lead.verdict != "noise"]
    # only a finding with a patch: `export-patch` of one without ends in an error, and a
    # printed next step must run (a measured-only finding is for the TUI, the other hint)
    best = next((f for f in act if f.fix is not None and f.fix.patch), None)
    # plain print, not rich: rich wraps a long line at the console width even when
    # piped, and a shell line broken in two no longer runs when pasted as printed
    print(f"\nNext: {next_step_hint(scratch, best.id if best else None)}", flush=True)
    if best is not None:
        print(f"Explore: {next_step_hint(scratch, None)}", flush=True)
    return 0


def next_step_hint(scratch: Path, finding: int | None) -> str:
    """The shell line the demo ends with; run as printed from the directory the demo ran
    in, it writes the patch into the scratch repository and applies it there."""
    cd = f"cd {shlex.quote(str(scratch))}"
    if finding is None:
        return f"{cd} && magneton-tui --db db a b"
    return (
        f"{cd} && magneton export-patch --db db a b --finding {finding} -o fix.patch "
        "&& git apply fix.patch"
    )
