"""`magneton advise`: one program is enough. Record it (or take its stored run), propose
changes of its settings from what the run shows and the rule base knows, record each
variant the same way, check that it does the same job, re-measure it against the base
in interleaved rounds and rank what holds (diagnose/advice.py says how each step is
decided).

    magneton advise --db D --run base --steps 1:1:9 -- python train.py ARGS
    magneton advise a.py --db D --run base

Each variant is stored as a run (`base~1`, ...) with its diff against the base, so
`magneton query` sees them and `magneton-tui --db D base base~1` opens one like any
diff. The base is recorded only when the DB has no run of that name; the variants are
recorded from scratch copies of the program's folder, removed when the command ends (the
user's folder is never written). `--max-variants` and `--budget-s` bound the work; what
they leave untried is listed. With `--fail-on waste` the command exits 3 (as `diff`)
when a suggestion saves at least `--fail-on-share` of the run: the CI gate for one
program.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from magneton.model import MagnetonError, Profile, Tried

from .diff import DEFAULT_FAIL_ON_SHARE, EXIT_WASTE

DEFAULT_MAX_VARIANTS = 8


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "advise",
        help="one program: try changes of its settings and suggest those that save energy",
        description=(
            "Record a program (or a script's setup()/main()), propose changes of the "
            "settings that decide its costly operators (its flags and choices, environment "
            "variables, config-file keys, module constants, API arguments the rule base "
            "knows), record each variant, keep those that compute the same outputs, "
            "re-measure them against the base in interleaved rounds and rank the savings."
        ),
    )
    p.add_argument("script", nargs="?", help="Python file defining setup() and main()")
    p.add_argument(
        "command", nargs="*", help="or, after `--`: the program (`python train.py ARGS`)"
    )
    p.add_argument("--db", required=True, help="profile DB directory (created if missing)")
    p.add_argument("--run", required=True, help="the base run (recorded when the DB has none)")
    p.add_argument("--steps", metavar="WAIT:WARMUP:ACTIVE", help="program: steps to record")
    p.add_argument("--window", default="", help="program: the magneton.window(NAME) to record")
    p.add_argument("--step-fn", default="", help="JAX/TensorFlow program: its step function")
    p.add_argument("--repeat", type=int, default=3, help="script: timed calls (default 3)")
    p.add_argument("--power", default="auto", help="as `record --power` (default auto)")
    p.add_argument(
        "--max-variants",
        type=int,
        default=DEFAULT_MAX_VARIANTS,
        help=f"variants to try at most (default {DEFAULT_MAX_VARIANTS})",
    )
    p.add_argument(
        "--budget-s",
        type=float,
        default=None,
        help="start no variant after this many seconds (default: no limit)",
    )
    p.add_argument("--json", metavar="OUT", default=None, help="also write the result as JSON")
    p.add_argument(
        "--fail-on", choices=["waste"], default=None, help="CI gate: exit 3 on a suggestion"
    )
    p.add_argument(
        "--fail-on-share",
        type=float,
        default=None,
        metavar="X",
        help=f"with --fail-on: the least saving that fails (default {DEFAULT_FAIL_ON_SHARE:g})",
    )
    p.add_argument("-q", "--quiet", action="store_true", help="no progress display")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from magneton.diagnose.api import ranked
    from magneton.render.advice import advice_json, print_advice

    if args.max_variants < 1:
        raise MagnetonError("--max-variants must be >= 1")
    share = DEFAULT_FAIL_ON_SHARE if args.fail_on_share is None else args.fail_on_share
    if not 0.0 <= share < 1.0:
        raise MagnetonError(f"--fail-on-share must be in [0, 1), got {share}")
    db = os.path.abspath(args.db)
    if not _stored(db, args.run):
        if not (args.script or args.command):
            raise MagnetonError(f"no run '{args.run}' in {args.db}: give the program to record it")
        _record_base(args, db)
    else:
        print(
            f"magneton: advising on the stored run '{args.run}' (not recorded again)",
            file=sys.stderr,
        )
    base, tried, untried = advise(db, args.run, args.max_variants, args.budget_s, args.quiet)
    result = advice_json(base, tried, untried, args.db)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print_advice(base, tried, untried, args.db)
    if args.fail_on == "waste":
        hits = [t for t in ranked(tried) if (t.saving_share or 0.0) >= share]
        if hits:
            print(
                f"magneton: --fail-on waste: {len(hits)} confirmed suggestion(s) save at least "
                f"{share:.0%} of the run",
                file=sys.stderr,
            )
            return EXIT_WASTE
    return 0


def advise(
    db: str,
    run: str,
    max_variants: int = DEFAULT_MAX_VARIANTS,
    budget_s: float | None = None,
    quiet: bool = False,
) -> tuple[Profile, list[Tried], list]:
    """Propose changes of stored run `run` and try the first `max_variants` (none started
    after `budget_s`): the base, what was tried, and the changes left untried."""
    from magneton.diagnose.api import propose
    from magneton.graphdb import load_profile

    base = load_profile(db, run)
    t0 = time.perf_counter()
    changes = propose(base)
    todo, untried = changes[:max_variants], changes[max_variants:]
    tried: list[Tried] = []
    with tempfile.TemporaryDirectory(prefix="magneton-advise-") as tmp:
        for k, change in enumerate(todo, 1):
            if budget_s is not None and time.perf_counter() - t0 > budget_s:
                untried = todo[k - 1 :] + untried
                break
            tried.append(_try(db, base, change, k, len(todo), Path(tmp), quiet))
    return base, tried, untried


def _try(db: str, base: Profile, change, k: int, n: int, work: Path, quiet: bool) -> Tried:
    from magneton.diagnose.api import try_change

    if not quiet:
        print(f"magneton: variant {k}/{n}: {change.describe()} ({change.source})", file=sys.stderr)
    tried = try_change(db, base, change, f"{base.run.name}~{k}", work)
    if not quiet:
        what = tried.error or tried.first_difference or _saving(tried)
        print(f"magneton:   {tried.status}" + (f": {what}" if what else ""), file=sys.stderr)
    return tried


def _saving(t: Tried) -> str:
    if t.saving_share is None or t.interval is None:
        return ""
    lo, hi = t.interval
    return f"{t.saving_share:.1%} [{lo:.1%}, {hi:.1%}] over {t.rounds} rounds"


def _stored(db: str, run: str) -> bool:
    from magneton.graphdb import open_db

    if not os.path.exists(db):
        return False
    with open_db(db, read_only=True, create=False) as handle:
        return handle.has_run(run)


def _record_base(args: argparse.Namespace, db: str) -> None:
    """Record the base as `magneton record` would, in a process of its own (the
    program's global settings must not leak into the variants' recordings)."""
    cmd = [sys.executable, "-m", "magneton", "record", "--db", db, "--run", args.run, "-q"]
    cmd += ["--power", args.power]
    if args.command or args.steps or args.window:
        cmd += ["--steps", args.steps] if args.steps else []
        cmd += ["--window", args.window] if args.window else []
        cmd += ["--step-fn", args.step_fn] if args.step_fn else []
        cmd += ["--", *([args.script] if args.script else []), *args.command]
    else:
        cmd += [args.script, "--repeat", str(args.repeat)]
    res = subprocess.run(cmd, check=False)
    if res.returncode != 0:
        raise MagnetonError(f"recording the base run '{args.run}' failed (exit {res.returncode})")
