"""`magneton diff --db DIR A B [--json] [--threshold X]`: match two runs by the values
they compute and rank the regions where one spends more energy.

One diff, stored once, shown everywhere. The first `diff` of A and B runs the pipeline
and stores its result (the DB is opened read-write for that); every later `diff` (its
table, `--json`, `--csv`, `--html`), `export-patch` and the TUI show that stored diff
(`stored_diff`) instead of measuring again, until `--rerun` asks for a new one, a run is
re-recorded (the stored diff is then stale, graphdb/matches.py) or `diff` asks another
question (another `--threshold`, or `--no-rerun` against a confirmed diff and the other
way round: `_same_question`). Re-measuring on every call made each surface show numbers
of its own: one BERT pair's table said 5.2% for one cause, the page of a second
`diff --html` (17 s of re-measurement) 4.29% + 0.70%, the TUI 3.4% + 0.7%. A line on
stderr says when the stored diff is shown.

`--json` prints `DiffResult.to_json()` with the cause groups under "groups". A diff
that finds nothing comparable prints its message and exits 0 (see
diagnose/matching/diff.py). A and B may also name multi-rank jobs (runs `A/rank0`, ...);
the pipeline (diagnose/pipeline.py) compares those rank by rank, and such a diff is
made anew each time (it is stored rank pair by rank pair, never whole).

Before anything is reported, candidates are confirmed by re-measuring both scripts in
alternating rounds (diagnose/matching/confirm.py); the table's `confirmed` column and a line above
it say what that found, and `--no-rerun` turns it off with the diagnosis re-runs.

CI gate: with `--fail-on waste` the command exits 3 (`EXIT_WASTE`) after printing its
output when at least one finding has verdict "waste" (findings judged noise, and
trade-offs, never fail it) and saves at least `--fail-on-share` of the wasteful run's
energy. 3 is distinct from 1 (a crash) and 2 (bad input), so a CI job can tell "the
change wastes energy" from "the diff could not run". The share defaults to
`DEFAULT_FAIL_ON_SHARE` (1%), not 0: the same script recorded twice on a loaded runner
gave interpreter-time findings of 0.1-0.2% of the run, and a gate that fails on a no-op
change gets switched off. Findings under the share are still printed, and a line on
stderr names them as below the gate, so nothing is hidden.

The table, the diagnosis lines, the CSV and the page are render/'s, over one view of the
result (render/view.py `diff_view`: one row per cause group, `DiffResult.groups`).

`diff A A` compares a run with itself: one line says so and the command exits 0 (an A/A
check needs two recordings).
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING

from magneton.model import DiffResult, Finding
from magneton.model.names import add_full_names
from magneton.render.diff import CSV_COLUMNS, print_diagnosis, print_result, write_csv
from magneton.render.view import diff_view

if TYPE_CHECKING:
    from magneton.diagnose.api import Progress
    from magneton.graphdb import ProfileDB


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "diff",
        help="match two runs and rank the regions where one wastes energy",
        description=(
            "Match the operator graphs of runs A and B by the values flowing through them "
            "(layout-invariant tensor summaries + dominator-tree subgraph matching), then flag "
            "matched regions whose energy differs by at least the threshold. The result is "
            "stored in the DB (replacing an earlier diff of A and B)."
        ),
    )
    p.add_argument("--db", required=True, help="profile DB directory")
    p.add_argument("a", help="run A")
    p.add_argument("b", help="run B")
    p.add_argument(
        "--threshold",
        type=float,
        default=0.10,
        help="flag regions whose energies differ by at least this fraction of the larger "
        "side (default 0.10; 0.05 at the lowest)",
    )
    fmt = p.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help="print DiffResult JSON instead of a table")
    fmt.add_argument(
        "--csv",
        action="store_true",
        help="print one CSV row per finding (full names, energies, saving and its interval, "
        "verdict, cause) instead of a table",
    )
    p.add_argument(
        "--rerun",
        action="store_true",
        help="diff anew and replace the stored diff of A and B (by default a stored diff "
        "is shown as it is, without measuring again)",
    )
    p.add_argument(
        "--no-rerun",
        action="store_true",
        help="when the diff is made: confirm and diagnose from the stored profiles only "
        "(no re-measuring rounds, no line-traced re-run of the scripts)",
    )
    p.add_argument(
        "--fail-on",
        choices=["waste"],
        default=None,
        help=f"CI gate: exit {EXIT_WASTE} when a finding judged waste (not noise) exists",
    )
    p.add_argument(
        "--fail-on-share",
        type=float,
        default=None,
        metavar="X",
        help="with --fail-on: only findings saving at least this fraction of the wasteful "
        f"run's energy count (default {DEFAULT_FAIL_ON_SHARE:g}, i.e. "
        f"{DEFAULT_FAIL_ON_SHARE:.0%}%; 0 counts any)",
    )
    p.add_argument(
        "--html",
        metavar="OUT",
        default=None,
        help="also write the diff as one self-contained HTML page (findings, energy icicles "
        "by module of each matched region, power timeline, cause and patch; no network)",
    )
    add_full_names(p)
    p.set_defaults(func=run)


# exit status of `--fail-on waste` when it trips (1: crash, 2: bad input)
EXIT_WASTE = 3
# the least share of the wasteful run's energy a finding must save to fail the gate
# (module docstring: below it, recording-to-recording noise of a loaded CI runner)
DEFAULT_FAIL_ON_SHARE = 0.01


def gate_findings(result: DiffResult, min_share: float) -> list[Finding]:
    """The findings that trip `--fail-on waste`: verdict waste, saving ≥ min_share."""
    return [f for f in result.findings if f.verdict == "waste" and f.saving_share >= min_share]


@contextlib.contextmanager
def diff_progress() -> Iterator[Progress | None]:
    """A rich progress line on stderr while the diff runs (loading, matching, confirming,
    diagnosing N/M, with the elapsed time), only when stderr is a terminal: a diff that
    re-runs the scripts is 15-20 s of silence otherwise. Piped or logged, nothing is
    written, so captured stderr and CI logs stay clean; stdout is never touched."""
    if not sys.stderr.isatty():
        yield None
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
    )
    from rich.progress import Progress as Bar

    bar = Bar(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=True,
    )
    task = bar.add_task("loading the runs", total=None)
    stages = {
        "loaded": "matching regions by value",
        "matched": "confirming candidates (re-measuring both scripts)",
        "detected": "diagnosing findings",
    }

    def progress(stage: str, result: DiffResult, done: int, total: int) -> None:
        if stage == "diagnosed":
            bar.update(task, description="diagnosing findings", completed=done, total=total)
        elif stage in stages:
            bar.update(task, description=stages[stage], completed=done, total=total or None)

    with bar:
        yield progress


def below_gate(result: DiffResult, min_share: float) -> list[Finding]:
    """Findings judged waste that save less than `min_share`: printed, not failing."""
    return [f for f in result.findings if f.verdict == "waste" and f.saving_share < min_share]


def self_diff(db: ProfileDB, name: str, fmt: str) -> int:
    """`diff A A`: say that a run was compared with itself (nothing can differ)."""
    from magneton.diagnose.api import is_job

    if not is_job(db, name):
        db.require_run(name)
    line = (
        f"'{name}' was compared with itself: one recording on both sides, nothing can "
        "differ (for an A/A check, record the script twice and diff the two runs)"
    )
    if fmt == "json":
        print(
            json.dumps({"a": name, "b": name, "self_diff": True, "findings": [], "message": line})
        )
    elif fmt == "csv":  # the header (no findings); the line where a person reads it
        csv.writer(sys.stdout).writerow(CSV_COLUMNS)
        print(line, file=sys.stderr)
    else:
        print(line)
    return 0


def undiagnosed(result: DiffResult) -> list[Finding]:
    """Findings of a stored diff that diagnosis has not seen (a diff stored before it
    ran): interpreter findings are explained at detection and never count."""
    return [
        f
        for f in result.findings
        if f.kind != "interpreter" and f.category is None and f.root_cause is None
    ]


def stored_diff(
    db: ProfileDB,
    a: str,
    b: str,
    *,
    threshold: float = 0.10,
    fresh: bool = False,
    rerun: bool = True,
    progress: Progress | None = None,
) -> tuple[DiffResult, str]:
    """The diff of A and B every surface shows (module docstring) and a line saying it
    is the stored one ("" when it was made now): the stored diff unless `fresh`, it is
    stale or missing, or it answers another question (`_same_question`); else the
    pipeline's, stored.
    A stored diff's findings that were never diagnosed are diagnosed now and that is
    stored too (no energy is measured again; `rerun` allows the line-traced re-run)."""
    from magneton.diagnose.api import (
        cause_groups,
        diagnose_findings,
        is_job,
        run_diff,
        store_outcome,
    )
    from magneton.graphdb import load_diff
    from magneton.model import MagnetonError

    # a job's diff is stored rank pair by rank pair, never whole: it is always made now
    loaded = None
    if not fresh and not is_job(db, a):
        try:
            loaded = load_diff(db, a, b)
        except MagnetonError as e:  # changed outside Magneton: this command replaces it
            print(f"magneton: {e}; making it anew", file=sys.stderr)
    if loaded is not None and _same_question(loaded[0], threshold, rerun):
        result = loaded[0]
        pending = undiagnosed(result)
        if pending:
            diagnose_findings(db, result, pending, rerun=rerun)
            if not db.read_only:
                # imported here: the root-cause stage loads libcst (0.13 s), which a
                # stored diff with nothing left to diagnose never needs
                from magneton.diagnose.api import store_diagnosis

                store_diagnosis(db, result)
        result.groups = []  # grouped from the stored findings, as the pipeline groups
        cause_groups(result)
        return result, (
            f"the stored diff of '{a}' and '{b}'{_made_at(db, a, b)}, not measured again "
            "(--rerun makes a new one)"
        )
    out = run_diff(db, a, b, threshold=threshold, rerun=rerun, progress=progress)
    if not db.read_only:  # a DB on a read-only mount is diffed, not written
        store_outcome(db, out)
    return out.result, ""


def _same_question(result: DiffResult, threshold: float, rerun: bool) -> bool:
    """Whether a stored diff answers this `diff`: the same threshold, and confirmed by
    re-measurement unless `--no-rerun` (and unconfirmed when it is given: a diff made
    with `--no-rerun` does not answer a plain `diff`, which asks for the rounds, nor the
    other way round). A diff without findings answers both."""
    if result.threshold != threshold:
        return False
    marks = [
        "--no-rerun" in (f.interval.unconfirmed or "")
        for f in [*result.findings, *result.dismissed]
        if f.interval is not None
    ]
    return not marks or any(marks) == (not rerun)


def _made_at(db: ProfileDB, a: str, b: str) -> str:
    """` made 2025-01-02T10:11:12+00:00` for the stored diff of (a, b), "" if unknown."""
    try:
        rows = db.query(
            "MATCH (d:Diff) WHERE d.run_a = $a AND d.run_b = $b RETURN d.created_at",
            {"a": a, "b": b},
        ).rows
    except Exception:  # noqa: BLE001 - a note must never stop the diff
        return ""
    return f" made {rows[0][0]}" if rows and rows[0][0] else ""


def run(args: argparse.Namespace) -> int:
    from magneton.diagnose.api import check_threshold
    from magneton.graphdb import open_db, open_db_prefer_write
    from magneton.model import MagnetonError
    from magneton.model.names import set_full_names

    set_full_names(args.full_names)
    check_threshold(args.threshold)
    share = DEFAULT_FAIL_ON_SHARE if args.fail_on_share is None else args.fail_on_share
    if not 0.0 <= share < 1.0:
        raise MagnetonError(f"--fail-on-share must be in [0, 1), got {share}")
    if args.a == args.b:
        with open_db(args.db, read_only=True, create=False) as db:
            return self_diff(db, args.a, "json" if args.json else "csv" if args.csv else "")
    with open_db_prefer_write(args.db) as db, diff_progress() as progress:
        result, stored = stored_diff(
            db,
            args.a,
            args.b,
            threshold=args.threshold,
            fresh=args.rerun,
            rerun=not args.no_rerun,
            progress=progress,
        )
        warning = "\n".join(
            w for w in (setup_warning(db, args.a, args.b, result), source_warning(db, args)) if w
        )
        if args.html:
            from magneton.render.html import write_diff_html

            write_diff_html(db, args.html, result, warning)
    if stored:
        print(f"magneton: {stored}", file=sys.stderr)
    groups = result.groups  # one per cause (diagnose/pipeline.py groups them)
    if args.csv:
        if warning:
            print(warning, file=sys.stderr)
        write_csv(result, groups, sys.stdout)
    elif args.json:
        out_json = result.to_json()
        # one per cause (diagnose/cause/grouping.py), as the table's rows
        out_json["groups"] = [row.to_json() for row in diff_view(result, groups).rows]
        if warning:
            print(warning, file=sys.stderr)  # the JSON on stdout stays the contract
        print(json.dumps(out_json, indent=2))
    else:
        if warning:
            print(warning)
        if result.match_note:
            print(result.match_note)
        if result.confirm_note:
            print(result.confirm_note)
        print_result(result, groups)
        print_diagnosis(result, groups)
    if args.fail_on == "waste":
        tripped = gate_findings(result, share)
        low = below_gate(result, share)
        if low:
            ids = ", ".join(f"#{f.id} ({f.saving_share:.2%})" for f in low)
            print(
                f"magneton: --fail-on waste: {len(low)} finding(s) below the gate's minimum "
                f"share of {share * 100:g}% of the run (--fail-on-share), not failing it: {ids}",
                file=sys.stderr,
            )
        if tripped:
            ids = ", ".join(f"#{f.id}" for f in tripped)
            print(
                f"magneton: --fail-on waste: {len(tripped)} finding(s) judged waste ({ids})",
                file=sys.stderr,
            )
            return EXIT_WASTE
    return 0


# config keys that name the hardware a run ran on (tracer/capture/config.py, tracer/capture/kineto.py)
_HW_KEYS_CYPHER = (
    "MATCH (c:ConfigEntry) WHERE c.run IN [$a, $b] AND (c.key = 'trace.gpu' OR "
    "c.key = 'device.cpu' OR (c.key STARTS WITH 'device.cuda.' AND c.key ENDS WITH '.name')) "
    "RETURN c.run, c.key, c.value"
)


def _config_run(db: ProfileDB, name: str) -> str:
    """The run whose config speaks for `name`: itself, or a job's rank 0."""
    from magneton.diagnose.api import is_job

    return f"{name}/rank0" if is_job(db, name) else name


def hardware(rows: list[tuple[str, str, str]], run: str) -> str:
    """`NVIDIA A100-PG509-200` (GPUs, in device order) or the CPU when no GPU is named."""
    mine = {k: v for r, k, v in rows if r == run and v}
    gpus = [mine["trace.gpu"]] if "trace.gpu" in mine else []
    gpus += [v for k, v in sorted(mine.items()) if k.startswith("device.cuda.")]
    if gpus:
        return ", ".join(dict.fromkeys(gpus))
    return mine.get("device.cpu", "")


def setup_warning(db: ProfileDB, a: str, b: str, result: DiffResult) -> str:
    """One line when the two sides ran on different hardware or were priced by
    different energy models (a difference that is the machine's or the model's, not the
    code's); "" when they match or nothing says."""
    ra, rb = _config_run(db, a), _config_run(db, b)
    try:
        rows = [tuple(r) for r in db.query(_HW_KEYS_CYPHER, {"a": ra, "b": rb}).rows]
    except Exception:  # noqa: BLE001 - a warning must never stop the diff
        rows = []
    parts = []
    hw_a, hw_b = hardware(rows, ra), hardware(rows, rb)
    if hw_a and hw_b and hw_a != hw_b:
        parts.append(f"ran on different hardware (a: {hw_a}; b: {hw_b})")
    src_a, src_b = result.a.power_source, result.b.power_source
    how_a, how_b = result.a.energy_method, result.b.energy_method
    if (src_a, how_a) != (src_b, how_b):
        parts.append(
            f"were priced differently (a: {how_a or '?'} by {src_a or '?'}; "
            f"b: {how_b or '?'} by {src_b or '?'})"
        )
    lines = []
    if parts:
        lines.append(
            "warning: the two runs "
            + " and ".join(parts)
            + ": part of every difference below is the machine's or the energy model's, not the code's"
        )
    timing = timing_warning(db, ra, rb)
    if timing:
        lines.append(timing)
    return "\n".join(lines)


def source_warning(db: ProfileDB, args: argparse.Namespace) -> str:
    """One line per script of A or B (or source file the diagnosis read) that is not text
    in the encoding it declares (diagnose/source/text.py `read_source`): a diff named
    none of its statements and patched none without saying why. "" when all read."""
    from magneton.diagnose.api import unreadable_note

    names = [_config_run(db, args.a), _config_run(db, args.b)]
    try:
        rows = db.query(
            "MATCH (r:Run) WHERE r.name IN $names RETURN r.script", {"names": names}
        ).rows
    except Exception:  # noqa: BLE001 - a warning must never stop the diff
        rows = []
    return unreadable_note(str(r[0]) for r in rows if r and r[0])


def timing_warning(db: object, a: str, b: str) -> str:
    """One line when one side was timed while traced (`record_block`, or a program with
    ACTIVE 1: RunInfo.timing "combined", its operators' times inflated by the capture)
    and the other was timed in its own light pass ("separate"): a difference between
    them can be the capture's overhead. "" when both were timed alike."""
    try:
        rows = db.query(  # type: ignore[attr-defined]
            "MATCH (r:Run) WHERE r.name IN [$a, $b] RETURN r.name, r.timing", {"a": a, "b": b}
        ).rows
    except Exception:  # noqa: BLE001 - a warning must never stop the diff
        return ""
    timing = {str(n): str(t) for n, t in rows}
    ta, tb = timing.get(a, ""), timing.get(b, "")
    if {ta, tb} != {"combined", "separate"}:
        return ""
    block = "a" if ta == "combined" else "b"
    return (
        f"warning: {block} was timed while traced (a magneton.record_block, or --steps with "
        "ACTIVE 1: times include the capture's overhead) and the other side in a separate "
        "timing pass: differences can be that overhead, not the code; record both sides "
        "the same way (docs/programs.md)"
    )
