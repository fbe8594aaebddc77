"""The help screen: every key of every screen."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from .widgets import keys_table

# --------------------------------------------------------------------------------------
# Help
# --------------------------------------------------------------------------------------

HELP_SECTIONS = [
    (
        "Everywhere",
        [
            ("?", "this help"),
            ("q / ctrl+q", "quit (q types into text fields; use escape first)"),
            ("c", "Cypher console (read-only queries)"),
            ("escape", "back one screen"),
            ("tab / shift+tab", "move focus"),
            ("↑ ↓ pgup pgdn", "move in tables and text"),
        ],
    ),
    (
        "Runs",
        [
            ("enter", "choose the run as A, then B (then diff)"),
            ("a / b", "set the highlighted run as A / B"),
            ("d", "diff A against B"),
            ("v", "energy view of the highlighted run"),
            ("R", "refresh (after recording in another terminal)"),
        ],
    ),
    (
        "Findings",
        [
            ("enter", "open the finding"),
            ("x", "export its patch (asks where; never applies)"),
            ("v", "energy view of A and B"),
            ("s", "swap A and B"),
        ],
    ),
    (
        "Finding",
        [
            ("1 / 2 / 3", "regions · call paths · root cause & fix"),
            ("x", "export the patch"),
        ],
    ),
    (
        "Energy view",
        [
            ("o / m / k", "group by operator / module / kernel"),
            ("t", "switch table / module tree"),
            ("f", "fold or unfold repeated layers (h.0…h.N → h.*)"),
            ("s", "the other run"),
        ],
    ),
]


class HelpScreen(ModalScreen[None]):
    BINDINGS = [
        Binding("escape", "close", "Close"),
        Binding("question_mark", "close", "Close"),
        Binding("q", "close", "Close", show=False),
    ]

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help-box"):
            yield Static(Text("magneton-tui keys", style="bold"))
            yield Static(keys_table(HELP_SECTIONS))
            yield Static(
                Text(
                    "Energy figures say how they were obtained: measured (sensor), replayed "
                    "(operators re-run for a slow sensor), solved (least squares) or "
                    "estimated (energy model, no sensor).",
                    style="dim",
                )
            )

    def action_close(self) -> None:
        self.dismiss(None)
