"""`magneton diff`'s output: the findings table (one row per cause), the diagnosis lines
under it and the CSV rows, laid out from the diff's view (render/view.py `diff_view`: one
row per cause group, the figures every surface shows). Nothing here analyses or
re-measures: the CLI prints the diff it was handed (the stored one unless `--rerun`).

Operator lists are abbreviated (one occurrence, aliasing ops left out, a run of one
operator as ×N) and capped at the column width (model/names.py): a cell of kernel
signatures folded into 30 lines a row. A piped console is widened so op lists are not
folded at 80 columns in logs.
"""

from __future__ import annotations

import csv
from typing import TYPE_CHECKING, Any, TextIO

from magneton.model import DiffResult, Finding, RunSummary
from magneton.model.names import COLUMN_MAX, names_are_full

from .view import (  # noqa: F401  re-exported: the names front ends used from here
    abbreviate,
    describe_interpreter,
    diff_view,
    place_text,
    share_text,
)

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
    lead = diff_view(result, groups).lead_of()
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
    """Each cause's diagnosis under its findings' ids (a cause found in several regions
    is diagnosed once); causes judged noise share one line (they all say the same thing,
    and on a busy machine there can be many)."""
    view = diff_view(result, groups)
    for row in view.real:
        for i, line in enumerate(row.cause_lines):
            print((f"#{','.join(map(str, row.ids))} " if i == 0 else "   ") + line)
    noise = [f for r in view.noise for f in r.findings]
    if noise:
        ids = ", ".join(f"#{f.id}" for f in noise)
        rc = noise[0].root_cause
        note = (rc.note if rc is not None else None) or ""
        print(f"{ids} noise: {note}")
    if result.dismissed:
        where = ", ".join(
            f"{_side_text(f, f.wasteful)} {share_text(f.saving_share)} of {f.wasteful}"
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


def energy_line(s: RunSummary, side: str) -> str:
    from magneton.model.wording import energy_wording

    how = energy_wording(s.energy_method, s.power_source)
    return f"{side} = '{s.run}': {s.energy_j:.4g} J/call, {s.time_s * 1e3:.3g} ms/call ({how})"


def _side_text(f: Finding, side: str) -> str:
    """A finding's side in the table: its operators, or for interpreter time the Python
    frames that ran (`python: a.py:12 build_mask`)."""
    if f.kind == "interpreter":
        return place_text(f, side)
    return abbreviate(f.ops_a if side == "a" else f.ops_b, f.occurrences)


def _cell(text: str, mark: str) -> str:
    """A table cell of names, cut to the column's cap with "…" (the ◀ mark kept)."""
    room = COLUMN_MAX - len(mark)
    if not names_are_full() and len(text) > room:
        text = text[: room - 1] + "…"
    return text + mark


def print_result(result: DiffResult, groups: list[CauseGroup] | None = None) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = Console(emoji=False)
    if not console.is_terminal:  # piped or logged: do not fold op lists at 80 columns
        console = Console(emoji=False, width=max(console.width, 140))
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
    view = diff_view(result, groups)
    noise = len(view.noise)
    real = len(view.real)
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
    table.add_column("cause")
    styles = {"waste": "[red]waste[/]", "trade-off": "[yellow]trade-off[/]"}
    for row in view.rows:
        verdict = styles.get(row.verdict, f"[dim]{escape(row.verdict)}[/]")
        mark_a = " ◀" if row.wasteful == "a" else ""
        mark_b = " ◀" if row.wasteful == "b" else ""
        table.add_row(
            row.ids_text(),
            verdict,
            escape(_cell(row.side_text("a"), mark_a)),
            escape(_cell(row.side_text("b"), mark_b)),
            f"{row.energy_j('a'):.3g}",
            f"{row.energy_j('b'):.3g}",
            f"{row.time_s('a') * 1e3:.3g}",
            f"{row.time_s('b') * 1e3:.3g}",
            f"in {row.places} place{'s' if row.places != 1 else ''}",
            row.share_of()
            + (
                f" [{row.interval.low_j:.3g}, {row.interval.high_j:.3g}] J at "
                f"{row.interval.confidence:.0%}"
                if row.interval
                else ""
            ),
            row.confirmed,
            escape(row.cause or "-"),
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
