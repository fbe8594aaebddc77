"""`magneton-tui --db DIR [RUN_A RUN_B]`: walk from an energy hotspot to its fix in a terminal.

The app opens on the runs of the DB (pick A and B), or straight on the findings of A vs B
when both are given. See docs/tui.md for the screens and keys.

Error handling, chosen for what a user expects of a command:
- a DB that cannot be opened at all (missing, not a Magneton DB, corrupt, another schema
  version, locked) is reported *before* the terminal is taken over, as one line on stderr
  (`magneton-tui: ...`) with exit status 2 — the same as `magneton` itself — so it shows up
  in scripts and is not wiped by the full-screen UI;
- everything else (an empty DB, a single run, a run name that is not in the DB or did not
  record ok) opens the runs screen with a notice saying what is wrong and what to do.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from textual.app import App
from textual.binding import Binding

from magneton.model import MagnetonError

from .data import Store, job_row
from .jobs import cancel_all
from .screens import FindingsScreen, HelpScreen, QueryScreen, RunsScreen

if TYPE_CHECKING:
    from magneton.graphdb import RunRow


class MagnetonApp(App[int]):
    """The TUI. `store` reads the DB; `runs` is its run list at start (refreshed by `R`)."""

    CSS_PATH = "magneton.tcss"
    TITLE = "magneton-tui"
    # every action has a key and the footer shows them; the palette's footer slot is
    # worth more at 80 columns
    ENABLE_COMMAND_PALETTE = False
    BINDINGS = [
        Binding("q", "quit", "Quit"),
        Binding("question_mark", "help", "Help"),
        Binding("c", "cypher", "Cypher"),
    ]

    def __init__(
        self,
        store: Store,
        runs: list[RunRow],
        run_a: str | None = None,
        run_b: str | None = None,
        *,
        diagnose: bool = True,
        rerun: bool = True,
        threshold: float = 0.10,
        fresh: bool = False,
    ) -> None:
        super().__init__()
        self.store = store
        self.runs = runs
        self.run_a, self.run_b = run_a, run_b
        self.diagnose = diagnose
        self.rerun = rerun
        self.threshold = threshold
        self.fresh = fresh  # --rerun: diff anew instead of showing the stored diff

    def on_mount(self) -> None:
        notice = self._start_notice()
        runs_screen = RunsScreen(notice)
        self.push_screen(runs_screen)
        if not notice and self.run_a and self.run_b:
            runs_screen.side = {"a": self.run_a, "b": self.run_b}  # as if picked there
            self.open_diff(self.run_a, self.run_b)
        elif self.run_a:
            ok = {r.name for r in self.runs if r.status == "ok"}
            runs_screen.side["a"] = self.run_a if self.run_a in ok else None
            runs_screen.side["b"] = self.run_b if self.run_b in ok else None

    def _start_notice(self) -> str:
        """Why the runs given on the command line cannot be compared ("" when they can)."""
        by_name = {r.name: r for r in self.runs}
        given = [r for r in (self.run_a, self.run_b) if r]
        problems = []
        for name in given:
            r = by_name.get(name) or job_row(self.runs, name)
            if r is None:
                names = ", ".join(by_name) if by_name else "none yet"
                problems.append(f"no run '{name}' in {self.store.path} (runs: {names})")
            elif r.status != "ok":
                problems.append(f"run '{name}' is {r.status}" + (f": {r.error}" if r.error else ""))
        if len(given) == 2 and self.run_a == self.run_b:
            problems.append("run A and run B are the same run; pick two different runs")
        if len(given) == 1 and not problems:
            problems.append(f"'{self.run_a}' is run A; choose run B")
        return "; ".join(problems)

    def _row(self, name: str) -> RunRow:
        row = next((r for r in self.runs if r.name == name), None) or job_row(self.runs, name)
        if row is None:
            raise MagnetonError(f"no run '{name}' in {self.store.path}")
        return row

    def open_diff(self, a: str, b: str) -> None:
        self.push_screen(FindingsScreen(self._row(a), self._row(b)))

    def replace_diff(self, screen: FindingsScreen, a: str, b: str) -> None:
        self.pop_screen()
        self.open_diff(a, b)

    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen())

    def action_cypher(self) -> None:
        if not isinstance(self.screen, QueryScreen):
            self.push_screen(QueryScreen())


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="magneton-tui",
        description=(
            "Browse a Magneton DB in the terminal: pick two runs, see where one wastes "
            "energy, open a finding for its call paths, root cause and patch."
        ),
    )
    p.add_argument("--db", required=True, help="profile DB directory (from magneton record)")
    p.add_argument(
        "runs",
        nargs="*",
        metavar="RUN",
        help="run A and run B to compare (or two multi-rank jobs: runs NAME/rank0, ...)",
    )
    p.add_argument(
        "--threshold",
        type=float,
        default=0.10,
        help="relative energy difference that makes a finding (default 0.10)",
    )
    p.add_argument(
        "--no-diagnose",
        action="store_true",
        help="show findings only; skip diagnosis (which re-runs both scripts)",
    )
    p.add_argument(
        "--rerun",
        action="store_true",
        help=(
            "diff anew (re-measuring both scripts) and store the result, instead of "
            "showing the diff stored by `magneton diff` or an earlier magneton-tui"
        ),
    )
    p.add_argument(
        "--no-rerun",
        action="store_true",
        help=(
            "when the diff is made: diagnose from the recorded profiles and the source only, "
            "without re-running the scripts (faster; for profiles recorded on another machine)"
        ),
    )
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if len(args.runs) > 2:
        print("magneton-tui: give at most two runs (RUN_A RUN_B)", file=sys.stderr)
        return 2
    store = Store(Path(args.db))
    try:
        from magneton.diagnose.api import check_threshold

        check_threshold(args.threshold)  # the same bounds as `magneton diff`
        runs = store.check()
    except MagnetonError as e:
        print(f"magneton-tui: {e}", file=sys.stderr)
        return e.exit_code
    a = args.runs[0] if args.runs else None
    b = args.runs[1] if len(args.runs) > 1 else None
    app = MagnetonApp(
        store,
        runs,
        a,
        b,
        diagnose=not args.no_diagnose,
        rerun=not args.no_rerun,
        threshold=args.threshold,
        fresh=args.rerun,
    )
    try:
        app.run()
    finally:
        cancel_all()
    return app.return_code or 0


if __name__ == "__main__":
    sys.exit(main())
