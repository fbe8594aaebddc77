"""`magneton report`'s output for one run: the breakdown table (by operator, module or
kernel) with its total row, the idle baseline, how the energy was obtained, how repeatable
it was, and the folded module tree; the same numbers as JSON and CSV for scripts.

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
        "spread": {**sp.__dict__, "unstable": sp.unstable} if sp.iterations else None,
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


def spread_line(profile, db: str = "DB") -> str:
    """How repeatable the run's energy was over its timed iterations, and what to do
    when it is too noisy to compare ("" when the run has no per-iteration record)."""
    sp = profile.energy.spread
    if sp.iterations < 2:
        return ""
    line = (
        f"spread: ±{100 * sp.cv:.1f}% (CV of the call's energy over {sp.iterations} timed "
        f"iterations, min {_fmt(sp.min_j)} J, max {_fmt(sp.max_j)} J"
        + (f"; stopped: {sp.stop_reason}" if sp.stop_reason else "")
        + ")"
    )
    e = profile.run.energy_j
    if e > 0 and not (sp.min_j <= e <= sp.max_j):
        # the model prices each operator on its own cheapest iteration (docs/energy.md),
        # and no whole call has every operator at its cheapest at once: the headline
        # sits below the cheapest call. Said here, so "11.4 J/call … min 12.15 J" is no
        # contradiction left for the reader to resolve.
        where = "below the cheapest" if e < sp.min_j else "above the costliest"
        line += (
            f"\nheadline {_fmt(e)} J/call is {where} whole call: it sums each operator's "
            "own cheapest iteration (robust to load), while min/max are whole calls"
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

    console = Console()
    if not console.is_terminal:
        console = Console(width=max(console.width, 120))
    for p in profiles:
        rows = top_rows(operator_table(p, by=args.by), args.top or 10, p.run.energy_j)
        console.print(_table(p, rows, args.by))


def _table(profile, rows, by: str):
    """The breakdown table of one run (rows as `top_rows` gives them, plus the total)."""
    from rich import box
    from rich.table import Table

    from magneton.model.names import name_column, short_name

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
    for row in rows:
        table.add_row(
            escape(short_name(row.name)),
            str(row.calls),
            _fmt(row.time_s),
            _fmt(row.energy_j),
            _fmt(row.j_per_call),
            f"{row.avg_w:.1f}",
            f"{100 * row.share:.1f}%",
            row.method,
        )
    table.add_section()
    span = profile.energy.span_s
    span = span if span > 0 else r.time_s  # charged time of the whole call
    table.add_row(
        "total",
        str(sum(x.calls for x in rows)),
        _fmt(span),
        _fmt(r.energy_j),
        "",
        f"{r.energy_j / span:.1f}" if span > 0 else "",
        "100%",
        r.energy_method,
    )
    return table


def print_report(profile, rows, tree, by: str, max_depth: int, db: str = "DB") -> None:
    """The breakdown of one run as `magneton report` prints it to a terminal."""
    from rich.console import Console
    from rich.tree import Tree

    r = profile.run
    console = Console()
    if not console.is_terminal:
        console = Console(width=max(console.width, 120))  # a pipe: no wrapping of names
    table = _table(profile, rows, by)
    span = profile.energy.span_s
    span = span if span > 0 else r.time_s  # charged time of the whole call
    console.print(table)
    console.print(
        f"idle baseline ~ {r.idle_w:.1f} W; above idle {_fmt(r.energy_above_idle_j)} J "
        f"of {_fmt(r.energy_j)} J per call"
    )
    if r.time_s > 0 and abs(span - r.time_s) > 0.05 * r.time_s:
        # the total's time is what the energy covers; say where the rest of the wall went
        if profile.energy.clock == "process-cpu":
            console.print(
                f"time: energy covers {_fmt(span * 1e3)} ms of CPU time per call (operators "
                f"and the Python between them); a call took {_fmt(r.time_s * 1e3)} ms wall "
                "on average (the rest: waiting for a CPU while other processes ran, Python "
                "before the first or after the last operator)"
            )
        else:
            console.print(
                f"time: energy covers {_fmt(span * 1e3)} ms per call (operators and the gaps "
                f"between them); a call took {_fmt(r.time_s * 1e3)} ms wall on average (the "
                "rest: Python before the first or after the last operator, and variation "
                "between iterations)"
            )
    console.print(f"energy: {method_line(profile)}")
    from magneton.tracer.api import fused_line

    fused = fused_line(profile)  # a JAX/TensorFlow run: its fused cost (tracer/frameworks)
    if fused:
        console.print(fused)
    line = spread_line(profile, db)
    if line:
        console.print(line)
    gaps = sum(len(s.gaps) for s in profile.power)
    if gaps:
        console.print(
            f"[yellow]sensor gaps: {gaps} (readings failed; power interpolated across them)[/]"
        )
    if r.timing == "combined":
        console.print("[yellow]timing includes structure-capture overhead (one-pass block)[/]")

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
    console.print(root)


def write_report_csv(rows, out: TextIO) -> None:
    """`report --csv`: one row per breakdown row."""
    w = csv.writer(out)
    w.writerow(["name", "calls", "time_s", "energy_j", "j_per_call", "avg_w", "share", "method"])
    for r in rows:
        w.writerow(
            [r.name, r.calls, r.time_s, r.energy_j, r.j_per_call, r.avg_w, r.share, r.method]
        )


def method_line(profile: Profile) -> str:
    """One line saying how the run's energy numbers were obtained."""
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
    top = ", ".join(f"{escape(n)} ×{c}" for n, c, _ in o.top[:3])
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


def record_lines(profile: Profile, db: str, described: str = "") -> tuple[list[str], list[str]]:
    """What `magneton record` prints for a run it stored: (lines for stdout, warnings for
    stderr). A run that could not be priced (status "incomparable") says why instead of
    showing figures."""
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
    warn = []
    if r.timing == "combined" and r.repeat <= 1 and described:
        warn.append(
            "priced from the one traced unit: its times include the structure capture's "
            "overhead; record two or more units (--steps W:WU:A with A >= 2) to time them apart"
        )
    return out, warn
