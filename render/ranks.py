"""`print_rank_report`: the multi-rank report of a job (`magneton report JOB`) as a job
line and two rich tables. The numbers come from diagnose/jobs/ranks.py; this module only
presents them. Two narrow tables rather than one of 14 columns: both fit an 80-column
terminal."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.markup import escape

from magneton.diagnose.api import rank_ranges
from magneton.model.wording import energy_wording

if TYPE_CHECKING:
    from magneton.diagnose.api import RankReport


def print_rank_report(rep: RankReport, console: Any = None) -> None:
    from rich.console import Console

    console = console or Console(emoji=False)
    _print_job_line(rep, console)

    t, c = _rank_tables(rep)
    console.print(t)
    console.print(
        "busy = own work (CPU time on CPU ranks); blocked = time the rank used no CPU (wall - "
        "CPU time, measured); tail = idle until the slowest rank finished, priced at the "
        "idle baseline (estimated)"
    )
    console.print(c)
    console.print(
        "ms/J = the collective operators' windows and energy; waited = time in work.wait() "
        "of collectives waited on at once (measured); busy-wait = CPU time burned in it, the "
        "rest blocked; peer wait = part of it until the last peer arrived (estimated)"
    )
    for n in rep.notes:
        console.print(f"note: {escape(n)}")


def _print_job_line(rep: RankReport, console: Any) -> None:
    """The job's totals, and its imbalance when the ranks' busy times are known."""
    how = (
        energy_wording(", ".join(rep.energy_methods), ", ".join(rep.power_sources))
        if rep.energy_methods
        else "no energy"
    )
    console.print(
        f"job '{rep.name}': {rep.world_size} ranks, {rep.job_time_s * 1e3:.2f} ms/call "
        f"(slowest rank {rep.slowest_rank}), {rep.job_energy_j:.4g} J/call incl. idle tails "
        f"({how})"
    )
    if rep.imbalance_ratio:
        basis = ", ".join(sorted({s.busy_basis for s in rep.ranks if s.busy_basis}))
        work = f"; work ratio (max/min FLOPs): {rep.work_ratio:.2f}" if rep.work_ratio else ""
        console.print(
            f"imbalance ratio (max/min busy time, busy = {basis}): {rep.imbalance_ratio:.2f}"
            f"{work}; most work: rank {rep.busiest_rank}; peer wait: {rep.wait_method}"
        )


def _ms(x: float | None) -> str:
    return "" if x is None else f"{x * 1e3:.1f}"


def _rank_tables(rep: RankReport) -> tuple[Any, Any]:
    """(time and energy per rank, collectives per rank) as rich tables."""
    from rich.table import Table

    # two narrow tables rather than one of 14 columns: both fit an 80-column terminal
    t = Table(title=f"ranks of '{escape(rep.name)}': time and energy per entry call")
    for col in ("rank", "status", "ms", "J", "busy ms", "blocked ms", "tail ms", "tail J"):
        t.add_column(col, justify="left" if col == "status" else "right")
    c = Table(title="collectives per entry call")
    for col in ("rank", "ops", "ms", "J", "waited ms", "busy-wait ms", "peer wait ms"):
        c.add_column(col, justify="right")
    missing: list[int] = []  # a run of missing ranks is one row: 126 of 128 were one each

    def flush_missing() -> None:
        if missing:
            t.add_row(rank_ranges(missing), f"[red]missing ({len(missing)})[/]", *[""] * 6)
            missing.clear()

    for s in rep.ranks:
        if s.status == "missing":
            missing.append(s.rank)
            continue
        flush_missing()
        if s.status != "ok":
            t.add_row(str(s.rank), f"[red]{s.status}[/]", *[""] * 6)
            continue
        t.add_row(
            str(s.rank),
            "ok",
            _ms(s.time_s),
            f"{s.energy_j:.3g}",
            _ms(s.busy_s),
            _ms(s.blocked_s),
            _ms(s.idle_tail_s),
            f"{s.idle_tail_energy_j:.3g}",
        )
        c.add_row(
            str(s.rank),
            str(s.collective_count),
            _ms(s.collective_time_s),
            f"{s.collective_energy_j:.3g}",
            _ms(s.wait_s),
            _ms(s.busy_wait_s),
            _ms(s.peer_wait_s),
        )
    flush_missing()
    return t, c
