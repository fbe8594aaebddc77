"""The runs screen: the bottom of the stack, where a user picks run A and run B."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.coordinate import Coordinate
from textual.widgets import DataTable, Footer, Header, Static

from .base import BaseScreen
from .data import describe_energy, error_text, fmt_j, fmt_s
from .energy_screen import EnergyScreen
from .widgets import Note

if TYPE_CHECKING:
    from magneton.graphdb import RunRow


# --------------------------------------------------------------------------------------
# Runs
# --------------------------------------------------------------------------------------


class RunsScreen(BaseScreen):
    """Pick run A and run B. Enter assigns the highlighted run to the next free side and
    compares once both are set; `a`/`b` assign a side explicitly."""

    BINDINGS = [
        Binding("enter", "choose", "Choose", priority=False),
        Binding("a", "set_side('a')", "Set A", show=False),
        Binding("b", "set_side('b')", "Set B", show=False),
        Binding("d", "compare", "Diff A B"),
        Binding("v", "energy", "Energy view"),
        Binding("R", "refresh", "Refresh"),
    ]

    def __init__(self, notice: str = "") -> None:
        super().__init__()
        self.notice = notice
        self.runs: list[RunRow] = []
        self.side: dict[str, str | None] = {"a": None, "b": None}

    def compose(self) -> ComposeResult:
        yield Header()
        yield Note("", id="runs-notice")
        yield Static("", id="runs-choice")
        yield DataTable(id="runs", cursor_type="row", zebra_stripes=True)
        yield Note("", id="runs-help")
        yield Footer()

    def on_mount(self) -> None:
        self.title = "magneton-tui"
        self.sub_title = f"runs in {self.store.path}"
        self.set_runs(self.mapp.runs)
        self.show_notice(self.notice, "warning")

    def show_notice(self, text: str, kind: str = "info") -> None:
        note = self.query_one("#runs-notice", Note)
        note.update(text)
        note.set_classes(kind)
        note.display = bool(text)

    def set_runs(self, runs: list[RunRow]) -> None:
        self.runs = runs
        table = self.query_one("#runs", DataTable)
        table.clear(columns=True)
        table.add_columns(
            "", "run", "status", "ops", "energy / call", "time / call", "how", "script"
        )
        names = {r.name for r in runs}
        for side in ("a", "b"):
            if self.side[side] not in names:
                self.side[side] = None
        for r in runs:
            ok = r.status == "ok"
            mark = "A" if self.side["a"] == r.name else "B" if self.side["b"] == r.name else ""
            status = Text(r.status, style="green" if ok else "red")
            table.add_row(
                Text(mark, style="bold reverse") if mark else "",
                Text(r.name, style="bold"),
                status,
                str(r.op_count) if ok else "-",
                fmt_j(r.energy_j) if ok else "-",
                fmt_s(r.time_s) if ok else "-",
                describe_energy(r.energy_method, r.power_source) if ok else r.error,
                Path(r.script).name if r.script else "(python block)",
                key=r.name,
            )
        help_ = self.query_one("#runs-help", Note)
        if not runs:
            help_.update(
                f"No runs in {self.store.path} yet. Record two programs that do the same job:\n"
                f"  magneton record a.py --db {self.store.path} --run a\n"
                f"  magneton record b.py --db {self.store.path} --run b\n"
                "then press R to refresh."
            )
        elif len(runs) == 1:
            help_.update(
                "Only one run recorded: press v for its energy view, or record a second run "
                "to compare (then R to refresh)."
            )
        else:
            help_.update("enter: choose A then B · a/b: set side · d: diff · v: energy view")
        self._show_choice()

    def _show_choice(self) -> None:
        t = Text()
        for side in ("a", "b"):
            t.append(f" {side.upper()} ", style="bold reverse")
            t.append(f" {self.side[side] or '—'}   ")
        self.query_one("#runs-choice", Static).update(t)
        table = self.query_one("#runs", DataTable)
        for r in self.runs:
            mark = "A" if self.side["a"] == r.name else "B" if self.side["b"] == r.name else ""
            table.update_cell(
                r.name,
                table.ordered_columns[0].key,
                Text(mark, style="bold reverse") if mark else "",
            )

    def _highlighted(self) -> RunRow | None:
        table = self.query_one("#runs", DataTable)
        if not self.runs or table.cursor_row < 0 or table.cursor_row >= len(self.runs):
            return None
        key = table.coordinate_to_cell_key(Coordinate(table.cursor_row, 0)).row_key.value
        return next((r for r in self.runs if r.name == key), None)

    def _usable(self, r: RunRow) -> bool:
        if r.status != "ok":
            why = f": {r.error}" if r.error else ""
            self.show_notice(
                f"run '{r.name}' is {r.status}{why}; pick a run that recorded ok", "error"
            )
            return False
        return True

    def action_set_side(self, side: str) -> None:
        r = self._highlighted()
        if r is None or not self._usable(r):
            return
        other = "b" if side == "a" else "a"
        if self.side[other] == r.name:
            self.side[other] = self.side[side]
        self.side[side] = r.name
        self.show_notice("")
        self._show_choice()

    def action_choose(self) -> None:
        r = self._highlighted()
        if r is None or not self._usable(r):
            return
        if self.side["a"] is None or (self.side["a"] and self.side["b"]):
            self.side = {"a": r.name, "b": None}
        elif r.name != self.side["a"]:
            self.side["b"] = r.name
        else:
            self.show_notice(f"'{r.name}' is already run A; choose another run as B", "info")
            return
        self.show_notice("")
        self._show_choice()
        if self.side["a"] and self.side["b"]:
            self.action_compare()

    @on(DataTable.RowSelected, "#runs")
    def _row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        self.action_choose()

    def action_compare(self) -> None:
        a, b = self.side["a"], self.side["b"]
        if not (a and b):
            self.show_notice("choose two runs first (enter on a row, or a / b)", "warning")
            return
        self.mapp.open_diff(a, b)

    def action_energy(self) -> None:
        r = self._highlighted()
        if r is None or not self._usable(r):
            return
        others = [x for x in (self.side["a"], self.side["b"]) if x and x != r.name]
        self.app.push_screen(EnergyScreen([r.name, *others]))

    def action_refresh(self) -> None:
        self._refresh_runs()

    @work(thread=True, exclusive=True, group="runs")
    def _refresh_runs(self) -> None:
        try:
            runs = self.store.list_runs()
            self.store.forget()
        except Exception as e:
            self.from_thread(self.show_notice, error_text(e), "error")
            return
        self.mapp.runs = runs
        self.from_thread(self.set_runs, runs)
        self.from_thread(self.show_notice, f"{len(runs)} runs", "info")
