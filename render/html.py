"""`magneton diff --html OUT`: one self-contained HTML page of a diff.

What a profiler user looks for, in one file they can attach to a review or a CI job:
the runs and how their energy was obtained, the findings table, and per cause (the
largest first) the matched regions as side-by-side energy icicles by module, the root
cause and the patch; then each run's power timeline.

Choices, and the failure each prevents:

* **The rows of `magneton diff`, from the stored diff.** The table and the sections are
  the causes of render/view.py's `diff_view`, one per cause group, with the figures and
  the patch the CLI and the TUI show. Listed per finding, one cause showed as two
  findings with one patch twice (4.29% + 0.70% where `diff` said 5.2%), and a page
  written by a second `diff --html` re-measured the runs (17 s) and disagreed with the
  table printed before it; `magneton diff` now hands this module the stored diff.

* **No network.** Everything is inline SVG and CSS; there is no script, font or style
  sheet fetched from a CDN. A report opened on an air-gapped cluster, or archived as a CI
  artifact and opened a year later, looks the same as the day it was written.
* **Tooltips are SVG `<title>` elements**, not JavaScript: full module paths and exact
  joules stay readable on boxes too narrow for a label, and the page works where scripts
  are blocked (CI artifact viewers often block them).
* **One joule scale for both sides of a finding.** Each icicle's full width is the larger
  side's region energy, so the wasteful side is visibly wider; two icicles each scaled to
  its own width would look alike whatever the saving.
* **The icicles are built from the operators' own energies**, the interpreter time
  between operators taken out (`operators_only`, what `report` and the TUI show; the DB's
  `Operator.energy_j` includes it, docs/schema.md), under their module paths. The header
  above them gives the region energies the verdict rests on (after confirmation, when it
  ran, and per occurrence), so where the two figures differ both are labelled.
* **Bounded size.** At most `MAX_FINDINGS` findings get icicles (the table lists all),
  icicle boxes narrower than `MIN_BOX_PX` are merged into their parent's "other", and a
  power series is thinned to `MAX_POINTS` points: a 100k-operator diff stays a page a
  browser opens at once.
* **Every text is escaped** (`html.escape`): kernel names are C++ templates full of `<`,
  `>` and `&`.
"""

from __future__ import annotations

import html
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from magneton.model import (
    DiffResult,
    Finding,
    MagnetonError,
    PowerSeries,
    Profile,
    RunSummary,
)

from .view import CauseRow, DiffView, diff_view, joules, share_text

MAX_FINDINGS = 12
MIN_BOX_PX = 2.0
MAX_POINTS = 1500
ICICLE_W_PX = 560
ROW_H_PX = 18
# wasteful side, efficient side, neutral boxes (colour-blind safe: orange / blue / grey)
WASTE_FILL = "#e8894a"
LEAN_FILL = "#5b9bd5"


@dataclass
class Node:
    """One box of an icicle: a module (or an operator at the leaves) and its energy."""

    name: str
    energy_j: float = 0.0
    children: dict[str, Node] = field(default_factory=dict)


def module_tree(profile: Profile, ops: Iterable[int]) -> Node:
    """The region's operators under their module paths (`h.0.mlp.act` → h > 0 > mlp >
    act), leaves the operators; each box's energy is its subtree's."""
    root = Node("region")
    for i in ops:
        if not 0 <= i < len(profile.ops):
            continue
        op = profile.ops[i]
        path = op.module.split(".") if op.module else []
        node = root
        node.energy_j += op.energy_j
        for seg in [*path, op.name]:
            node = node.children.setdefault(seg, Node(seg))
            node.energy_j += op.energy_j
    return root


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _fmt_j(x: float) -> str:
    if x == 0:
        return "0 J"
    ax = abs(x)
    if ax >= 1:
        return f"{x:.4g} J"
    if ax >= 1e-3:
        return f"{x * 1e3:.4g} mJ"
    return f"{x * 1e6:.4g} µJ"


def icicle_svg(root: Node, scale_j: float, fill: str, label: str) -> str:
    """An icicle (a flame graph drawn top-down) of `root`, `scale_j` joules = full width."""
    scale = ICICLE_W_PX / scale_j if scale_j > 0 else 0.0
    boxes: list[str] = []
    depth_max = 0

    def draw(node: Node, x: float, depth: int, trail: str) -> None:
        nonlocal depth_max
        w = node.energy_j * scale
        if w < MIN_BOX_PX and depth > 0:
            return
        depth_max = max(depth_max, depth)
        y = depth * ROW_H_PX
        tip = f"{trail} — {_fmt_j(node.energy_j)}"
        text = ""
        if w > 30:
            chars = int((w - 6) / 6.5)
            name = node.name if len(node.name) <= chars else node.name[: max(chars - 1, 1)] + "…"
            text = f'<text x="{x + 3:.1f}" y="{y + 13}">{_e(name)}</text>'
        boxes.append(
            f'<g><title>{_e(tip)}</title><rect x="{x:.1f}" y="{y}" width="{max(w, 0.5):.1f}" '
            f'height="{ROW_H_PX - 1}" fill="{fill}" fill-opacity="{max(0.35, 1 - 0.08 * depth):.2f}"'
            f' stroke="#fff" stroke-width="0.5"/>{text}</g>'
        )
        cx = x
        for child in sorted(node.children.values(), key=lambda n: -n.energy_j):
            draw(child, cx, depth + 1, f"{trail}.{child.name}" if depth else child.name)
            cx += child.energy_j * scale

    draw(root, 0.0, 0, label)
    h = (depth_max + 1) * ROW_H_PX
    return (
        f'<svg class="icicle" xmlns="http://www.w3.org/2000/svg" width="{ICICLE_W_PX}" '
        f'height="{h}" viewBox="0 0 {ICICLE_W_PX} {h}" role="img" '
        f'aria-label="{_e(label)} energy by module">{"".join(boxes)}</svg>'
    )


def _thin(t: list[int], w: list[float]) -> tuple[list[int], list[float]]:
    step = max(1, len(t) // MAX_POINTS)
    return t[::step], w[::step]


def power_svg(series: list[PowerSeries], label: str, watts_max: float) -> str:
    """Each power series of a run as a line, time from the run's first sample in seconds,
    on a watt scale shared with the other run (`watts_max`)."""
    width, height, pad = 560, 160, 36
    shown = [s for s in series if len(s.t_ns) >= 2]
    if not shown:
        return f'<p class="muted">{_e(label)}: no power samples stored</p>'
    t0 = min(s.t_ns[0] for s in shown)
    t1 = max(s.t_ns[-1] for s in shown)
    span = max(t1 - t0, 1)
    top = watts_max if watts_max > 0 else 1.0
    colors = ["#c0504d", "#4f81bd", "#9bbb59", "#8064a2", "#f79646"]
    lines = []
    for k, s in enumerate(shown):
        ts, ws = _thin(list(s.t_ns), list(s.watts))
        pts = " ".join(
            f"{pad + (t - t0) / span * (width - pad - 8):.1f},"
            f"{height - 20 - w / top * (height - 30):.1f}"
            for t, w in zip(ts, ws, strict=True)
        )
        lines.append(
            f'<polyline fill="none" stroke="{colors[k % len(colors)]}" stroke-width="1.2" '
            f'points="{pts}"><title>{_e(s.device)} ({_e(s.source)})</title></polyline>'
            f'<text x="{pad + 4}" y="{14 + 12 * k}" fill="{colors[k % len(colors)]}">'
            f"{_e(s.device)} ({_e(s.source)})</text>"
        )
    axis = (
        f'<line x1="{pad}" y1="{height - 20}" x2="{width - 8}" y2="{height - 20}" stroke="#888"/>'
        f'<line x1="{pad}" y1="10" x2="{pad}" y2="{height - 20}" stroke="#888"/>'
        f'<text x="2" y="14">{top:.0f} W</text><text x="2" y="{height - 22}">0 W</text>'
        f'<text x="{width - 60}" y="{height - 4}">{span / 1e9:.3g} s</text>'
    )
    return (
        f'<figure><figcaption>{_e(label)}</figcaption><svg class="power" '
        f'xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="power of {_e(label)}">'
        f"{axis}{''.join(lines)}</svg></figure>"
    )


_STYLE = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,sans-serif;margin:24px;color:#222;max-width:1240px}
h1{font-size:20px}h2{font-size:17px;margin-top:28px}h3{font-size:15px}
table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:3px 8px;text-align:left}
th{background:#f3f3f3}td.num{text-align:right;font-variant-numeric:tabular-nums}
.sides{display:flex;gap:24px;flex-wrap:wrap}.side{flex:0 0 auto}
svg text{font:11px monospace;fill:#111}.muted{color:#777}
pre{background:#f7f7f7;border:1px solid #ddd;padding:8px;overflow-x:auto;font-size:12px}
.waste{color:#b35a1f;font-weight:600}.warn{background:#fff4d6;padding:6px 10px;border-left:4px solid #e0a800}
"""


def _run_line(s: RunSummary, side: str) -> str:
    from magneton.model.wording import energy_wording

    how = energy_wording(s.energy_method, s.power_source)
    return (
        f"<li><b>{side}</b> = <code>{_e(s.run)}</code>: {_fmt_j(s.energy_j)}/call, "
        f"{s.time_s * 1e3:.3g} ms/call ({_e(how)})</li>"
    )


def _findings_table(view: DiffView) -> str:
    """One row per cause, the same rows as `magneton diff`'s table and the TUI's."""
    rows = []
    for row in view.rows:
        cls = ' class="waste"' if row.verdict == "waste" else ""
        ids = ",".join(str(i) for i in row.ids)
        interval = row.interval.text() if row.interval is not None else "-"
        cause = row.cause_lines[0] if row.cause_lines else (row.cause or "not diagnosed")
        rows.append(
            f'<tr><td><a href="#f{row.lead.id}">#{_e(ids)}</a></td><td{cls}>{_e(row.verdict)}</td>'
            f"<td>{_e(row.wasteful)}</td><td class=num>{_e(joules(row.saving_j))}</td>"
            f"<td class=num>{_e(share_text(row.saving_share))}</td><td>{_e(interval)}</td>"
            f"<td class=num>{row.places}</td><td>{_e(row.confirmed)}</td>"
            f"<td>{_e(row.cause or '-')}</td><td>{_e(cause)}</td></tr>"
        )
    if not rows:
        return f"<p>No findings. {_e(view.result.message)}</p>"
    return (
        "<table id=findings><tr><th>#</th><th>verdict</th><th>wasteful</th>"
        "<th>saving/call</th><th>share</th><th>95% interval</th><th>places</th>"
        "<th>confirmed</th><th>cause</th><th>diagnosis</th></tr>" + "".join(rows) + "</table>"
    )


def _other_figure(drawn_j: float, region_j: float) -> str:
    """The verdict's region energy where it is not the drawn one (a confirmed finding's
    re-measured figure): labelled, never silently different."""
    if abs(drawn_j - region_j) <= 1e-3 * max(abs(drawn_j), abs(region_j), 1e-12):
        return ""
    return f" as recorded; {_e(_fmt_j(region_j))}/call re-measured (the verdict's figure)"


def _cause_section(row: CauseRow, pa: Profile | None, pb: Profile | None) -> str:
    """A cause: its figures, its lead region's icicles, its diagnosis and its one patch."""
    f = row.lead
    ids = ",".join(str(i) for i in row.ids)
    places = f" in {row.places} places" if row.places > 1 else ""
    parts = [
        f'<section class="finding" id="f{f.id}"><h3>#{_e(ids)} {_e(row.verdict)}: '
        f"{_e(row.wasteful)} spends {_e(joules(row.saving_j))} more per call "
        f"({_e(share_text(row.saving_share))} of its run){_e(places)}</h3>"
    ]
    if pa is not None and pb is not None and f.kind == "region":
        parts.append(_icicles(f, pa, pb, len(row.ids) > 1))
    parts.append("<h4>Root cause</h4><ul>")
    parts += [f"<li>{_e(line)}</li>" for line in row.cause_lines or ["not diagnosed"]]
    parts.append("</ul>")
    fix = row.fix
    if fix is not None and (fix.summary or fix.patch):
        parts.append(f"<h4>Fix</h4><p>{_e(fix.summary)}</p>")
        if fix.patch:
            parts.append(f'<pre class="patch">{_e(fix.patch)}</pre>')
    parts.append("</section>")
    return "".join(parts)


def _icicles(f: Finding, pa: Profile, pb: Profile, grouped: bool) -> str:
    """The lead region's two icicles on one joule scale (module docstring)."""
    from magneton.diagnose.api import operators_only

    oa, ob = operators_only(pa), operators_only(pb)
    ta, tb = module_tree(oa, f.region_a.ops), module_tree(ob, f.region_b.ops)
    scale = max(ta.energy_j, tb.energy_j)
    sides = []
    for side, tree, region in (("a", ta, f.region_a), ("b", tb, f.region_b)):
        fill = WASTE_FILL if side == f.wasteful else LEAN_FILL
        sides.append(
            f'<div class="side"><div><b>{side}</b>: {_e(_fmt_j(tree.energy_j))}/call'
            + _other_figure(tree.energy_j, region.energy_j)
            + f"</div>{icicle_svg(tree, scale, fill, side)}</div>"
        )
    which = f"its largest region (#{f.id}); " if grouped else ""
    return (
        f'<p class="muted">Energy by module of {which}both sides on one scale (full width = '
        f"{_e(_fmt_j(scale))}); hover a box for its path and joules.</p>"
        f'<div class="sides">{"".join(sides)}</div>'
    )


def diff_html(
    result: DiffResult,
    pa: Profile | None = None,
    pb: Profile | None = None,
    *,
    warning: str = "",
    rank_sides: dict[int, tuple[Profile, Profile]] | None = None,
) -> str:
    """The page (module docstring). `pa`/`pb` are the two runs' profiles (None for a job
    diff); `rank_sides` gives a job finding's two rank profiles by finding id, for its
    icicles (a job page has no power timeline: one per rank would not fit a page)."""
    a, b = result.a, result.b
    body = [
        f"<h1>Magneton diff: {_e(a.run)} vs {_e(b.run)}</h1>",
        f"<ul>{_run_line(a, 'a')}{_run_line(b, 'b')}</ul>",
    ]
    if warning:
        body.append(f'<p class="warn">{_e(warning)}</p>')
    for note in (result.match_note, result.confirm_note):
        if note:
            body.append(f'<p class="muted">{_e(note)}</p>')
    view = diff_view(result)
    body.append(
        f"<h2>Findings ({len(view.real)} cause{'s' if len(view.real) != 1 else ''}"
        + (f", {len(view.noise)} judged noise" if view.noise else "")
        + ")</h2>"
    )
    body.append(_findings_table(view))
    shown = view.real[:MAX_FINDINGS]
    for row in shown:
        sa, sb = (rank_sides or {}).get(row.lead.id, (pa, pb))
        body.append(_cause_section(row, sa, sb))
    if len(view.real) > MAX_FINDINGS:
        body.append(
            f'<p class="muted">{len(view.real) - MAX_FINDINGS} more causes are in '
            "the table only (`magneton diff --json` has them all).</p>"
        )
    if pa is not None and pb is not None:
        body.append("<h2>Power timeline</h2>")
        w_max = max((max(s.watts) for p in (pa, pb) for s in p.power if s.watts), default=0.0)
        body.append(
            '<div class="sides">'
            + power_svg(pa.power, f"a = {a.run}", w_max)
            + power_svg(pb.power, f"b = {b.run}", w_max)
            + "</div>"
        )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>Magneton diff {_e(a.run)} vs {_e(b.run)}</title><style>{_STYLE}</style>"
        f"</head><body>{''.join(body)}</body></html>\n"
    )


def write_diff_html(db: Any, path: str, result: DiffResult, warning: str = "") -> None:
    """`magneton diff --html OUT`: the page of the diff `magneton diff` shows (the stored
    one unless `--rerun`), its profiles read from the open DB `db`; a job diff has no single profile per side, so its page has the
    findings and causes but no icicles or power. An unwritable path is a one-line
    MagnetonError (the diff itself is already stored)."""
    runs = [result.a.run, result.b.run]
    pa = pb = None
    rank_sides: dict[int, tuple[Profile, Profile]] = {}
    if all(db.has_run(r) for r in runs):
        pa, pb = (db.load_profile(r) for r in runs)
    else:  # a job: each shown finding's regions are in one rank pair's runs
        loaded: dict[str, Profile] = {}
        for f in (row.lead for row in diff_view(result).real[:MAX_FINDINGS]):
            pair = (f.job.runs or {}) if f.job is not None else {}
            names = [pair.get("a") or "", pair.get("b") or ""]
            if f.kind != "region" or not all(n and db.has_run(n) for n in names):
                continue
            for n in names:
                if n not in loaded:
                    loaded[n] = db.load_profile(n)
            rank_sides[f.id] = (loaded[names[0]], loaded[names[1]])
    page = diff_html(result, pa, pb, warning=warning, rank_sides=rank_sides)
    try:
        Path(path).write_text(page, encoding="utf-8")
    except OSError as e:
        raise MagnetonError(f"cannot write {path}: {e.strerror or e}") from None
    print(f"wrote {path}", file=sys.stderr)
