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
change wastes energy" from "the diff could not run".
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

from magneton.graphdb.model import DiffResult, Finding, RunSummary

if TYPE_CHECKING:
    from magneton.diagnose.cause.grouping import CauseGroup


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
    p.add_argument("--json", action="store_true", help="print DiffResult JSON instead of a table")
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
        default=0.0,
        metavar="X",
        help="with --fail-on: only findings saving at least this fraction of the wasteful "
        "run's energy count (default 0: any)",
    )
    p.set_defaults(func=run)


# exit status of `--fail-on waste` when it trips (1: crash, 2: bad input)
EXIT_WASTE = 3


def gate_findings(result: DiffResult, min_share: float) -> list[Finding]:
    """The findings that trip `--fail-on waste`: verdict waste, saving ≥ min_share."""
    return [f for f in result.findings if f.verdict == "waste" and f.saving_share >= min_share]


def run(args: argparse.Namespace) -> int:
    from magneton.diagnose.cause.grouping import group_by_cause
    from magneton.diagnose.matching.detect import check_threshold
    from magneton.diagnose.pipeline import run_diff, store_outcome
    from magneton.graphdb import open_db
    from magneton.graphdb.model import MagnetonError

    check_threshold(args.threshold)
    if not 0.0 <= args.fail_on_share < 1.0:
        raise MagnetonError(f"--fail-on-share must be in [0, 1), got {args.fail_on_share}")
    with open_db(args.db, create=False) as db:
        out = run_diff(db, args.a, args.b, threshold=args.threshold, rerun=not args.no_rerun)
        store_outcome(db, out)
    result = out.result
    groups = group_by_cause(result.findings)
    if args.json:
        out_json = result.to_json()
        out_json["groups"] = [
            g.to_json() for g in groups
        ]  # one per cause (diagnose/cause/grouping.py)
        print(json.dumps(out_json, indent=2))
    else:
        if result.match_note:
            print(result.match_note)
        if result.confirm_note:
            print(result.confirm_note)
        print_result(result, groups)
        print_diagnosis(result, groups)
    if args.fail_on == "waste":
        tripped = gate_findings(result, args.fail_on_share)
        if tripped:
            ids = ", ".join(f"#{f.id}" for f in tripped)
            print(
                f"magneton: --fail-on waste: {len(tripped)} finding(s) judged waste ({ids})",
                file=sys.stderr,
            )
            return EXIT_WASTE
    return 0


def print_diagnosis(result: DiffResult, groups: list[CauseGroup] | None = None) -> None:
    """Each cause's diagnosis under its lead finding's id (a cause found in several
    regions is diagnosed once); findings judged noise share one line (they all say the
    same thing, and on a busy machine there can be many)."""
    from magneton.diagnose.cause.grouping import group_by_cause
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
    names = [o.removeprefix("aten::") for o in shown]
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
    table.add_column("ops a", overflow="fold")
    table.add_column("ops b", overflow="fold")
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
            _ids(g),
            verdict,
            escape(_side_text(f, "a") + mark_a),
            escape(_side_text(f, "b") + mark_b),
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
