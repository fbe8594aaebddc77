"""`magneton diff --db DIR A B [--json] [--threshold X]`: match two runs by the values
they compute and rank the regions where one spends more energy.

The DB is opened read-write because the result is stored (re-running replaces it) for
Cypher, reports and the TUI. `--json` prints exactly `DiffResult.to_json()`. A diff that
finds nothing comparable prints its message and exits 0 (see diagnose/matching/diff.py). A and B
may also name multi-rank jobs (runs `A/rank0`, ...); the pipeline (diagnose/pipeline.py)
compares those rank by rank.

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
from typing import TYPE_CHECKING, Any, TextIO

from magneton.graphdb.model import DiffResult, Finding, RunSummary
from magneton.graphdb.names import COLUMN_MAX, add_full_names, names_are_full, short_name

if TYPE_CHECKING:
    from magneton.diagnose.cause.grouping import CauseGroup
    from magneton.diagnose.pipeline import Progress


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
        "--no-rerun",
        action="store_true",
        help="diagnose from the stored profiles only (no line-traced re-run of the scripts)",
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


CSV_COLUMNS = (
    "id", "cause_group", "verdict", "kind", "wasteful", "saving_j", "saving_share",
    "saving_j_low", "saving_j_high", "confirmed", "energy_a_j", "energy_b_j", "time_a_s",
    "time_b_s", "occurrences", "ops_a", "ops_b", "cause", "note",
)  # fmt: skip


def write_csv(result: DiffResult, groups: list[CauseGroup], out: TextIO) -> None:
    """`diff --csv`: one row per finding, full operator names (space-separated, a
    spreadsheet's filter finds them), its cause group's lead id; findings then the
    dismissed ones (verdict noise). Just the header when nothing was found."""
    lead = {f.id: g.lead.id for g in groups for f in g.findings}
    w = csv.writer(out)
    w.writerow(CSV_COLUMNS)
    for f in [*result.findings, *result.dismissed]:
        iv = f.interval
        rc = f.root_cause
        w.writerow(
            [
                f.id,
                lead.get(f.id, ""),
                f.verdict,
                f.kind,
                f.wasteful,
                f"{f.saving_j:.6g}",
                f"{f.saving_share:.6g}",
                "" if iv is None else f"{iv.saving_j_low:.6g}",
                "" if iv is None else f"{iv.saving_j_high:.6g}",
                "" if iv is None else str(bool(iv.confirmed)).lower(),
                f"{f.region_a.energy_j:.6g}",
                f"{f.region_b.energy_j:.6g}",
                f"{f.region_a.time_s:.6g}",
                f"{f.region_b.time_s:.6g}",
                f.occurrences,
                " ".join(f.ops_a),
                " ".join(f.ops_b),
                "" if rc is None else rc.kind,
                "" if rc is None else (rc.note or ""),
            ]  # fmt: skip
        )


def below_gate(result: DiffResult, min_share: float) -> list[Finding]:
    """Findings judged waste that save less than `min_share`: printed, not failing."""
    return [f for f in result.findings if f.verdict == "waste" and f.saving_share < min_share]


def self_diff(db: object, name: str, fmt: str) -> int:
    """`diff A A`: say that a run was compared with itself (nothing can differ)."""
    from magneton.diagnose.pipeline import is_job

    if not is_job(db, name):
        db.require_run(name)  # type: ignore[attr-defined]
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


def run(args: argparse.Namespace) -> int:
    from magneton.diagnose.cause.grouping import group_by_cause
    from magneton.diagnose.matching.detect import check_threshold
    from magneton.diagnose.pipeline import run_diff, store_outcome
    from magneton.graphdb import open_db
    from magneton.graphdb.model import MagnetonError
    from magneton.graphdb.names import set_full_names

    set_full_names(args.full_names)
    check_threshold(args.threshold)
    share = DEFAULT_FAIL_ON_SHARE if args.fail_on_share is None else args.fail_on_share
    if not 0.0 <= share < 1.0:
        raise MagnetonError(f"--fail-on-share must be in [0, 1), got {share}")
    if args.a == args.b:
        with open_db(args.db, read_only=True, create=False) as db:
            return self_diff(db, args.a, "json" if args.json else "csv" if args.csv else "")
    with open_db(args.db, create=False) as db, diff_progress() as progress:
        out = run_diff(
            db,
            args.a,
            args.b,
            threshold=args.threshold,
            rerun=not args.no_rerun,
            progress=progress,
        )
        store_outcome(db, out)
        warning = setup_warning(db, args.a, args.b, out.result)
        if args.html:
            from magneton.render.html import write_diff_html

            write_diff_html(db, args.html, out.result, warning)
    result = out.result
    groups = group_by_cause(result.findings)
    if args.csv:
        if warning:
            print(warning, file=sys.stderr)
        write_csv(result, groups, sys.stdout)
    elif args.json:
        out_json = result.to_json()
        # one per cause (diagnose/cause/grouping.py)
        out_json["groups"] = [g.to_json() for g in groups]
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


# config keys that name the hardware a run ran on (tracer/config.py, tracer/kineto.py)
_HW_KEYS_CYPHER = (
    "MATCH (c:ConfigEntry) WHERE c.run IN [$a, $b] AND (c.key = 'trace.gpu' OR "
    "c.key = 'device.cpu' OR (c.key STARTS WITH 'device.cuda.' AND c.key ENDS WITH '.name')) "
    "RETURN c.run, c.key, c.value"
)


def _config_run(db: object, name: str) -> str:
    """The run whose config speaks for `name`: itself, or a job's rank 0."""
    from magneton.diagnose.pipeline import is_job

    return f"{name}/rank0" if is_job(db, name) else name


def hardware(rows: list[tuple[str, str, str]], run: str) -> str:
    """`NVIDIA A100-PG509-200` (GPUs, in device order) or the CPU when no GPU is named."""
    mine = {k: v for r, k, v in rows if r == run and v}
    gpus = [mine["trace.gpu"]] if "trace.gpu" in mine else []
    gpus += [v for k, v in sorted(mine.items()) if k.startswith("device.cuda.")]
    if gpus:
        return ", ".join(dict.fromkeys(gpus))
    return mine.get("device.cpu", "")


def setup_warning(db: object, a: str, b: str, result: DiffResult) -> str:
    """One line when the two sides ran on different hardware or were priced by
    different energy models (a difference that is the machine's or the model's, not the
    code's); "" when they match or nothing says."""
    ra, rb = _config_run(db, a), _config_run(db, b)
    try:
        rows = [tuple(r) for r in db.query(_HW_KEYS_CYPHER, {"a": ra, "b": rb}).rows]  # type: ignore[attr-defined]
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


def print_diagnosis(result: DiffResult, groups: list[CauseGroup] | None = None) -> None:
    """Each cause's diagnosis under its lead finding's id (a cause found in several
    regions is diagnosed once); findings judged noise share one line (they all say the
    same thing, and on a busy machine there can be many)."""
    from magneton.diagnose.cause.grouping import cause_key, group_by_cause, kernel_family
    from magneton.diagnose.cause.rootcause import describe_finding
    from magneton.diagnose.matching.interpreter import describe_interpreter

    groups = group_by_cause(result.findings) if groups is None else groups
    noise = [f for f in result.findings if f.verdict == "noise"]
    for g in groups:
        f = g.lead
        if f.verdict == "noise":
            continue
        lines = describe_interpreter(f) if f.kind == "interpreter" else describe_finding(f)
        # interpreter time that joined a region's cause is still named (grouping.py)
        lines += [
            f"#{x.id} " + describe_interpreter(x)[0]
            for x in g.findings[1:]
            if x.kind == "interpreter"
        ]
        fam = kernel_family(f) if len(g.findings) > 1 and cause_key(f)[0] == "family" else ""
        if fam:
            lines.append(
                f"{len(g.findings)} regions without a cause, grouped by kernel family {fam}"
            )
        for i, line in enumerate(lines):
            print((f"#{_ids(g)} " if i == 0 else "   ") + line)
    if noise:
        ids = ", ".join(f"#{f.id}" for f in noise)
        rc = noise[0].root_cause
        note = (rc.note if rc is not None else None) or ""
        print(f"{ids} noise: {note}")
    if result.dismissed:
        where = ", ".join(
            f"{_side_text(f, f.wasteful)} {f.saving_share:.1%} of {f.wasteful}"
            for f in result.dismissed
        )
        print(
            f"dismissed (not findings): {len(result.dismissed)} difference(s) over the "
            f'threshold in which {_SAME_WORK}: {where}; --json lists them under "dismissed"'
        )


_SAME_WORK = (
    "both sides ran the same kernels, reached the same way, with the same arguments and "
    "settings (what two processes running identical work measure apart)"
)


def _ids(g: CauseGroup) -> str:
    return ",".join(str(f.id) for f in g.findings)


def energy_line(s: RunSummary, side: str) -> str:
    from magneton.graphdb.wording import energy_wording

    how = energy_wording(s.energy_method, s.power_source)
    return f"{side} = '{s.run}': {s.energy_j:.4g} J/call, {s.time_s * 1e3:.3g} ms/call ({how})"


def abbreviate(ops: list[str], occurrences: int = 1, limit: int = 6) -> str:
    """`mul pow mul add … (+4) ×2`: one occurrence's operators, aliasing ops (view,
    transpose...) left out unless that is all there is, ×N when folded."""
    from magneton.diagnose.matching.match import FREE_OPS

    if not ops:
        return "(nothing)"
    per = len(ops) // occurrences if occurrences > 1 and len(ops) % occurrences == 0 else len(ops)
    one = ops[:per]
    shown = [o for o in one if o not in FREE_OPS] or one
    names: list[str] = []  # a run of the same operator is one name ×N
    runs: list[int] = []
    for o in shown:
        n = short_name(o.removeprefix("aten::"))
        if names and names[-1] == n:
            runs[-1] += 1
        else:
            names.append(n)
            runs.append(1)
    names = [n if k == 1 else f"{n} ×{k}" for n, k in zip(names, runs, strict=True)]
    text = " ".join(names[:limit])
    if len(names) > limit:
        text += f" … (+{len(names) - limit})"
    if occurrences > 1:
        text += f" ×{occurrences}"
    return text


def _side_text(f: Finding, side: str) -> str:
    """A finding's side in the table: its operators, or for interpreter time the Python
    frames that ran (`python: a.py:12 build_mask`)."""
    if f.kind == "interpreter":
        from magneton.diagnose.matching.interpreter import place_text

        return place_text(f, side)
    return abbreviate(f.ops_a if side == "a" else f.ops_b, f.occurrences)


def _ids_cell(g: CauseGroup, shown: int = 3) -> str:
    """`8,12,16 +6`: a group's first ids (the diagnosis lines below list them all)."""
    ids = [str(f.id) for f in g.findings]
    return ",".join(ids) if len(ids) <= shown else ",".join(ids[:shown]) + f" +{len(ids) - shown}"


def _cell(text: str, mark: str) -> str:
    """A table cell of names, cut to the column's cap with "…" (the ◀ mark kept)."""
    room = COLUMN_MAX - len(mark)
    if not names_are_full() and len(text) > room:
        text = text[: room - 1] + "…"
    return text + mark


def _interval(g: CauseGroup) -> str:
    """The saving with its confidence interval (summed over the group's regions)."""
    ivs = [f.interval for f in g.findings if f.interval is not None]
    if len(ivs) != len(g.findings) or not ivs:
        return ""
    lo = sum(iv.saving_j_low for iv in ivs)
    hi = sum(iv.saving_j_high for iv in ivs)
    return f" [{lo:.3g}, {hi:.3g}] J at {ivs[0].confidence:.0%}"


def confirmation(g: CauseGroup) -> str:
    """Whether interleaved re-measurement confirmed the cause's regions
    (diagnose/matching/confirm.py): "yes (N rounds)", "no" (the note above the table says why),
    or "-" when no region has an interval to confirm."""
    ivs = [f.interval for f in g.findings if f.interval is not None]
    if not ivs:
        return "-"
    if all(iv.confirmed for iv in ivs):
        return f"yes ({min(iv.rounds for iv in ivs)} rounds)"
    return "no"


def print_result(result: DiffResult, groups: list[CauseGroup] | None = None) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from magneton.diagnose.cause.grouping import group_by_cause

    console = Console()
    if not console.is_terminal:  # piped or logged: do not fold op lists at 80 columns
        console = Console(width=max(console.width, 140))
    console.print(
        escape("energy: " + energy_line(result.a, "a") + "; " + energy_line(result.b, "b"))
    )
    if result.message:
        console.print(escape(result.message))
        return
    if not result.findings:
        console.print(
            f"{result.matched_pairs} matched region pairs; none differs in energy by "
            f"≥{result.threshold:.0%} of the larger side with 95% confidence (regions under "
            "0.1% of a run ignored)" + (" and a software cause" if result.dismissed else "")
        )
        return
    groups = group_by_cause(result.findings) if groups is None else groups
    noise = sum(g.lead.verdict == "noise" for g in groups)
    real = len(groups) - noise
    table = Table(
        title=(
            f"{real} finding(s) among {result.matched_pairs} matched region pairs "
            f"(threshold {result.threshold:.0%}; one row per cause)"
            + (f"; {noise} more judged noise (listed last)" if noise else "")
        )
    )
    table.add_column("id", justify="right")
    table.add_column("verdict")
    # capped (graphdb/names.py): a cell of kernel signatures folded into 30 lines a row
    width: dict[str, Any] = {} if names_are_full() else {"max_width": COLUMN_MAX}
    table.add_column("ops a", overflow="fold", ratio=1, **width)
    table.add_column("ops b", overflow="fold", ratio=1, **width)
    table.add_column("J a", justify="right")
    table.add_column("J b", justify="right")
    table.add_column("ms a", justify="right")
    table.add_column("ms b", justify="right")
    table.add_column("where", justify="right")
    table.add_column("saving", justify="right")
    table.add_column("confirmed")
    styles = {"waste": "[red]waste[/]", "trade-off": "[yellow]trade-off[/]"}
    for g in groups:
        f = g.lead
        verdict = styles.get(f.verdict, f"[dim]{escape(f.verdict)}[/]")
        mark_a = " ◀" if f.wasteful == "a" else ""
        mark_b = " ◀" if f.wasteful == "b" else ""
        table.add_row(
            _ids_cell(g),
            verdict,
            escape(_cell(_side_text(f, "a"), mark_a)),
            escape(_cell(_side_text(f, "b"), mark_b)),
            f"{sum(x.region_a.energy_j for x in g.findings):.3g}",
            f"{sum(x.region_b.energy_j for x in g.findings):.3g}",
            f"{sum(x.region_a.time_s for x in g.findings) * 1e3:.3g}",
            f"{sum(x.region_b.time_s for x in g.findings) * 1e3:.3g}",
            f"in {g.places} place{'s' if g.places != 1 else ''}",
            f"{g.saving_share:.1%} of {f.wasteful}" + _interval(g),
            confirmation(g),
        )
    console.print(table)
    console.print(
        "◀ = the side that spends more; ops = the largest region of the cause; saving = its "
        "share of that run's energy, summed over the cause's regions, with its 95% interval; "
        "confirmed = both sides re-measured in alternating rounds (A B, B A, ...) and the "
        "saving held (paired t on the rounds' log ratios, 95%); its J and ms are then the "
        "re-measured ones"
        + (
            "; python: = interpreter time between operators, by the function that ran it"
            if any(f.kind == "interpreter" for f in result.findings)
            else ""
        )
    )
