"""Real-size pairs end to end through the CLI: record, store, diff, diagnose (issue: the
engine must not crash on real models, and a diff must stay within time and memory).

Each pair in `examples/scale/<name>/` (a.py, b.py, expect.toml: the known cause) is a real
Hugging Face model built from a config — GPT-2 at 12 layers, Llama `generate()` with a KV
cache over 32 new tokens, a 12-layer BERT encoder, a BART encoder-decoder, a ViT, a GPT-2
training step with AdamW — recorded with `magneton record` into one DB per pair, then
diffed with `magneton diff --json` (diagnosis included: divergence, key-variable re-run,
data-flow, fix). Every step is its own process, as a user runs it; its wall time and
peak RSS come from `os.wait4` on that process (the re-run workers a diff starts are
counted in the diff's time, not in its RSS).

Reported per pair: operators per side, record time (the slower side), DB size, diff time
and peak RSS, the top finding and whether its root cause names the expected variable at
the expected line. `--engine-queries` additionally runs schema.md's documented queries and
the kernel-path query (the one Kùzu 0.11.3 crashed in) on a synthetic run of `--ops`
operators (default 100k): save, load and every query must complete.

    python benchmarks/scale.py [--pair NAME ...] [--json OUT] [--keep DIR]
    python benchmarks/scale.py --engine-queries [--ops 100000]

What decides the numbers is printed first: versions, threads, load average before/after.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
import tomllib
from dataclasses import asdict, dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
PAIRS = ROOT / "examples" / "scale"


@dataclass
class Step:
    rc: int
    wall_s: float
    peak_rss_mb: float
    stdout: str
    stderr: str


@dataclass
class PairResult:
    name: str
    ops_a: int
    ops_b: int
    record_s: float
    record_rss_mb: float
    db_mb: float
    diff_s: float
    diff_rss_mb: float
    diff_rc: int
    findings: int
    top_finding: str
    root_cause: str
    cause_right: bool
    error: str = ""


def run_step(argv: list[str], cwd: Path) -> Step:
    """Run one CLI step as its own process; wall time and peak RSS from wait4."""
    t0 = time.perf_counter()
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(argv, cwd=cwd, stdout=out, stderr=err, text=True)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - t0
        out.seek(0)
        err.seek(0)
        return Step(proc.returncode, wall, usage.ru_maxrss / 1024, out.read(), err.read())


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "magneton", *args]


def _dir_mb(d: Path) -> float:
    return sum(f.stat().st_size for f in d.rglob("*") if f.is_file()) / 1e6


def _ops(db: Path, run: str, cwd: Path) -> int:
    step = run_step(_cli("runs", "--db", str(db), "--json"), cwd)
    try:
        return next(int(r["op_count"]) for r in json.loads(step.stdout) if r["name"] == run)
    except (ValueError, StopIteration, KeyError):
        return -1


def _cause(result: dict, expect: dict) -> tuple[str, str, bool]:
    """The top finding, its root cause as shown, and whether it is the expected one
    (the expected variable, set on the expected line of a.py)."""
    findings = result.get("findings") or []
    if not findings:
        return "none", "", False
    top = findings[0]
    ops = (top.get("ops") or {}).get("a") or []
    share = top.get("saving_share") or 0.0
    label = f"#{top.get('id', 1)} {top.get('verdict', '')} {share:.0%} {' '.join(ops[:2])}"
    cause = top.get("root_cause") or {}
    var, code = cause.get("variable") or "", cause.get("code") or ""
    file = Path(cause.get("file") or "").name
    shown = f"{var or cause.get('kind', '?')} @ {file}:{cause.get('line')}".strip()
    right = var == expect.get("variable") and expect.get("line_contains", "") in code
    right = right and file == expect.get("file", "a.py")
    return label[:80], shown[:80], right


def run_pair(pair: Path, work: Path) -> PairResult:
    expect = tomllib.loads((pair / "expect.toml").read_text())
    db = work / "db"
    rec = [
        run_step(_cli("record", str(pair / f"{s}.py"), "--db", str(db), "--run", s, "-q"), work)
        for s in ("a", "b")
    ]
    bad = next((s for s in rec if s.rc != 0), None)
    if bad is not None:
        return PairResult(
            pair.name,
            -1,
            -1,
            max(s.wall_s for s in rec),
            0,
            0,
            0,
            0,
            bad.rc,
            0,
            "",
            "",
            False,
            error=(bad.stderr.strip().splitlines() or ["?"])[-1],
        )
    diff = run_step(_cli("diff", "--db", str(db), "a", "b", "--json"), work)
    result: dict = {}
    if diff.rc in (0, 3):
        try:
            result = json.loads(diff.stdout)
        except json.JSONDecodeError:
            result = {}
    top, cause, right = _cause(result, expect)
    return PairResult(
        name=pair.name,
        ops_a=_ops(db, "a", work),
        ops_b=_ops(db, "b", work),
        record_s=max(s.wall_s for s in rec),
        record_rss_mb=max(s.peak_rss_mb for s in rec),
        db_mb=_dir_mb(db),
        diff_s=diff.wall_s,
        diff_rss_mb=diff.peak_rss_mb,
        diff_rc=diff.rc,
        findings=len(result.get("findings") or []),
        top_finding=top,
        root_cause=cause,
        cause_right=right,
        error="" if diff.rc in (0, 3) else (diff.stderr.strip().splitlines() or ["?"])[-1],
    )


def context() -> dict:
    """benchmarks/context.py's, with torch's thread count as a fresh `magneton` process
    (each step of this benchmark is one) gets it, and the load average as `load_before`."""
    from context import context as measured

    ctx = measured()
    ctx["torch_threads"] = _torch_threads()
    ctx["load_before"] = ctx.pop("load_avg_1m")
    return ctx


def _torch_threads() -> int:
    out = subprocess.run(
        [sys.executable, "-c", "import torch; print(torch.get_num_threads())"],
        capture_output=True,
        text=True,
    )
    return int(out.stdout.strip() or -1)


def _load_by_path(name: str, path: Path):
    # the synthetic-profile generator and the doc-query reader live with the tests that
    # pin them (tests/ is not a package): load them by path
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    sys.path.insert(0, str(path.parent))
    spec.loader.exec_module(mod)
    return mod


def run_engine_queries(n_ops: int, console: Console) -> list[dict]:
    """Save two synthetic runs of `n_ops` operators, load one back, then run every
    documented query of docs/schema.md and the kernel-path and divergence queries over
    all operators; each row: what ran, seconds, peak RSS of this process so far."""
    from magneton.graphdb import open_db, paths

    graphdb_tests = _load_by_path("_graphdb_tests", ROOT / "tests" / "test_graphdb.py")
    doc = _load_by_path("_schema_queries", ROOT / "tests" / "test_schema_queries.py")
    rows: list[dict] = []

    def timed(what: str, fn) -> None:
        t0 = time.perf_counter()
        try:
            out, error = fn(), ""
        except Exception as e:  # a query the engine cannot run is a result here
            out, error = None, str(e).splitlines()[0][:120]
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        n = len(out) if isinstance(out, list) else ""
        rows.append(
            {"what": what, "s": time.perf_counter() - t0, "rss_mb": rss, "rows": n, "error": error}
        )
        console.print(f"{what}: {rows[-1]['s']:.1f} s, {rss:.0f} MB {error}")

    with tempfile.TemporaryDirectory(prefix="scale-engine-") as d:
        a = graphdb_tests.synthetic_profile("a", n_ops=n_ops, seed=1)
        b = graphdb_tests.synthetic_profile("b", n_ops=n_ops, seed=2, gelu="aten::tanh")
        with open_db(d) as db:
            timed(f"save a ({n_ops} ops)", lambda: db.save_profile(a))
            timed(f"save b ({n_ops} ops)", lambda: db.save_profile(b))
        with open_db(d, read_only=True) as db:
            timed("load a", lambda: db.load_profile("a") and [])
            every = list(range(n_ops))
            timed("kernel paths, every op of a", lambda: list(paths.kernel_paths(db, "a", every)))
            for k, (title, cypher) in enumerate(doc.BLOCKS):
                params = dict(p.split("=", 1) for p in doc._params(cypher))
                params = {k2: _param_value(v) for k2, v in params.items()}
                timed(
                    f"schema.md #{k + 1} {title[:40]}",
                    lambda c=cypher, p=params: db.user_query(c, p).rows,
                )
    return rows


def _param_value(v: str):
    try:
        return json.loads(v)
    except json.JSONDecodeError:
        return v


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pair", action="append", help="only these pairs (repeatable)")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--keep", help="keep each pair's DB under this directory")
    ap.add_argument("--engine-queries", action="store_true", help="the synthetic-run part")
    ap.add_argument("--ops", type=int, default=100_000, help="operators of the synthetic run")
    args = ap.parse_args(argv)
    console = Console()
    ctx = context()
    console.print(" ".join(f"{k}={v}" for k, v in ctx.items()))
    from context import OtherCpu

    others = OtherCpu()
    if args.engine_queries:
        rows = run_engine_queries(args.ops, console)
        out = {"context": ctx, "engine_queries": rows}
    else:
        names = args.pair or sorted(p.name for p in PAIRS.iterdir() if p.is_dir())
        results = []
        for name in names:
            work = Path(args.keep) / name if args.keep else Path(tempfile.mkdtemp(prefix="scale-"))
            work.mkdir(parents=True, exist_ok=True)
            console.print(f"[bold]{name}[/]: recording and diffing ...")
            results.append(run_pair(PAIRS / name, work))
        _table(console, results)
        out = {"context": ctx, "pairs": [asdict(r) for r in results]}
    ctx["load_after"] = os.getloadavg()[0]
    ctx.update(others.report())
    console.print(
        f"load average before {ctx['load_before']}, after {ctx['load_after']}; other "
        f"processes used {ctx['other_cpu_s']} CPU s (largest: {ctx['other_cpu_top']})"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))
    return 0


def _table(console: Console, results: list[PairResult]) -> None:
    t = Table(title="Real-size pairs end to end (CLI)")
    for col in (
        "pair",
        "ops a/b",
        "record s",
        "rec RSS MB",
        "DB MB",
        "diff s",
        "diff RSS MB",
        "findings",
        "top finding",
        "root cause",
        "right",
    ):
        t.add_column(col, overflow="fold")
    for r in results:
        t.add_row(
            r.name,
            f"{r.ops_a}/{r.ops_b}",
            f"{r.record_s:.0f}",
            f"{r.record_rss_mb:.0f}",
            f"{r.db_mb:.0f}",
            f"{r.diff_s:.0f}" + ("" if r.diff_rc in (0, 3) else f" (exit {r.diff_rc})"),
            f"{r.diff_rss_mb:.0f}",
            str(r.findings),
            r.top_finding if not r.error else re.sub(r"\s+", " ", r.error)[:80],
            r.root_cause,
            "yes" if r.cause_right else "no",
        )
    console.print(t)


if __name__ == "__main__":
    sys.exit(main())
