"""`magneton eval CASES_DIR [--json] [--db DIR] [--case NAME ...]`: the diagnosis case suite.

Each case is a directory with `a.py` and `b.py` (same task, two implementations, each with
`setup()` and `main(*setup())`) and `expect.toml` (what a correct diagnosis says). For each
case: record both scripts (each in its own `magneton record` process — scripts set global
flags at import, which must not leak from one recording into the next), diff, diagnose,
and compare with the expectation. Prints a table like the paper's Table 2: case,
diagnosed ✓/✗ (with the first failed check), end-to-end energy and time difference,
category and root cause.

expect.toml keys: `finding` (bool: must a finding cover `region_ops`?), `region_ops`
(operator names or APIs; the relevant finding's regions contain one of them),
`wasteful` ("a", "b" or "either"), `category`, `kind` (root-cause kind), `variable`,
`file` (basename of the origin), `line_contains` (text of the origin line), `rule`,
`divergence_level`, `option` (the command-line flag the wasteful side's value came from),
`key` (the config-file key it came from, dotted: `model.attn_implementation`),
`patch` (bool: a patch is expected; it must apply with `git apply` to a copy of the
case and, for a script pair, the patched script must still run setup() and main()),
`min_repeat` (timed calls to record at least: for a case whose difference is a small
share of the run on a CPU),
`power` (the recordings' `--power`, e.g. `model:work-only` for a negative control judged
on the work done rather than on a shared CPU's wall time).

A **program case** has no a.py/b.py: its expect.toml has a `[program]` table with `a` and
`b`, each the argument list of an unmodified program run from the case directory (e.g.
`["train.py", "--foreach", "0"]`), `steps` (`--steps WAIT:WARMUP:ACTIVE`) and, for a
program that reads a setting from its environment, `env = {a = {VAR = "..."}, b = {...}}`;
both are recorded as `magneton record --steps ... -- python ARGS` is, from the case
directory. Such a case exercises what a script pair cannot: a cause that is a
command-line flag, an environment variable or a config file. Every command line a finding
suggests must parse with the program's own parser (the program is run up to its parse),
and side a is recorded a second time and diffed against the first: that A/A must flag
nothing (`--no-aa` skips it).
With `wasteful = "either"` (which side is faster depends on the CPU) `line_contains` and
`patch` may be tables keyed by the wasteful side (`{a = "...", b = "..."}`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from magneton.model import Finding, MagnetonError, RootCause, WorkerError

from ._cases import PATCHED_RUN_TIMEOUT_S, command_refusal, load_expect, record

if TYPE_CHECKING:
    from magneton.graphdb import ProfileDB
    from magneton.tracer.api import WarmHold


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "eval",
        help="record, diff and diagnose every case of a case suite; print a Table-2 summary",
        description=(
            "For every case directory (a.py, b.py, expect.toml) under CASES_DIR: record both "
            "scripts, diff them, diagnose the findings and check the diagnosis against "
            "expect.toml."
        ),
    )
    p.add_argument("cases", help="directory of case directories (e.g. examples/cases)")
    p.add_argument("--db", help="DB directory to keep the recordings (default: a temp dir)")
    p.add_argument("--case", action="append", help="only this case (repeatable)")
    p.add_argument("--repeat", type=int, default=3, help="timed calls per recording (default 3)")
    p.add_argument("--no-rerun", action="store_true", help="diagnose without re-running scripts")
    p.add_argument(
        "--reuse",
        action="store_true",
        help="with --db: diagnose the recordings already there instead of recording again "
        "(compares two versions of the diagnosis on the same measurements)",
    )
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    p.add_argument(
        "--advise",
        action="store_true",
        help="CASES_DIR is a one-program corpus (examples/advise): run `magneton advise` on "
        "each and print found / among the first three / false suggestions",
    )
    p.add_argument(
        "--max-variants", type=int, default=8, help="with --advise: variants per case (default 8)"
    )
    p.add_argument(
        "--no-aa",
        action="store_true",
        help="skip the A/A of program cases (side a recorded twice, diffed: must be silent)",
    )
    p.add_argument(
        "--steady",
        action="store_true",
        help="record in the steady mode (magneton record --steady; docs/programs.md)",
    )
    p.set_defaults(func=run)


@dataclass
class CaseResult:
    case: str
    diagnosed: bool
    reason: str = ""
    energy_diff: float | None = None  # (E_wasteful - E_efficient) / E_wasteful, end to end
    time_diff: float | None = None
    wasteful: str | None = None
    category: str | None = None
    root_cause: str = ""
    finding: dict | None = None
    seconds: dict[str, float] = field(default_factory=dict)
    expect: dict = field(default_factory=dict)
    aa: str = ""  # a program case's A/A: "silent", or what it flagged ("" not run)

    def to_json(self) -> dict:
        return {
            "case": self.case,
            "diagnosed": self.diagnosed,
            "reason": self.reason,
            "energy_diff": self.energy_diff,
            "time_diff": self.time_diff,
            "wasteful": self.wasteful,
            "category": self.category,
            "root_cause": self.root_cause,
            "seconds": self.seconds,
            "finding": self.finding,
            "aa": self.aa,
        }


def case_dirs(root: str, only: list[str] | None = None) -> list[Path]:
    base = Path(root)
    if not base.is_dir():
        raise MagnetonError(f"no such case directory: {root}")
    out = [d for d in sorted(base.iterdir()) if d.is_dir() and is_case(d)]
    if only:
        names = {d.name for d in out}
        missing = [n for n in only if n not in names]
        if missing:
            raise MagnetonError(
                f"no case {', '.join(missing)} in {root} (cases: {', '.join(sorted(names))})"
            )
        out = [d for d in out if d.name in only]
    if not out:
        raise MagnetonError(f"no cases (directories with a.py and b.py) in {root}")
    return out


def is_case(d: Path) -> bool:
    """A script pair (a.py and b.py) or a program case (expect.toml with `[program]`)."""
    if (d / "a.py").is_file() and (d / "b.py").is_file():
        return True
    return (d / "expect.toml").is_file() and "program" in load_expect(d)


def record_args(expect: dict, repeat: int) -> list[str]:
    """The `magneton record` options of a script case's recordings: `--repeat` (at least
    the case's `min_repeat`: a difference that is a small share of the run on a CPU asks
    for more timed calls) and its `power`, if it names one."""
    n = max(repeat, int(expect.get("min_repeat", 0)))
    return ["--repeat", str(n), *(["--power", expect["power"]] if "power" in expect else [])]


def record_side(
    case: Path, expect: dict, side: str, db: str, repeat: int, run: str = "", steady: bool = False
) -> None:
    """Record side `side` of a case as run `run` (default: the side's name): its script,
    or its program run (`[program]`, whose window is `--steps`: `record` takes no
    `--repeat` for a program), run from the case directory with the side's `env`."""
    prog = expect.get("program")
    mode = ["--steady"] if steady else []
    if prog is None:
        record([str(case / f"{side}.py")], db, run or side, [*record_args(expect, repeat), *mode])
        return
    power = ["--power", expect["power"]] if "power" in expect else []
    argv = prog.get(side)
    if not isinstance(argv, list) or not argv:
        raise MagnetonError(f"{case / 'expect.toml'}: [program] needs a list `{side}`")
    steps = ["--steps", str(prog.get("steps", "1:1:3"))]
    command = ["--", "python", argv[0], *map(str, argv[1:])]
    env = {k: str(v) for k, v in (prog.get("env") or {}).get(side, {}).items()}
    record([], db, run or side, [*steps, *power, *mode, *command], cwd=case, env=env)


def relevant_finding(result, db: ProfileDB, region_ops: list[str]):
    """The finding whose regions contain one of `region_ops` (largest saving first)."""
    from magneton.diagnose.api import side_facts

    # interpreter findings hold the ops Python led to, not a matched region
    regions = [f for f in result.findings if f.kind != "interpreter"]
    if not region_ops:
        return regions[0] if regions else None
    pa = db.load_profile(result.a.run)
    pb = db.load_profile(result.b.run)
    want = set(region_ops)
    for f in regions:
        va = side_facts(pa, f.region_a.ops).vocabulary()
        vb = side_facts(pb, f.region_b.ops).vocabulary()
        if (va | vb) & want:
            return f
    return None


def check(expect: dict, f: Finding) -> str:
    """'' when the finding's diagnosis meets the expectation, else the first failed check."""
    rc = f.root_cause or RootCause(kind="")
    w = expect.get("wasteful", "either")
    # a case whose faster side depends on the CPU ("either") may key its expectations by
    # the side found wasteful: line_contains = {a = "...", b = "..."}
    expect = {k: (v.get(f.wasteful, "") if isinstance(v, dict) else v) for k, v in expect.items()}
    if w in ("a", "b") and f.wasteful != w:
        return f"wasteful side is {f.wasteful}, expected {w}"
    if "category" in expect and f.category != expect["category"]:
        return f"category {f.category}, expected {expect['category']}"
    if "kind" in expect and (rc.kind or None) != expect["kind"]:
        return f"root cause kind {rc.kind or None}, expected {expect['kind']}"
    if "variable" in expect and (rc.variable or "") != expect["variable"]:
        return f"variable {rc.variable}, expected {expect['variable']}"
    if "key" in expect and (rc.variable or "") != expect["key"]:  # a config file's key
        return f"config-file key {rc.variable}, expected {expect['key']}"
    if "file" in expect:
        wasteful_file = expect["file"] if w != "either" else f"{f.wasteful}.py"
        if os.path.basename(rc.file or "") != wasteful_file:
            return f"origin file {rc.file}, expected {wasteful_file}"
    if "line_contains" in expect:
        line = ""
        if rc.file and rc.line:
            import linecache

            line = linecache.getline(rc.file, rc.line)
        if expect["line_contains"] not in line:
            return f"origin line {line.strip()!r} lacks {expect['line_contains']!r}"
    if "option" in expect:
        o = rc.origins.get(f.wasteful)
        if o is None or o.option != expect["option"]:
            return f"command-line option {o.option if o else None}, expected {expect['option']}"
    rule_id = rc.rule.id if rc.rule is not None else None
    if "rule" in expect and rule_id != expect["rule"]:
        return f"rule {rule_id}, expected {expect['rule']}"
    level = f.divergence.level if f.divergence is not None else None
    if "divergence_level" in expect and level != expect["divergence_level"]:
        return f"divergence level {level}, expected {expect['divergence_level']}"
    if expect.get("patch") and not (f.fix is not None and f.fix.patch):
        return "no patch"
    return ""


def describe(rc: RootCause | None) -> str:
    if rc is None:
        return ""
    var = rc.variable or ""
    where = f" @ {os.path.basename(rc.file)}:{rc.line}" if rc.file else ""
    if rc.kind == "code":
        return f"code{where}: {var}"
    a, b = rc.values.get("a"), rc.values.get("b")
    if a is not None or b is not None:
        return f"{rc.kind} {var}={a} vs {b}{where}"
    return f"{rc.kind} {var}{where}"


def _has_run(db_path: str, *runs: str) -> bool:
    from magneton.graphdb import open_db

    if not os.path.exists(db_path):
        return False
    with open_db(db_path, read_only=True) as db:
        return all(db.has_run(r) for r in runs)


def _has_runs(db_path: str) -> bool:
    return _has_run(db_path, "a", "b")


@dataclass
class EvalOptions:
    repeat: int = 3
    rerun: bool = True
    reuse: bool = False
    aa: bool = True  # program cases: record side a twice and diff (must be silent)
    steady: bool = False


def eval_case(
    case: Path, db_dir: str, opts: EvalOptions | None = None, hold: WarmHold | None = None
) -> CaseResult:
    """Record, diff and diagnose one case and judge the diagnosis. `hold`
    (tracer/timing/warm.py `WarmHold`): holds the diff's warm workers until the case is
    judged, so that the patched script's check is a child of the case's own zygote; they
    end with the case (default: with the diff)."""
    try:
        return _eval_case(case, db_dir, opts, hold)
    finally:
        if hold is not None:
            hold.release()  # the next case's diff starts zygotes of its own


def _eval_case(
    case: Path, db_dir: str, opts: EvalOptions | None, hold: WarmHold | None
) -> CaseResult:
    from magneton.diagnose.api import run_diff, store_outcome
    from magneton.graphdb import open_db

    opts = opts or EvalOptions()
    expect = load_expect(case)
    res = CaseResult(case=case.name, diagnosed=False, expect=expect)
    db_path = os.path.abspath(os.path.join(db_dir, case.name))
    t0 = time.perf_counter()
    if not (opts.reuse and _has_runs(db_path)):
        for side in ("a", "b"):
            record_side(case, expect, side, db_path, opts.repeat, steady=opts.steady)
    t1 = time.perf_counter()
    detected: list[float] = []

    def progress(stage: str, *_: object) -> None:
        if stage == "detected":
            detected.append(time.perf_counter())

    with open_db(db_path) as db:
        out = run_diff(db, "a", "b", rerun=opts.rerun, progress=progress, hold=hold)
        t3 = time.perf_counter()
        store_outcome(db, out)
        result = out.result
        t2 = detected[0] if detected else t3
        f = relevant_finding(result, db, expect.get("region_ops", []))
    res.seconds = {
        "record": round(t1 - t0, 2),
        "diff": round(t2 - t1, 2),
        "diagnose": round(t3 - t2, 2),
    }
    ea, eb = result.a.energy_j, result.b.energy_j
    ta, tb = result.a.time_s, result.b.time_s
    if f is not None:
        res.wasteful = f.wasteful
        res.category = f.category
        res.root_cause = describe(f.root_cause)
        res.finding = f.to_json()
    hi_e, lo_e = (ea, eb) if (f is None or f.wasteful == "a") else (eb, ea)
    hi_t, lo_t = (ta, tb) if (f is None or f.wasteful == "a") else (tb, ta)
    res.energy_diff = (hi_e - lo_e) / hi_e if hi_e > 0 else None
    res.time_diff = (hi_t - lo_t) / hi_t if hi_t > 0 else None
    if not expect.get("finding", True):
        res.diagnosed = f is None
        res.reason = "" if f is None else f"unexpected finding {f.id} ({describe(f.root_cause)})"
        if f is None:
            res.root_cause = "no finding (as expected)"
        return res
    if f is None:
        # the confirmation's note too: a candidate it did not confirm leaves no finding
        res.reason = "; ".join(
            x
            for x in (
                result.message or "no finding covers the expected region",
                result.confirm_note,
            )
            if x
        )
        return res
    res.reason = check(expect, f)
    if not res.reason and expect.get("patch") and f.fix is not None and f.fix.patch:
        res.reason = patch_problem(case, expect, f.fix.patch, f.wasteful, hold)
    if not res.reason and "program" in expect:
        res.reason = command_problem(case, result.findings)
    if "program" in expect and opts.aa:
        res.aa = aa_problem(case, expect, db_path, opts, hold) or "silent"
    res.diagnosed = not res.reason and res.aa in ("", "silent")
    return res


def command_problem(case: Path, findings: list[Finding]) -> str:
    """'' when every command line the findings suggest parses with the program's own
    parser (the program run up to its parse, tracer/programs/cmdline.py `parses`)."""
    for f in findings:
        if f.fix is None or not f.fix.command:
            continue
        why = command_refusal(case, f.fix.command)
        if why:
            return f"finding {f.id}'s command does not parse: {f.fix.command}: {why}"
    return ""


def aa_problem(
    case: Path, expect: dict, db_path: str, opts: EvalOptions, hold: WarmHold | None = None
) -> str:
    """'' when side a recorded a second time (`a2`) and diffed against its first
    recording flags nothing; else what it flagged."""
    from magneton.diagnose.api import run_diff
    from magneton.graphdb import open_db

    if not (opts.reuse and _has_run(db_path, "a2")):
        record_side(case, expect, "a", db_path, opts.repeat, run="a2", steady=opts.steady)
    with open_db(db_path, read_only=True) as db:
        result = run_diff(db, "a", "a2", rerun=opts.rerun, hold=hold).result
    if not result.findings:
        return ""
    return f"A/A flagged {len(result.findings)}: " + "; ".join(
        f"#{f.id} {f.saving_share:.1%} ({describe(f.root_cause) or f.verdict})"
        for f in result.findings[:3]
    )


def patch_problem(
    case: Path, expect: dict, patch: str, wasteful: str, hold: WarmHold | None = None
) -> str:
    """'' when the patch applies to a copy of the case (`git apply`, as a user applies
    it) and, for a script pair, the patched wasteful script still runs setup() and
    main() once; else what went wrong. A patch that is present but breaks the program
    is wrong advice, not a diagnosis: porting one value of a two-statement change once
    fed flattened logits to unflattened labels.

    The patched script runs in a child of a warm worker (tracer/timing/warm.py): the
    zygote the case's diff re-ran its scripts in, when `hold` holds one whose imports the
    patched script begins with (a fresh process of that script, without its 1.3 s of
    torch import), else one started for this run."""
    with tempfile.TemporaryDirectory(prefix="magneton-eval-") as tmp:
        work = Path(tmp) / case.name
        shutil.copytree(case, work)
        (Path(tmp) / "fix.patch").write_text(patch)
        applied = subprocess.run(
            ["git", "apply", str(Path(tmp) / "fix.patch")],
            cwd=work,
            capture_output=True,
            text=True,
        )
        if applied.returncode != 0:
            return f"patch does not apply: {' '.join(applied.stderr.split())[:200]}"
        if "program" in expect:
            return ""  # a program's run is the recording's business; the patch applies
        from magneton.tracer.api import WarmWorker

        script = str(work / f"{wasteful}.py")
        worker = hold.last_for(script) if hold is not None else None
        with contextlib.ExitStack() as own:
            if worker is None:
                worker = own.enter_context(WarmWorker([script], tmp_prefix="magneton-eval-"))
            job = worker.submit(f"{__name__}:run_patched", script, cwd=str(work))
            try:
                ran = worker.result(job, timeout_s=PATCHED_RUN_TIMEOUT_S)
            except WorkerError as e:
                return f"patched {wasteful}.py fails: {e}"
        if not ran.ok:
            return f"patched {wasteful}.py fails: {ran.error[:200]}"
    return ""


def run_patched(script: str) -> None:
    """A warm worker's job (patch_problem): run `script`'s setup() and main() once."""
    import runpy

    m = runpy.run_path(script)
    a = m["setup"]() if "setup" in m else ()
    m["main"](*(a if isinstance(a, tuple) else (a,)))


def print_table(results: list[CaseResult]) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title="Magneton case suite (energy: as recorded — see each run's energy method)")
    t.add_column("case")
    t.add_column("diag.", justify="center")
    t.add_column("energy diff.", justify="right")
    t.add_column("time diff.", justify="right")
    t.add_column("wasteful", justify="center")
    t.add_column("category")
    t.add_column("root cause", overflow="fold")
    if any(r.aa for r in results):
        t.add_column("A/A")
    for r in results:
        mark = "[green]✓[/]" if r.diagnosed else "[red]✗[/]"
        t.add_row(
            r.case,
            mark,
            "" if r.energy_diff is None else f"{r.energy_diff:.1%}",
            "" if r.time_diff is None else f"{r.time_diff:.1%}",
            r.wasteful or "-",
            r.category or "-",
            r.root_cause + (f"\n[red]{r.reason}[/]" if r.reason else ""),
            *([r.aa or "-"] if any(x.aa for x in results) else []),
        )
    Console(emoji=False).print(t)
    ok = sum(r.diagnosed for r in results)
    Console(emoji=False).print(f"diagnosed {ok} of {len(results)} cases")


def run(args: argparse.Namespace) -> int:
    if args.repeat < 1:
        raise MagnetonError("--repeat must be >= 1")
    if args.reuse and not args.db:
        raise MagnetonError("--reuse needs --db DIR (the recordings of an earlier eval)")
    if args.advise:
        return _run_advise(args)
    cases = case_dirs(args.cases, args.case)
    tmp = None
    db_dir = args.db
    if db_dir is None:
        tmp = tempfile.TemporaryDirectory(prefix="magneton-eval-")
        db_dir = tmp.name
    try:
        results = []
        opts = EvalOptions(
            repeat=args.repeat,
            rerun=not args.no_rerun,
            reuse=args.reuse,
            aa=not args.no_aa,
            steady=args.steady,
        )
        from magneton.tracer.api import WarmHold

        with WarmHold() as hold:  # each case's diff workers, until the case is judged
            for case in cases:
                try:
                    results.append(eval_case(case, db_dir, opts, hold))
                except MagnetonError as e:
                    results.append(CaseResult(case=case.name, diagnosed=False, reason=str(e)))
    finally:
        if tmp is not None:
            tmp.cleanup()
    if args.json:
        print(json.dumps({"cases": [r.to_json() for r in results]}, indent=2))
    else:
        print_table(results)
    return 0 if all(r.diagnosed for r in results) else 1


def _run_advise(args: argparse.Namespace) -> int:
    from ._advise_suite import advise_cases, eval_advise_case, print_advise_table

    cases = advise_cases(args.cases, args.case)
    with contextlib.ExitStack() as stack:
        db_dir = args.db or stack.enter_context(
            tempfile.TemporaryDirectory(prefix="magneton-eval-")
        )
        results = [eval_advise_case(c, db_dir, args.max_variants) for c in cases]
    if args.json:
        print(json.dumps({"cases": [r.to_json() for r in results]}, indent=2))
    else:
        print_advise_table(results)
    return 0 if all(r.ok for r in results) else 1
