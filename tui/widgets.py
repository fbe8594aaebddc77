"""Renderables and small widgets of the TUI: findings rows, regions, call paths, root cause.

Everything here is text (Rich `Text`, `Table`, `Syntax`), never images or mouse-only
controls, so the screens work over ssh and in an 80×24 terminal. The builders are plain
functions of the data contract (`Finding`, `Profile`), which keeps them testable without
a running app and keeps screen code about layout and keys only.

Diagnosis fields (`divergence`, `root_cause`, `fix`) are the typed results of
model/diagnosis.py; each may be None here (a finding still being
diagnosed, or one diagnosis could not explain, must render, not crash), and a root
cause's `note` and `error` are always shown, so "why nothing was found" is visible.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Sequence
from typing import Any

from rich.console import Group, RenderableType
from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import DataTable, Label, Sparkline, Static

from magneton.model import (
    DiffResult,
    Divergence,
    Finding,
    PathElement,
    Profile,
    Region,
    RootCause,
    RuleRef,
)
from magneton.model.vocab import BOOKKEEPING_OPS, IGNORED_OPS
from magneton.render.view import (
    CauseRow,
    abbreviate,
    changed_lines,
    first_changed_line,
    joules,
    place_text,
    share_text,
)

from .data import (
    PowerSlice,
    describe_energy,
    fmt_j,
    fmt_ratio,
    fmt_s,
    interval_text,
    ratio,
    short_op,
    source_snippet,
)

# ------------------------------------------------------------------------------------
# Findings table
# ------------------------------------------------------------------------------------

# The findings table, one row per cause (render/view.py `CauseRow`). At 80 columns the
# first four are on screen whatever the operator lists say: verdict, saving and cause
# sat right of two 36-character "ops" cells and were 40-60 presses of → away on a BERT
# pair. The operators come next, both sides in one cell of two lines, cut to the width
# left (`ops_width`); the per-side figures follow for those who scroll. The detail view
# has every operator.
FINDING_COLUMNS = (
    ("#", "id", 8),
    ("saved", "saved", 14),  # "  8.0% 5.92 mJ": a share and a joule figure, never wrapped
    ("verdict", "verdict", 9),
    ("cause", "cause", 16),
    ("ops (◀ spends more)", "ops", 0),  # 0: the width left (`ops_width`)
    ("A J", "ja", 8),
    ("B J", "jb", 8),
    ("A s", "sa", 8),
    ("B s", "sb", 8),
    ("ratio", "ratio", 6),
    ("places", "places", 6),
)
OPS_MIN_WIDTH = 16


def ops_width(table_width: int) -> int:
    """The operators' column width that keeps the columns before it, and itself, on a
    table `table_width` cells wide (each cell has one cell of padding either side; two
    more for the vertical scrollbar)."""
    fixed = 0
    for _, key, width in FINDING_COLUMNS:
        if key == "ops":
            break
        fixed += width + 2
    return max(OPS_MIN_WIDTH, table_width - fixed - 2 - 2)


def verdict_text(f: Finding) -> Text:
    style = {"waste": "bold red", "trade-off": "yellow"}.get(f.verdict, "dim")
    return Text(f.verdict, style=style)


def side_style(f: Finding, side: str) -> str:
    """Red for the wasteful side, green for the efficient one; dim for noise."""
    if f.verdict == "noise":
        return "dim"
    return "red" if f.wasteful == side else "green"


def diagnosis_failed(f: Finding) -> str:
    """Why this finding's diagnosis failed ("" when it did not): the error a root cause
    carries while no category was found. A failed diagnosis must say so, not read as
    "not diagnosed yet" forever."""
    rc = f.root_cause
    if f.category is None and f.kind != "interpreter" and rc is not None and rc.error:
        return rc.error
    return ""


def cause_text(f: Finding, diagnosing: bool) -> Text:
    if f.kind == "interpreter":  # explained at detection, never diagnosed
        return Text("python", style="bold yellow")
    if f.category:
        return Text(f.category, style="bold")
    if diagnosis_failed(f):
        return Text("failed", style="bold red")
    return Text("diagnosing…" if diagnosing else "-", style="dim")


def _clip_cell(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(width - 1, 0)] + "…"


def side_summary(f: Finding, side: str) -> str:
    """A side's operators as `magneton diff` abbreviates them (render/view.py), or for
    interpreter time the Python frames that ran it."""
    if f.kind == "interpreter":
        return place_text(f, side)
    return abbreviate(f.ops_a if side == "a" else f.ops_b, f.occurrences)


def ops_cell(row: CauseRow, width: int) -> Text:
    """Both sides' operators of a cause's lead region, one line each, cut to `width`
    (the full lists are in the detail view), the side that spends more marked ◀."""
    f = row.lead
    t = Text()
    for side in ("a", "b"):
        mark = "◀" if f.wasteful == side and f.verdict != "noise" else " "
        line = f"{mark}{side.upper()} {side_summary(f, side)}"
        if side == "b":
            t.append("\n")
        t.append(_clip_cell(line, width), style=side_style(f, side))
    return t


def cause_cell(row: CauseRow, diagnosing: bool) -> Text:
    return cause_text(row.lead, diagnosing)


def finding_row(row: CauseRow, diagnosing: bool = False, width: int = 30) -> list[RenderableType]:
    """The cells of one cause (FINDING_COLUMNS), the operators cut to `width`."""
    saved = Text(f"{share_text(row.saving_share):>6}", style="bold", no_wrap=True)
    saved.append(f" {joules(row.saving_j)}")
    return [
        Text(row.ids_text(), style="bold"),
        saved,
        verdict_text(row.lead),
        cause_cell(row, diagnosing),
        ops_cell(row, width),
        fmt_j(row.energy_j("a")),
        fmt_j(row.energy_j("b")),
        fmt_s(row.time_s("a")),
        fmt_s(row.time_s("b")),
        fmt_ratio(row.ratio),
        str(row.places),
    ]


def energy_header(result: DiffResult) -> Text:
    """Two lines, one per run: energy and time per call and how the energy was obtained."""
    t = Text()
    for label, s in (("A", result.a), ("B", result.b)):
        if t:
            t.append("\n")
        t.append(f"{label} ", style="bold reverse")
        t.append(f" {s.run} ", style="bold")
        t.append(f"{fmt_j(s.energy_j)}, {fmt_s(s.time_s)}/call — ")
        t.append(describe_energy(s.energy_method, s.power_source), style="italic")
    return t


# ------------------------------------------------------------------------------------
# Finding detail
# ------------------------------------------------------------------------------------


SUMMARY_WIDTH = 78  # an 80-column screen less the summary's padding


def _fit(parts: list[str], width: int = SUMMARY_WIDTH) -> str:
    """`parts` joined with " · ", the last ones left out until the line fits: each part
    is whole or absent ("confirmed in 20 …" cut mid-word read as a different claim)."""
    while len(parts) > 1 and len(" · ".join(parts)) > width:
        parts = parts[:-1]
    return " · ".join(parts)


def finding_summary(result: DiffResult, f: Finding, row: CauseRow | None = None) -> Text:
    """Two lines that fit 80 columns, the figures of the finding's cause (`row`, the
    table's row; the finding alone without one): what it is and saves, then how sure.
    Parts are dropped whole from the end of a line that would not fit, never cut (every
    line the header takes is one the patch preview loses). The long forms (the test, why
    unconfirmed, the outputs' difference) head the Root cause tab (`finding_details`)."""
    ids = row.ids_text() if row is not None else str(f.id)
    share = row.saving_share if row is not None else f.saving_share
    saving = row.saving_j if row is not None else f.saving_j
    rat = row.ratio if row is not None else ratio(f)
    places = row.places if row is not None else f.occurrences
    side = f.wasteful.upper()
    cause = f.category or ("python between ops" if f.kind == "interpreter" else "")
    head = [f"#{ids} {f.verdict}"] + ([cause] if cause else [])
    head += [f"saves {share_text(share)} of {side}, {joules(saving)}/call", fmt_ratio(rat)]
    t = Text(no_wrap=True, overflow="ellipsis")
    line = _fit(head)
    t.append(f"#{ids} ", style="bold")
    t.append_text(verdict_text(f))
    rest = line[len(f"#{ids} {f.verdict}") :]
    if cause and rest.startswith(f" · {cause}"):
        t.append(" · ")
        t.append(cause, style="bold cyan" if f.category else "bold yellow")
        rest = rest[len(f" · {cause}") :]
    t.append(rest)
    sure = _sureness(f, row)
    tail = [f"{places} places"] if places > 1 else []
    if sure or tail:
        iv = f.interval
        t.append("\n")
        t.append(
            _fit(sure + tail),
            style="green" if iv is not None and iv.confirmed else "yellow" if iv else "",
        )
    return t


def _sureness(f: Finding, row: CauseRow | None) -> list[str]:
    """The saving's interval and whether re-measurement confirmed it, as parts: the
    cause's summed interval, or the lead finding's labelled with its id when the cause
    has other findings without one (an unlabelled 286–425 µJ under a 593 µJ saving read
    as a contradiction)."""
    iv = f.interval
    if iv is None:
        return []
    grouped = row is not None and len(row.ids) > 1
    if grouped and row is not None and row.interval is not None:
        low, high, who = row.interval.low_j, row.interval.high_j, ""
    else:
        low, high = iv.saving_j_low, iv.saving_j_high
        who = f"#{f.id} " if grouped else ""
    part = f"{who}{iv.confidence:.0%}: {joules(low)} to {joules(high)}/call"
    if not grouped and math.isfinite(iv.ratio_high):
        part += f", {iv.ratio_low:.2f}–{iv.ratio_high:.2f}×"
    conf = row.confirmed if row is not None else ""
    if not iv.confirmed:
        return [part, "unconfirmed"]
    rounds = conf.removeprefix("yes (").removesuffix(" rounds)") if conf.startswith("yes") else ""
    return [part, f"confirmed in {rounds or iv.rounds} rounds"]


def finding_details(f: Finding) -> Text:
    """What the two-line summary leaves out, at the top of the Root cause tab."""
    t = Text()
    iv = interval_text(f)
    if iv:
        t.append(iv + "\n", style="green" if f.interval and f.interval.confirmed else "yellow")
    if f.occurrences > 1:
        t.append(
            f"the same region repeats in {f.occurrences} places (layers, decode steps or loop "
            "turns), folded into this finding\n",
            style="dim",
        )
    if f.output_rel_diff:
        t.append(f"outputs differ by {f.output_rel_diff:.2g} (relative)\n", style="dim")
    if f.kind == "interpreter":
        t.append("interpreter time between operators, ", style="bold yellow")
        t.append(f"a: {side_summary(f, 'a')}; b: {side_summary(f, 'b')}\n")
    return t


def fill_region_table(
    table: DataTable, profile: Profile | None, region: Region, names: Sequence[str]
) -> None:
    """Operators of one side: name, module path, energy and time per call."""
    table.clear(columns=True)
    table.add_columns("op", "module", "energy", "time")
    if profile is None:  # profile not loaded (yet): the names the finding carries
        for n in names:
            table.add_row(short_op(n), "", "", "")
        return
    for i in region.ops:
        if not 0 <= i < len(profile.ops):
            continue
        op = profile.ops[i]
        style = "dim" if op.name in BOOKKEEPING_OPS else ""
        table.add_row(
            Text(short_op(op.name), style=style),
            Text(op.module or "(root)", style="cyan"),
            fmt_j(op.energy_j),
            fmt_s(op.time_s),
        )
    table.add_row(
        Text("total", style="bold"),
        "",
        Text(fmt_j(region.energy_j), style="bold"),
        Text(fmt_s(region.time_s), style="bold"),
    )


class PowerView(Vertical):
    """A label and a sparkline of the power samples over one region (text only)."""

    def compose(self) -> ComposeResult:
        yield Label("power: loading…", classes="power-label")
        yield Sparkline([], classes="power-spark")

    def show(self, slices: list[PowerSlice], method: str, source: str) -> None:
        label = self.query_one(Label)
        spark = self.query_one(Sparkline)
        if not slices:
            label.update(
                Text(
                    f"power: no samples over this region ({describe_energy(method, source)})",
                    style="dim",
                )
            )
            spark.display = False
            return
        s = max(slices, key=lambda p: len(p.watts))
        kind = "modelled" if s.source == "model" else s.source
        where = (
            "around it (region shorter than the sampling interval)"
            if s.bracketing
            else f"in its {s.windows} op windows ({fmt_s(s.span_s)})"
        )
        label.update(
            Text(
                f"power {s.device} ({kind}) {min(s.watts):.4g}–{max(s.watts):.4g} W, "
                f"{len(s.watts)} samples {where}"
            )
        )
        spark.data = s.watts
        spark.display = True


# ------------------------------------------------------------------------------------
# Call paths and divergence
# ------------------------------------------------------------------------------------


def _short_path(path: str) -> str:
    """`…/site-packages/transformers/activations.py` → `transformers/activations.py`;
    a file below the working directory relative to it."""
    for marker in ("site-packages/", "dist-packages/"):
        if marker in path:
            return path.split(marker, 1)[1]
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return path
    return path if rel.startswith("..") else rel


def _loc(where: str) -> str:
    """`/abs/file.py:12` as `transformers/x.py:12` for a library, relative to the working
    directory below it, else just `a.py:12` (the two runs' scripts, side by side)."""
    file, _, line = where.rpartition(":")
    if not file:
        return where
    short = _short_path(file)
    return f"{os.path.basename(short) if os.path.isabs(short) else short}:{line}"


def element_text(el: PathElement | None, side: str | None = None) -> Text:
    """One element of a kernel call path (docs/diagnosis.md): a Python frame, an aten op
    of the dispatch chain, a device kernel, an argument difference, or nothing."""
    t = Text()
    if el is None:
        return t
    if el.kind == "frame":
        t.append(str(el.function or "?"), style="bold")
        if el.file:
            t.append(f"  {_short_path(el.file)}:{el.line if el.line is not None else '?'}")
        elif el.a is not None or el.b is not None:  # a common frame: where each side has it
            wa, wb = _loc(el.a or ""), _loc(el.b or "")
            t.append(f"  {wa}" if wa == wb or not wb else f"  A {wa} · B {wb}")
        if el.code:
            t.append(f"\n      {el.code.strip()}", style="italic")
    elif el.kind in ("op", "kernel"):
        t.append("aten op " if el.kind == "op" else "kernel ", style="dim")
        t.append(short_op(str(el.name)) if el.kind == "kernel" else str(el.name), style="bold")
    elif el.kind == "args":
        t.append(f"{el.op}", style="bold")
        if el.kernel:
            t.append(f" (kernel {el.kernel})")
        if el.diff:
            t.append(" with " + ", ".join(f"{k}={v}" for k, v in el.diff.items()))
        else:
            t.append(" — same kernel, same arguments")
    elif el.kind == "none":
        t.append("nothing here: the other side does extra work", style="italic")
    else:
        t.append(", ".join(f"{k}={v}" for k, v in el.to_json().items()))
    return t


def kernel_paths(profile: Profile | None, region: Region, names: Sequence[str]) -> list[str]:
    """Distinct kernel call paths of a region's non-bookkeeping operators, in order of
    first use (the operator names the finding carries until the profile is loaded)."""
    paths: list[str] = []
    if profile is not None:
        for i in region.ops:
            if 0 <= i < len(profile.ops) and profile.ops[i].name not in BOOKKEEPING_OPS:
                op = profile.ops[i]
                for chain in op.call_paths or [op.name]:
                    # drop the steps divergence analysis ignores (allocations, views)
                    steps = [x for x in chain.split(" > ") if x not in IGNORED_OPS]
                    paths.append(" > ".join(steps or [op.name]))
    else:
        paths = [n for n in names if n not in BOOKKEEPING_OPS]
    return list(dict.fromkeys(paths))


PREFIX_SHOWN = 8  # common-prefix elements shown before eliding the middle


def divergence_view(
    f: Finding, prof_a: Profile | None, prof_b: Profile | None, run_a: str, run_b: str
) -> RenderableType:
    """The divergence point: the common prefix of the two kernel call paths (dim, the
    middle elided when long), then each side's first differing element highlighted,
    then the kernel call paths of both regions."""
    parts: list[RenderableType] = []
    d = f.divergence
    if d is not None:
        t = _divergence_head(d)
        for side, run, prof in (("a", run_a, prof_a), ("b", run_b, prof_b)):
            t.append_text(_divergence_side(f, d, side, run, prof))
        parts.append(t)
    else:
        failed = diagnosis_failed(f)
        parts.append(
            Text(
                f"Divergence: diagnosis failed ({failed})"
                if failed
                else "Divergence: not diagnosed yet (diagnosis runs in the background)"
                if f.category is None
                else "Divergence: diagnosis found no divergence point for this finding",
                style="bold red" if failed else "dim",
            )
        )
    for side, run, prof, region, names in (
        ("a", run_a, prof_a, f.region_a, f.ops_a),
        ("b", run_b, prof_b, f.region_b, f.ops_b),
    ):
        t = Text()
        t.append(f"\n {side.upper()} ", style="bold reverse")
        t.append(f" {run}: kernel call paths of the region\n", style="bold")
        for p in kernel_paths(prof, region, names):
            t.append(f"  {p}\n", style=side_style(f, side))
        parts.append(t)
    return Group(*parts)


def _divergence_head(d: Divergence) -> Text:
    """The level, and the common prefix of the two paths (the middle elided)."""
    t = Text()
    t.append("Divergence", style="bold underline")
    if d.level:
        t.append(f" at the {d.level} level", style="bold")
    if d.identical_paths:
        t.append(f"  ({d.identical_paths} kernel paths identical on both sides)", style="dim")
    t.append("\n")
    common = d.common_prefix
    if common:
        t.append(f"common to both ({len(common)}):\n", style="dim")
        shown: list[PathElement | None] = list(common)
        if len(common) > PREFIX_SHOWN:
            shown = [*common[:2], None, *common[-(PREFIX_SHOWN - 2) :]]
        for el in shown:
            if el is None:
                t.append(f"  ⋮ {len(common) - PREFIX_SHOWN} more\n", style="dim")
                continue
            line = Text("  ")
            line.append_text(element_text(el))
            line.stylize("dim")
            t.append_text(line)
            t.append("\n")
    return t


def _divergence_side(f: Finding, d: Divergence, side: str, run: str, prof: Profile | None) -> Text:
    """One side's first differing element, its operator and where it was decided."""
    t = Text()
    style = side_style(f, side)
    t.append(f" {side.upper()} ", style="bold reverse")
    t.append(f" {run} ", style="bold")
    t.append("wasteful" if f.wasteful == side else "efficient", style=style)
    op_i = d.op_a if side == "a" else d.op_b
    if prof is not None and isinstance(op_i, int) and 0 <= op_i < len(prof.ops):
        op = prof.ops[op_i]
        t.append(f" — op {short_op(op.name)} in {op.module or '(root)'}", style="dim")
    t.append("\n  ▶ ", style="bold " + style)
    el = element_text(d.element(side))
    el.stylize("bold " + style)
    t.append_text(el)
    t.append("\n")
    site = d.site(side)
    if site is not None:
        how = "decided by a branch in " if site.branch else "decided after "
        t.append(f"    {how}", style="dim")
        t.append_text(element_text(site))
        t.append("\n")
    return t


# ------------------------------------------------------------------------------------
# Root cause and fix
# ------------------------------------------------------------------------------------


def _value(v: Any) -> str:
    """A value as diagnosis reports it: already source-like text ("'gelu_new'", "True")."""
    return "None" if v is None else str(v)


def _where(file: Any, line: Any) -> str:
    return f"{_short_path(str(file))}:{line}" if file else ""


def root_cause_view(f: Finding, run_a: str, run_b: str) -> RenderableType:
    """Variable, its value on each side and where each value comes from, the source
    lines at the origin (read from the file now), the data flow from the key variable to
    the origin, and the knowledge rule that names the pattern."""
    rc = f.root_cause
    if rc is None:
        msg = (
            "Root cause: not diagnosed yet (diagnosis runs in the background)"
            if f.category is None
            else "Root cause: diagnosis could not tie this finding to a variable"
        )
        return Text(msg, style="dim")
    parts: list[RenderableType] = [_cause_head(f, rc, run_a, run_b)]
    snippet = _origin_source(rc)
    if snippet is not None:
        parts.append(snippet)
    flow = _flow_text(f, rc)
    if flow:
        parts.append(flow)
    if rc.rule is not None:
        parts.append(_rule_text(rc.rule))
    return Group(*parts)


def _cause_head(f: Finding, rc: RootCause, run_a: str, run_b: str) -> Text:
    """Kind and category, the variable, each side's value and origin, where to change it."""
    t = Text()
    t.append("Root cause", style="bold underline")
    if rc.kind:
        t.append(f"  {rc.kind}", style="bold cyan")
    if f.category:
        t.append(f" · {f.category}", style="cyan")
    t.append("\n")
    if rc.error:
        t.append(f"diagnosis failed: {rc.error}\n", style="bold red")
    if rc.note:  # e.g. what an interpreter finding's Python was, and why no patch
        t.append(rc.note + "\n", style="italic")
    values = {k: v for k, v in rc.values.items() if v is not None}
    if f.kind == "interpreter":
        return t  # no variable to look for: interpreter time has no kernel path
    if rc.variable is None and not values:
        t.append("no variable found that decides this difference\n", style="yellow")
    else:
        t.append("variable ")
        t.append(str(rc.variable or "?"), style="bold yellow")
        if rc.library_default:
            t.append(
                "  (the wasteful value is the library's default, not written in the code)",
                style="dim",
            )
        t.append("\n")
    for side, run in (("a", run_a), ("b", run_b)):
        o = rc.origin(side)
        if side not in values and not (o is not None and o.file):
            continue
        t.append(f"  {side.upper()} {run}: ", style="bold")
        t.append(_value(values.get(side)), style="bold " + side_style(f, side))
        if o is not None and o.file:
            t.append(f"  ← {_loc(f'{o.file}:{o.line}')}", style="dim")
            if o.note:
                t.append(f" ({o.note})", style="dim")
        t.append("\n")
    if rc.file:
        t.append("change it at ")
        t.append(_where(rc.file, rc.line or 0), style="bold underline")
        t.append("\n")
    return t


def _origin_source(rc: RootCause) -> RenderableType | None:
    """The source around the origin, read now (or the recorded statement)."""
    file, line = rc.file or "", rc.line or 0
    snip = source_snippet(file, int(line))
    if snip is not None:
        return Syntax(
            snip.text,
            "python",
            line_numbers=True,
            start_line=snip.first_line,
            highlight_lines={snip.line},
            theme="ansi_dark",
            word_wrap=True,
        )
    if file:
        code = rc.code
        return Text(f"  {code}" if code else f"(source not readable here: {file})", style="dim")
    return None


def _flow_text(f: Finding, rc: RootCause) -> Text:
    """The data flow from the key variable to the origin, how the key variable was
    found, and the notes."""
    kv = rc.key_variable
    t = Text()
    if rc.data_flow:
        t.append("\nHow the value reaches the kernels", style="bold underline")
        t.append(" (key variable first)\n", style="dim")
    for k, hop in enumerate(rc.data_flow, start=1):
        t.append(f" {k}. ", style="bold")
        t.append(_where(hop.file, hop.line), style="underline")
        if hop.note:
            t.append(f"  {hop.note}", style="dim")
        t.append("\n")
        if hop.code:
            t.append(f"    {hop.code.strip()}\n", style="italic")
        if hop.expr and hop.values:
            t.append(f"    {hop.expr}: ", style="dim")
            t.append(f"A {_value(hop.values.get('a'))}", style=side_style(f, "a"))
            t.append(" · ", style="dim")
            t.append(f"B {_value(hop.values.get('b'))}", style=side_style(f, "b"))
            t.append("\n")
    if kv is not None and kv.expr:
        t.append(f"key variable {kv.expr} ({kv.kind or '?'})", style="dim")
        if kv.rerun_ran:
            t.append(
                f", found by re-running both scripts with line tracing ({kv.rerun_seconds:.1f} s)",
                style="dim",
            )
        t.append("\n")
    notes = (kv.note if kv is not None else None, rc.note)
    for note in dict.fromkeys(n for n in notes if n):
        t.append(f"{note}\n", style="dim")
    return t


def _rule_text(rule: RuleRef) -> Text:
    t = Text()
    t.append("\nKnown pattern ", style="bold underline")
    t.append(f" {rule.id}", style="bold")
    if rule.title:
        t.append(f": {rule.title}")
    if rule.grounding:
        t.append(f" ({rule.grounding})", style="dim")
    for ref in rule.references:
        t.append(f"\n  {ref}", style="underline")
    return t


def fix_view(f: Finding, exported: str | None = None) -> RenderableType:
    """The suggested change, the patch preview (syntax-highlighted diff) or, when the
    change is not mechanical, the efficient side's code as guidance."""
    fx = f.fix
    if fx is None:
        failed = diagnosis_failed(f)
        msg = (
            f"Fix: none, diagnosis failed ({failed})"
            if failed
            else "Fix: waiting for diagnosis"
            if f.category is None
            else "Fix: no automatic fix for this finding (see the root cause above)"
        )
        return Text(msg, style="bold red" if failed else "dim")
    parts: list[RenderableType] = []
    t = Text()
    t.append("\nSuggested fix\n", style="bold underline")
    t.append(fx.summary or "(no summary)", style="bold green")
    for ref in fx.references:
        t.append(f"\n  {ref}", style="underline")
    parts.append(t)
    if fx.patch:
        parts += patch_preview(fx.patch, fx.base_dir or "")
    else:
        parts.append(Text("\nNo patch: the change is not mechanical here.", style="dim"))
        if fx.snippet:
            parts.append(Text("The efficient side's code, as guidance:", style="dim"))
            parts.append(Syntax(fx.snippet.rstrip("\n"), "python", theme="ansi_dark"))
    if exported:
        parts.append(Text(f"\nexported to {exported}", style="bold"))
    return Group(*parts)


def patch_preview(patch: str, base_dir: str) -> list[RenderableType]:
    """A patch, its changed lines first: the `-`/`+` lines under the place they change,
    then the whole patch with its headers and context. At 80×24 the unified diff's
    headers, hunk line and three lines of context put the change itself below the fold."""
    where = first_changed_line(patch)
    at = f" at {where[0]}:{where[1]}" if where else ""
    head = Text(f"\nPatch preview{at}", style="bold")
    head.append(" · x: export, never applied here", style="dim")
    parts: list[RenderableType] = [head]
    changed = changed_lines(patch)
    if changed:
        parts.append(Syntax("\n".join(changed), "diff", theme="ansi_dark", word_wrap=True))
    rel = f" (paths relative to {base_dir})" if base_dir else ""
    parts.append(Text(f"\nThe whole patch{rel}:", style="dim"))
    parts.append(Syntax(patch.rstrip("\n"), "diff", theme="ansi_dark", word_wrap=True))
    return parts


# ------------------------------------------------------------------------------------
# Help
# ------------------------------------------------------------------------------------


def keys_table(sections: Iterable[tuple[str, Sequence[tuple[str, str]]]]) -> Table:
    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold cyan", no_wrap=True)
    table.add_column()
    first = True
    for title, rows in sections:
        if not first:
            table.add_row("", "")
        first = False
        table.add_row(Text(title, style="bold underline"), "")
        for key, what in rows:
            table.add_row(key, what)
    return table


class Note(Static):
    """A one- or few-line message (info, warning, error) shown inside a screen."""
