"""`magneton diff`'s output: the findings table (one row per cause), the diagnosis lines
under it and the CSV rows, from a `DiffResult` and its cause groups
(diagnose/cause/grouping.py, computed by diagnose/pipeline.py). Nothing here analyses:
the CLI and the TUI print what the pipeline returned.

Operator lists are abbreviated (one occurrence, aliasing ops left out, a run of one
operator as ×N) and capped at the column width (model/names.py): a cell of kernel
signatures folded into 30 lines a row. A piped console is widened so op lists are not
folded at 80 columns in logs.
"""

from __future__ import annotations

import csv
from typing import TYPE_CHECKING, Any, TextIO

from magneton.model import DiffResult, Finding, RunSummary
from magneton.model.names import COLUMN_MAX, names_are_full, short_name

if TYPE_CHECKING:
    from magneton.diagnose.api import CauseGroup


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


def print_diagnosis(result: DiffResult, groups: list[CauseGroup] | None = None) -> None:
    """Each cause's diagnosis under its lead finding's id (a cause found in several
    regions is diagnosed once); findings judged noise share one line (they all say the
    same thing, and on a busy machine there can be many)."""
    from magneton.diagnose.api import cause_groups, cause_key, describe_finding, kernel_family

    groups = cause_groups(result) if groups is None else groups
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
    from magneton.model.wording import energy_wording

    how = energy_wording(s.energy_method, s.power_source)
    return f"{side} = '{s.run}': {s.energy_j:.4g} J/call, {s.time_s * 1e3:.3g} ms/call ({how})"


def abbreviate(ops: list[str], occurrences: int = 1, limit: int = 6) -> str:
    """`mul pow mul add … (+4) ×2`: one occurrence's operators, aliasing ops (view,
    transpose...) left out unless that is all there is, ×N when folded."""
    from magneton.model.vocab import FREE_OPS

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

    from magneton.diagnose.api import cause_groups

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
    groups = cause_groups(result) if groups is None else groups
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
    # capped (model/names.py): a cell of kernel signatures folded into 30 lines a row
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


def describe_interpreter(f: Finding) -> list[str]:
    """Human lines for an interpreter finding (`magneton diff`)."""
    rc = f.root_cause
    lines = ["interpreter time: " + (rc.note if rc is not None and rc.note else "differs")]
    if f.fix is not None and f.fix.summary:
        lines.append("fix: " + f.fix.summary)
    return lines


def place_text(f: Finding, side: str) -> str:
    """One side of an interpreter finding in a table cell: `python: a.py:12 f, …`."""
    frames = f.frames_a if side == "a" else f.frames_b
    return "python: " + (", ".join(frames) if frames else "(none)")
