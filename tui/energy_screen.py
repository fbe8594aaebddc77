"""The energy view of one run: its operator table and its folded module tree."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import DataTable, Footer, Header, Static, TabbedContent, TabPane, Tree

from magneton.model import Profile

from .base import BaseScreen
from .data import describe_energy, error_text, fmt_j, fmt_pct, fmt_s

# --------------------------------------------------------------------------------------
# Per-run energy
# --------------------------------------------------------------------------------------


class EnergyScreen(BaseScreen):
    """Operator table (by op / module / kernel) and the folded module tree of one run."""

    BINDINGS = [
        Binding("escape", "back", "Back"),
        Binding("o", "group('op')", "By op"),
        Binding("m", "group('module')", "By module"),
        Binding("k", "group('kernel')", "By kernel"),
        Binding("t", "tree", "Tree/table"),
        Binding("f", "fold", "Fold layers"),
        Binding("s", "switch", "Other run"),
    ]

    def __init__(self, runs: list[str]) -> None:
        super().__init__()
        self.runs = runs
        self.index = 0
        self.by = "op"
        self.fold = True

    @property
    def run(self) -> str:
        return self.runs[self.index]

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static("", id="energy-run")
        with TabbedContent(id="energy-tabs"):
            with TabPane("Operators", id="table-tab"):
                yield DataTable(id="op-table", cursor_type="row", zebra_stripes=True)
            with TabPane("Module tree", id="tree-tab"):
                yield Tree("modules", id="module-tree")
        yield Footer()

    def on_mount(self) -> None:
        self.title = "energy view"
        self.load()

    def _header(self, prof: Profile | None, python_share: float = 0.0) -> None:
        t = Text()
        t.append(f" {self.run} ", style="bold reverse")
        if prof is not None:
            r = prof.run
            t.append(f" {fmt_j(r.energy_j)}, {fmt_s(r.time_s)} per call, {len(prof.ops)} ops — ")
            t.append(describe_energy(r.energy_method, r.power_source), style="italic")
        t.append(f"\ngrouped by {self.by}", style="dim")
        # the fold applies to the module tree only; the table lists every row
        t.append(f" · module tree: layers {'folded' if self.fold else 'unfolded'}", style="dim")
        if len(self.runs) > 1:
            t.append(f" · s: show {self.runs[1 - self.index]}", style="dim")
        if python_share > 0:
            t.append(
                f"\npython: rows = interpreter time between operators, "
                f"{fmt_pct(python_share)} of the call, by the line that ran it",
                style="yellow",
            )
        self.query_one("#energy-run", Static).update(t)

    @work(thread=True, exclusive=True, group="energy")
    def load(self) -> None:
        from magneton.diagnose.api import module_tree, operator_table

        run, by, fold = self.run, self.by, self.fold
        try:
            prof = self.store.profile(run)
            rows = operator_table(prof, by=by)
            tree = module_tree(prof, fold=fold)
        except Exception as e:
            self.from_thread(self.notify, error_text(e), severity="error")
            return
        self.from_thread(self._show, prof, rows, tree)

    def _show(self, prof: Profile, rows: list[Any], tree: Any) -> None:
        self._header(prof, sum(r.share for r in rows if r.kind == "python"))
        table = self.query_one("#op-table", DataTable)
        table.clear(columns=True)
        table.add_columns(self.by, "calls", "energy", "share", "time", "J/call", "avg W", "method")
        for r in rows:
            share = Text(f"{fmt_pct(r.share):>6} ")
            share.append(_mini_bar(r.share), style="magenta")
            table.add_row(
                # interpreter time is not an operator: set apart, as `report` does
                # one helper shortens names everywhere, the column capped (model/names.py)
                Text(cell_name(r.name), style="yellow")
                if r.kind == "python"
                else cell_name(r.name),
                # interpreter time has no calls: "-", not 0 beside its joules
                "-" if r.kind == "python" else str(r.calls),
                fmt_j(r.energy_j),
                share,
                fmt_s(r.time_s),
                "-" if r.kind == "python" else fmt_j(r.j_per_call),
                f"{r.avg_w:.3g}",
                r.method,
            )
        widget = self.query_one("#module-tree", Tree)
        widget.clear()
        widget.root.set_label(_node_label(tree))
        widget.root.data = tree

        def add(parent, node) -> None:
            for c in node.children:
                if c.children:
                    child = parent.add(_node_label(c), data=c, expand=c.share >= 0.05)
                    add(child, c)
                else:
                    parent.add_leaf(_node_label(c), data=c)

        add(widget.root, tree)
        widget.root.expand()

    def action_group(self, by: str) -> None:
        self.by = by
        self.query_one("#energy-tabs", TabbedContent).active = "table-tab"
        self.load()

    def action_tree(self) -> None:
        tabs = self.query_one("#energy-tabs", TabbedContent)
        tabs.active = "tree-tab" if tabs.active == "table-tab" else "table-tab"
        target = "#module-tree" if tabs.active == "tree-tab" else "#op-table"
        self.query_one(target).focus()

    def action_fold(self) -> None:
        self.fold = not self.fold
        self.load()

    def action_switch(self) -> None:
        if len(self.runs) > 1:
            self.index = 1 - self.index
            self.load()

    def action_back(self) -> None:
        self.app.pop_screen()


def cell_name(name: str) -> str:
    """A name in a table cell: shortened, and cut to the name column's cap."""
    from magneton.model.names import COLUMN_MAX, names_are_full, short_name

    text = short_name(name)
    if names_are_full() or len(text) <= COLUMN_MAX:
        return text
    return text[: COLUMN_MAX - 1] + "…"


def _mini_bar(share: float) -> str:
    from .data import bar

    return bar(share, 8)


def _node_label(n: Any) -> Text:
    t = Text()
    name = n.name or "(root)"
    t.append(name, style="bold")
    if getattr(n, "instances", 1) > 1:
        t.append(f" ×{n.instances}", style="cyan")
    if n.type and n.type != name:
        t.append(f" {n.type}", style="dim")
    t.append(f"  {fmt_j(n.energy_j)} {fmt_pct(n.share)}")
    if n.method:
        t.append(f" {n.method}", style="dim italic")
    return t
