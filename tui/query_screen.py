"""The Cypher console: read-only queries over the DB, with the result as a table.

Queries run as `magneton query` runs them (graphdb/contained.py, through tui/data.py):
the same allow-list of read-only clauses and functions (graphdb/guard.py), the same
memory and time limits (MAGNETON_QUERY_MEMORY_MB, MAGNETON_QUERY_TIME_LIMIT_S). Cells are
shown as plain text, never as markup or emoji codes.
"""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import DataTable, Footer, Header, Input, Label

from .base import BaseScreen
from .data import cell, error_text
from .widgets import Note

# --------------------------------------------------------------------------------------
# Cypher console
# --------------------------------------------------------------------------------------

EXAMPLE_QUERY = (
    "MATCH (o:Operator) RETURN o.run, o.name, sum(o.energy_j) AS j ORDER BY j DESC LIMIT 10"
)
MAX_ROWS = 2000


class CypherInput(Input):
    """The query line; up/down walk the history of this session's queries."""

    BINDINGS = [
        Binding("up", "history(-1)", "Previous", show=False),
        Binding("down", "history(1)", "Next", show=False),
    ]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.history: list[str] = []
        self.pos = 0

    def remember(self, q: str) -> None:
        if not self.history or self.history[-1] != q:
            self.history.append(q)
        self.pos = len(self.history)

    def action_history(self, step: int) -> None:
        if not self.history:
            return
        self.pos = max(0, min(len(self.history), self.pos + step))
        self.value = self.history[self.pos] if self.pos < len(self.history) else ""
        self.cursor_position = len(self.value)


class QueryScreen(BaseScreen):
    """Read-only Cypher over the DB; errors appear under the query line."""

    BINDINGS = [Binding("escape", "back", "Back")]

    def compose(self) -> ComposeResult:
        yield Header()
        yield Label("Cypher (read-only) · enter: run · ↑/↓: history · tab: results")
        yield CypherInput(EXAMPLE_QUERY, id="cypher", placeholder="MATCH (r:Run) RETURN r.name")
        yield Note("", id="query-error")
        yield DataTable(id="query-result", zebra_stripes=True)
        yield Note("", id="query-info")
        yield Footer()

    def on_mount(self) -> None:
        self.title = "Cypher console"
        self.sub_title = str(self.store.path)
        self.query_one("#cypher", CypherInput).focus()
        self.query_one("#query-error", Note).display = False

    @on(Input.Submitted, "#cypher")
    def _submit(self, event: Input.Submitted) -> None:
        q = event.value.strip()
        self.query_one("#cypher", CypherInput).remember(q)
        self.query_one("#query-info", Note).update("running…")
        self.run_query(q)

    @work(thread=True, exclusive=True, group="query")
    def run_query(self, q: str) -> None:
        try:
            res = self.store.query(q, MAX_ROWS)
        except Exception as e:
            self.from_thread(self._show_error, error_text(e))
            return
        self.from_thread(self._show_rows, res.columns, list(res.rows), res.truncated)

    def _show_error(self, text: str) -> None:
        err = self.query_one("#query-error", Note)
        err.update(Text(text, style="bold"))
        err.set_classes("error")
        err.display = True
        self.query_one("#query-info", Note).update("")

    def _show_rows(self, columns: list[str], rows: list[list], truncated: bool = False) -> None:
        self.query_one("#query-error", Note).display = False
        table = self.query_one("#query-result", DataTable)
        table.clear(columns=True)
        # Text, not str: DataTable reads a str cell as rich markup with emoji codes, so
        # a value `:x:` showed an emoji and `[red]` vanished (cells are the DB's text)
        table.add_columns(*[Text(str(c)) for c in columns])
        for row in rows[:MAX_ROWS]:
            table.add_row(*[Text(cell(v), no_wrap=True) for v in row])
        n = len(rows)
        if truncated:
            info = f"more than {n} rows (showing the first {n}; add LIMIT or ORDER BY)"
        else:
            info = f"{n} row{'s' if n != 1 else ''}"
        self.query_one("#query-info", Note).update(info)

    def action_back(self) -> None:
        self.app.pop_screen()
