"""`magneton report`'s output for one run: the breakdown table (by operator or kernel; by
module a tree) with its total row, the idle baseline, how the energy was obtained, how
repeatable it was, and the folded module tree; the same numbers as JSON and CSV for
scripts.

Every line that relates two figures is worded from the figures themselves, so it cannot
contradict them (each of these was printed once):

* **The spread says what it covers.** The "±" is the CV of whole calls within this one
  process; three recordings of one GPT-2 script beside a busy core gave 7.37, 7.03 and
  6.67 J/call while each printed ±1.1–3.4%. A second line gives the interval a new
  recording under like load is expected in (`rerecord_interval`), and what it is made of.
* **A headline outside the whole calls' range says why, with the gap.** The model prices
  each operator at its cheapest iterations, so the headline sits below every whole call
  (377 J/call against a cheapest call of 443 J); the line gives the gap and its reason.
* **No negative remainder.** A call's CPU time exceeds its wall time when several
  threads run at once ("57.41 ms of CPU … a call took 50.9 ms wall (the rest: …)"): the
  time line says which of the two is larger and names the difference only when it is
  one.
* **Interpreter rows are not operators.** `python:` rows (time between operators) have
  no calls: their calls and J/call cells are "-", not 0 beside non-zero joules.
* **One operator name.** Rows are named by `Operator.name`, what `magneton query`
  returns; where Python called it through another aten op (`Operator.api`, `aten::linear`
  reaching `aten::addmm`) the row says "(as aten::linear)", so the two names never look
  like two operators.
* **`--by module` is a tree** to `--depth` levels, repeated blocks folded (`layer.* ×12`),
  not 70 flat rows of cut dotted paths.

Run and operator names are user text, so every one is escaped (`bert[fp64]` is not rich
markup). A piped console is widened to 120 columns so names are not wrapped in logs.
"""

from __future__ import annotations

import argparse
import csv
from typing import TextIO

from rich.markup import escape

from magneton.model import Profile


def report_json(profile, rows, tree, by, flatten_tree) -> dict:
    """`report --json`: the run's totals, its breakdown and its module tree."""
    r = profile.run
    key = {"op": "operators", "module": "modules_table", "kernel": "kernels"}[by]
    sp = profile.energy.spread
    out = {
        "run": r.name,
        "power_source": r.power_source,
        "energy_method": r.energy_method,
        "method_note": profile.energy.note,
        "energy_j": r.energy_j,
        "energy_above_idle_j": r.energy_above_idle_j,
        "time_s": r.time_s,
        "idle_w": r.idle_w,
        "by": by,
        "operators": [],
        "modules": flatten_tree(tree),
        "spread": (
            {**sp.__dict__, "unstable": sp.unstable, "rerecord_j": rerecord_interval(profile)}
            if sp.iterations
            else None
        ),
        "clock": profile.energy.clock,
    }
    if by == "op":
        out["operators"] = [x.to_json() for x in rows]
    else:
        # "operators" is always the per-operator table; the requested grouping is extra
        from magneton.diagnose.api import operator_table

        out["operators"] = [x.to_json() for x in operator_table(profile, by="op")]
        out[key] = [x.to_json() for x in rows]
    if profile.energy.model is not None:
        out["model"] = profile.energy.model
    if "fused.energy_j" in profile.config:  # a JAX/TensorFlow run (tracer/frameworks)
        cfg = profile.config
        out["framework"] = cfg.get("framework", "")
        out["fused"] = {
            k.removeprefix("fused."): cfg[k] for k in sorted(cfg) if k.startswith("fused.")
        }
    gaps = sum(len(s.gaps) for s in profile.power)
    if gaps:
        out["sensor_gaps"] = gaps
    return out


def rerecord_interval(profile) -> tuple[float, float] | None:
    """Where a new recording of this run under similar load is expected (J per call):
    from the headline less twice the within-run CV to the mean whole call plus it; None
    when the run has no per-iteration record.

    Why not the headline ± its CV: the CV is the scatter of whole calls within one
    process, and the headline prices each operator at its cheapest iterations, which
    removes part of what other processes add, not all of it. How much remains depends on
    the load a recording meets, so it changes between recordings and not within one: three
    recordings of one GPT-2 script beside a busy core spread 10% while each printed ±1.1
    to 3.4%. The run measures how much load it met: its mean whole call lies above its
    headline by what contention added (72% on a 4x oversubscribed box), and a recording
    under like load lands between the two. Three recordings of a 12-layer GPT-2 at load 6
    to 9 on 2 cores gave headlines of 96.9, 92.6 and 159.4 J/call; these intervals
    (73-208, 52-243 and 141-219 J) overlap, the headline ± twice the CV (73-121, 52-133,
    141-178 J) did not."""
    sp = profile.energy.spread
    e = profile.run.energy_j
    if sp.iterations < 2 or e <= 0:
        return None
    return max(0.0, e * (1 - 2 * sp.cv)), max(sp.mean_j, e) * (1 + 2 * sp.cv)


def spread_line(profile, db: str = "DB") -> str:
    """How repeatable the run's energy was: within the run (over its timed iterations),
    how its headline relates to its whole calls, and what a new recording is expected to
    give; what to do when it is too noisy to compare ("" when the run has no
    per-iteration record)."""
    sp = profile.energy.spread
    if sp.iterations < 2:
        return ""
    e = profile.run.energy_j
    line = (
        f"spread: ±{100 * sp.cv:.1f}% within this run (CV of the whole call's energy over "
        f"{sp.iterations} timed iterations, min {_fmt(sp.min_j)} J, max {_fmt(sp.max_j)} J"
        + (f"; stopped: {sp.stop_reason}" if sp.stop_reason else "")
        + ")"
    )
    if e > 0 and not (sp.min_j <= e <= sp.max_j):
        # the model prices each operator on its own cheapest iterations (docs/energy.md),
        # and no whole call has every operator at its cheapest at once: the headline
        # sits below the cheapest call. Said here with the gap, so "11.4 J/call … min
        # 12.15 J" is no contradiction left for the reader to resolve.
        below = e < sp.min_j
        edge = sp.min_j if below else sp.max_j
        gap = abs(edge - e) / edge
        line += (
            f"\nheadline {_fmt(e)} J/call is {gap:.0%} {'below the cheapest' if below else 'above the costliest'} "
            f"whole call: it sums each operator's own cheapest iteration (robust to load), "
            "while min/max are whole calls"
            + (
                ", each of which had some operators slowed by other processes (contention "
                "for the CPU, its caches and clocks)"
                if below
                else ""
            )
        )
    span = rerecord_interval(profile)
    if span is not None:
        lo, hi = span
        excess = (sp.mean_j - e) / e
        why = (
            f"; its whole calls averaged {excess:.0%} above the headline, what other "
            "processes added, and where a recording lands between the two depends on the "
            "load it meets"
            if excess > sp.cv
            else ""
        )
        line += (
            f"\nre-recording under like load: expect {_fmt(lo)}–{_fmt(hi)} J/call (this "
            "run's J/call less twice the within-run spread, up to its mean whole call plus it"
            f"{why}). To compare two recordings, `magneton diff` re-measures both in "
            "alternating rounds"
        )
    if sp.unstable:
        line = (
            f"[yellow]{line}\nunstable: the call's energy varied ±{100 * sp.cv:.0f}% between "
            f"iterations ({_likely_cause(profile)}); a diff "
            "against this run needs a larger difference to count as a finding. Record it "
            f"again on a quieter machine, or {more_iterations(profile, db)}.[/]"
        )
    return line


def _likely_cause(profile) -> str:
    """Why a run's iterations vary, by how its energy was obtained: a CPU-time model
    varies with contention for the CPU; a sampled sensor also with how many samples one
    call spans (on an H200, NVML at 5 ms over 2.7 ms calls varied ±214% on an idle box)."""
    source = profile.run.power_source or ""
    if source.startswith(("nvml", "rapl", "meter")):
        return (
            f"{source} samples power every few ms, so a short call spans few samples, and "
            "clocks and power ramp while the device warms up"
        )
    return "another process competing for the CPU, most likely"


def more_iterations(profile, db: str = "DB") -> str:
    """How to record more timed iterations of this run: `--repeat` for a script, a
    larger ACTIVE in `--steps` for a program (`record` refuses `--repeat` there)."""
    from magneton.tracer.api import ProgramSpec, suggested_steps

    spec = ProgramSpec.from_config(profile.config)
    if spec is None:
        return f"with --repeat {2 * profile.energy.spread.iterations} for more iterations"
    new = suggested_steps(spec.schedule)
    unit = "steps" if spec.mode == "steps" else "window executions"
    return f"with more timed {unit}: {spec.command(new, profile.run.name, db)}"


def _fmt(x: float, unit: str = "") -> str:
    if x == 0:
        return "0"
    ax = abs(x)
    if ax >= 1e4 or ax < 1e-3:
        return f"{x:.3g}{unit}"
    return f"{x:.4g}{unit}"


def print_rank_breakdowns(profiles: list, args: argparse.Namespace) -> None:
    """`report JOB --by kernel --top N`: the job's report, then each recorded rank's
    breakdown (the job report alone ignored --by and --top)."""
    from rich.console import Console

    from magneton.diagnose.api import operator_table, top_rows

    console = Console(emoji=False)
    if not console.is_terminal:
        console = Console(emoji=False, width=max(console.width, 120))
    for p in profiles:
        rows = top_rows(operator_table(p, by=args.by), args.top or 10, p.run.energy_j)
        console.print(_table(p, rows, args.by))


def _apis(profile) -> dict[str, str]:
    """operator name -> the aten op Python called to reach it, where that is one other
    op for all its calls (`aten::addmm` -> `aten::linear`); names called directly, or
    through several ops, are left out."""
    seen: dict[str, set[str]] = {}
    for op in profile.ops:
        seen.setdefault(op.name, set()).add(op.api or op.name)
    return {n: next(iter(a)) for n, a in seen.items() if len(a) == 1 and n not in a}


def _row_name(row, apis: dict[str, str]) -> str:
    """A row's name as `magneton query` returns it (`Operator.name`), with the op Python
    called where that differs (module docstring)."""
    from magneton.model.names import short_name

    api = apis.get(row.name) if row.kind == "op" else None
    return short_name(row.name) + (f" (as {short_name(api)})" if api else "")


def _table(profile, rows, by: str):
    """The breakdown table of one run (rows as `top_rows` gives them, plus the total)."""
    from rich import box
    from rich.table import Table

    from magneton.model.names import name_column

    r = profile.run
    title = {"op": "operator", "module": "module", "kernel": "kernel"}[by]
    # run and operator names are user text: `bert[fp64]` must not be read as markup
    table = Table(
        title=f"run '{escape(r.name)}': energy by {title} (per entry call)", box=box.SIMPLE_HEAD
    )
    # names shortened (model/names.py) and the column capped: one kernel's C++
    # signature folded into 30 lines per row
    table.add_column(title, min_width=12, **name_column())
    for col in ("calls", "time (s)", "energy (J)", "J/call", "avg W", "share"):
        table.add_column(col, justify="right")
    table.add_column("method")
    apis = _apis(profile) if by == "op" else {}
    for row in rows:
        python = row.kind == "python"  # interpreter time: no calls of its own
        table.add_row(
            escape(_row_name(row, apis)),
            "-" if python else str(row.calls),
            _fmt(row.time_s),
            _fmt(row.energy_j),
            "-" if python else _fmt(row.j_per_call),
            f"{row.avg_w:.1f}",
            f"{100 * row.share:.1f}%",
            row.method,
        )
    _total_row(table, profile, sum(x.calls for x in rows))
    return table


def _total_row(table, profile, calls: int) -> None:
    r = profile.run
    table.add_section()
    span = _span(profile)
    table.add_row(
        "total",
        str(calls),
        _fmt(span),
        _fmt(r.energy_j),
        "",
        f"{r.energy_j / span:.1f}" if span > 0 else "",
        "100%",
        r.energy_method,
    )


def _span(profile) -> float:
    """The charged time of the whole call (what the energy covers)."""
    span = profile.energy.span_s
    return span if span > 0 else profile.run.time_s


def module_table(profile, tree, max_depth: int, top: int | None = None):
    """`report --by module`: the module tree as a table, `max_depth` levels below the
    root, repeated blocks folded (`layer.* ×12`), children costliest first; a node whose
    children are not shown says how many there are, and `top` keeps that many children
    per node (the rest one "… N more" row)."""
    from rich import box
    from rich.table import Table

    r = profile.run
    table = Table(
        title=f"run '{escape(r.name)}': energy by module (per entry call; --depth {max_depth})",
        box=box.SIMPLE_HEAD,
    )
    table.add_column("module", min_width=12, no_wrap=True, overflow="ellipsis", max_width=60)
    for col in ("ops", "time (s)", "energy (J)", "self (J)", "share"):
        table.add_column(col, justify="right")
    table.add_column("type")

    def add(node, depth: int) -> None:
        name = node.name if node.path else (node.type or node.name)
        times = f" ×{node.instances}" if node.instances > 1 else ""
        table.add_row(
            escape("  " * depth + name + times),
            str(node.calls),
            _fmt(node.time_s),
            _fmt(node.energy_j),
            _fmt(node.self_energy_j) if node.children else "",
            f"{100 * node.share:.1f}%",
            escape(node.type if node.path else ""),
        )
        if not node.children:
            return
        if depth >= max_depth:
            n = len(node.children)
            table.add_row(f"[dim]{'  ' * (depth + 1)}… {n} submodule{'s' if n != 1 else ''}[/]")
            return
        shown = node.children[:top] if top else node.children
        for child in shown:
            add(child, depth + 1)
        rest = node.children[len(shown) :]
        if rest:
            e = sum(c.energy_j for c in rest)
            table.add_row(f"[dim]{'  ' * (depth + 1)}… {len(rest)} more[/]", "", "", _fmt(e))

    add(tree, 0)
    return table


def time_line(profile) -> str:
    """How the time the energy covers relates to a call's wall time ("" when they agree
    within 5%); each clause is chosen by which of the two is larger, so no remainder is
    ever negative (module docstring)."""
    r = profile.run
    span = _span(profile)
    wall = r.time_s
    if wall <= 0 or abs(span - wall) <= 0.05 * wall:
        return ""
    cpu = profile.energy.clock == "process-cpu"
    covers = (
        f"energy covers {_fmt(span * 1e3)} ms of CPU time per call (operators and the Python "
        "between them)"
        if cpu
        else f"energy covers {_fmt(span * 1e3)} ms per call (operators and the gaps between them)"
    )
    if span > wall:
        why = (
            "several threads ran at once, and CPU time counts each of them"
            if cpu
            else "each operator is charged its own cheapest iteration, and operators of "
            "several threads or streams overlap"
        )
        return (
            f"time: {covers}, {_fmt((span - wall) * 1e3)} ms more than the "
            f"{_fmt(wall * 1e3)} ms a call took on the wall clock: {why}"
        )
    rest = (
        "waiting for a CPU while other processes ran, Python before the first or after "
        "the last operator"
        if cpu
        else "Python before the first or after the last operator, and variation between iterations"
    )
    return (
        f"time: {covers}; a call took {_fmt(wall * 1e3)} ms on the wall clock on average, "
        f"{_fmt((wall - span) * 1e3)} ms more ({rest})"
    )


def _name_note(profile, rows) -> str:
    """What the names of the table mean, when it has `python:` rows or "(as …)"."""
    parts = ["names are `Operator.name`, as `magneton query` returns them"]
    if _apis(profile):
        parts.append("(as X): the aten op Python called to reach it (`Operator.api`)")
    if any(x.kind == "python" for x in rows):
        parts.append("python: interpreter time between operators, no calls of its own")
    return "[dim]" + escape("; ".join(parts)) + "[/]"


def print_report(
    profile, rows, tree, by: str, max_depth: int, db: str = "DB", top: int | None = None
) -> None:
    """The breakdown of one run as `magneton report` prints it to a terminal; by module,
    the tree table (`module_table`) stands for both the table and the tree."""
    from rich.console import Console

    r = profile.run
    console = Console(emoji=False)
    if not console.is_terminal:
        console = Console(
            emoji=False, width=max(console.width, 120)
        )  # a pipe: no wrapping of names
    if by == "module":  # the tree, not 70 flat rows of cut dotted paths
        console.print(module_table(profile, tree, max_depth, top))
    else:
        console.print(_table(profile, rows, by))
        if any(x.kind == "python" for x in rows) or _apis(profile):
            console.print(_name_note(profile, rows))
    console.print(
        f"idle baseline ~ {r.idle_w:.1f} W; above idle {_fmt(r.energy_above_idle_j)} J "
        f"of {_fmt(r.energy_j)} J per call"
    )
    line = time_line(profile)
    if line:
        console.print(line)
    console.print(f"energy: {method_line(profile)}")
    from magneton.tracer.api import fused_line

    fused = fused_line(profile)  # a JAX/TensorFlow run: its fused cost (tracer/frameworks)
    if fused:
        console.print(fused)
    line = spread_line(profile, db)
    if line:
        console.print(line)
    slowed = slowed_line(profile)
    if slowed:
        console.print(f"[yellow]{escape(slowed)}[/]")
    gaps = sum(len(s.gaps) for s in profile.power)
    if gaps:
        console.print(
            f"[yellow]sensor gaps: {gaps} (readings failed; power interpolated across them)[/]"
        )
    if r.timing == "combined":
        console.print("[yellow]timing includes structure-capture overhead (one-pass block)[/]")
    if by != "module":  # by module, the table above is the tree
        console.print(module_tree_view(tree, max_depth))


def module_tree_view(tree, max_depth: int):
    """The folded module tree under a table by operator or kernel (a rich `Tree`)."""
    from rich.tree import Tree

    def label(n) -> str:
        name = n.name if n.path else (n.type or n.name)
        times = f" ×{n.instances}" if n.instances > 1 else ""
        own = (
            f", self {_fmt(n.self_energy_j)} J"
            if n.children and n.self_energy_j > 0.005 * n.energy_j
            else ""
        )
        return (
            f"[bold]{escape(name)}[/]{times} {_fmt(n.energy_j)} J ({100 * n.share:.1f}%{own})"
            + (f" [dim]{escape(n.type)}[/]" if n.type and n.path else "")
        )

    root = Tree(label(tree))

    def add(parent, node, depth):
        if depth >= max_depth:
            if node.children:
                parent.add(f"[dim]… {len(node.children)} submodules[/]")
            return
        for c in node.children:
            add(parent.add(label(c)), c, depth + 1)

    add(root, tree, 0)
    return root


def write_report_csv(rows, out: TextIO) -> None:
    """`report --csv`: one row per breakdown row."""
    w = csv.writer(out)
    w.writerow(["name", "calls", "time_s", "energy_j", "j_per_call", "avg_w", "share", "method"])
    for r in rows:
        w.writerow(
            [r.name, r.calls, r.time_s, r.energy_j, r.j_per_call, r.avg_w, r.share, r.method]
        )


def method_line(profile: Profile) -> str:
    """One line saying how the run's energy numbers were obtained, and which power reading
    a sensor's power channels carried (`energy.power_signal`) where it had a choice."""
    r = profile.run
    line = _method_words(profile)
    signal = profile.config.get("energy.power_signal", "")
    if signal and r.energy_method != "estimated":
        line += f"; power readings: {signal}"
    return line


def _method_words(profile: Profile) -> str:
    r = profile.run
    src = r.power_source or "unknown source"
    note = profile.energy.note
    if r.energy_method == "estimated":
        line = f"estimated by {src}"
        if note:
            line += f" — {note}"
        return line
    if r.energy_method == "measured":
        return f"measured with {src} (side-thread sampling, trapezoid/counter integration)"
    if r.energy_method == "replayed":
        return f"replayed per operator with {src} (operator loops, paper §5.2)"
    if r.energy_method == "solved":
        return f"solved by least squares from {src} windows (per-type power)"
    return f"{r.energy_method or 'unknown method'} ({src})"


def outside_line(profile: Profile, unit: str = "unit") -> str:
    """What a program's timed units ran outside the step's common work ("" when none)."""
    o = profile.energy.outside
    if o is None or not o.operators:
        return ""
    top = ", ".join(f"{n} ×{c}" for n, c, _ in o.top[:3])
    return (
        f"outside the step's common work: {_fmt(o.energy_j)} J/{unit}, "
        f"{o.time_s * 1e3:.3g} ms/{unit} averaged over the {o.of_units} timed {unit}s "
        f"({o.operators} operators in {len(o.units)} of them: {top}); kept out of the "
        "step's graph and its figures"
    )


# a share of the CPU time other threads burn between operators that is worth saying
BUSY_SHARE_SAID = 0.10


def busy_line(profile: Profile) -> str:
    """What other threads burned while Python ran between operators, when it is a real
    share of the run's CPU time and the OpenMP workers were allowed to spin ("" else)."""
    try:
        share = float(profile.config.get("energy.busy_between_ops", ""))
    except ValueError:
        return ""
    policy = profile.config.get("env.OMP_WAIT_POLICY", "")
    if share < BUSY_SHARE_SAID or policy.upper() == "PASSIVE":
        return ""
    return (
        f"other threads burned {share:.0%} of the process's CPU time while Python ran between "
        f"operators: OpenMP workers spinning after each parallel region (OMP_WAIT_POLICY "
        f"{policy or 'unset'}; rule omp-busy-wait). That is what the program costs as run; "
        "`magneton record --steady` measures it with them asleep, and a diff of the two "
        "says what the policy costs"
    )


# How far the traced operators of a unit may exceed a whole untraced unit before the
# recording is said to have slowed the program: a unit's operators cannot take longer
# than the unit did untraced, give or take its noise. The timing pass itself costs
# 1.07x (docs/benchmarks.md); a margin of 2 leaves room for one noisy untraced unit.
SLOWED_MARGIN = 2.0
# and by the timing pass's own Python per operator, which a unit of microsecond
# operators pays in full (a 0.11 ms unit's operators took 0.23 ms traced)
TRACED_COST_PER_OP_S = 50e-6


def slowed_line(profile: Profile) -> str:
    """Said when the timed units' operators took more than `SLOWED_MARGIN` times what a
    whole untraced unit of the same program took (tracer/timing/alignment.py
    `note_slowed_units`): the recording slowed the program, and its figures are the
    slowed program's ("" else)."""
    try:
        plain = float(profile.config.get("energy.untraced_unit_s", ""))
    except ValueError:
        return ""
    ops_s = sum(op.time_s for op in profile.ops)
    if plain <= 0 or ops_s <= SLOWED_MARGIN * plain + TRACED_COST_PER_OP_S * len(profile.ops):
        return ""
    policy = profile.config.get("env.OMP_WAIT_POLICY", "")
    why = (
        "OpenMP workers spinning beside the tracer on a busy machine, most likely "
        f"(OMP_WAIT_POLICY {policy or 'unset'}); record with --steady, or on a quieter machine"
        if policy.upper() != "PASSIVE"
        else "other processes competing for the CPU, most likely; record on a quieter machine"
    )
    return (
        f"slowed by recording: the timed units' operators took {1e3 * ops_s:.4g} ms per "
        f"unit, {ops_s / plain:.0f}x the {1e3 * plain:.4g} ms a whole unit took untraced, so "
        f"these figures are not the program's ({why})"
    )


def record_lines(profile: Profile, db: str, described: str = "") -> tuple[list[str], list[str]]:
    """What `magneton record` prints for a run it stored: (lines for stdout, warnings for
    stderr), plain text (a run name such as `[/]` is not markup). A run that could not be
    priced (status "incomparable") says why instead of showing figures."""
    r = profile.run
    unit = "unit" if described else "call"
    what = f" ({described})" if described else ""
    size = f"{len(profile.ops)} operators" + (
        "" if described else f", {len(profile.tensors)} tensors"
    )
    if r.status != "ok":
        return (
            [f"recorded run '{r.name}'{what}: {size}, not priced -> {db}"],
            [f"run '{r.name}' is stored but cannot be compared: {r.error}"],
        )
    out = [
        f"recorded run '{r.name}'{what}: {size}, {r.time_s * 1e3:.2f} ms/{unit}, "
        f"{r.energy_j:.4g} J/{unit} ({r.energy_method}, {r.power_source}) -> {db}"
    ]
    outside = outside_line(profile, unit)
    if outside:
        out.append(outside)
    spin = busy_line(profile)
    if spin:
        out.append(spin)
    slowed = slowed_line(profile)
    return out, [slowed] if slowed else []
