"""The screens of `magneton-tui`: runs → findings → finding detail, energy view, Cypher, help.

Flow: `RunsScreen` is always the bottom of the stack (pick two runs), `FindingsScreen`
diffs them in a child process (see jobs.py) and shows findings as soon as detection is
done while diagnosis continues behind a progress bar, `FindingScreen` walks one finding
from regions to call paths to root cause and patch. Every screen is keyboard-driven;
`escape` goes back one screen, `q` quits from anywhere outside a text field.

Slow work (loading profiles, queries, breakdowns) runs in thread workers and the results
come back through `call_from_thread`, so no key press ever waits on the DB.

Each screen has its module: runs_screen.py, findings_screen.py, finding_screen.py (one
finding and the export dialog), energy_screen.py, query_screen.py, help_screen.py; the
shared base is base.py. This module gathers them for the app.
"""

from __future__ import annotations

from .base import BaseScreen
from .energy_screen import EnergyScreen
from .finding_screen import ExportScreen, FindingScreen, export_finding
from .findings_screen import FindingsScreen
from .help_screen import HelpScreen
from .query_screen import CypherInput, QueryScreen
from .runs_screen import RunsScreen

__all__ = [
    "BaseScreen",
    "CypherInput",
    "EnergyScreen",
    "ExportScreen",
    "FindingScreen",
    "FindingsScreen",
    "HelpScreen",
    "QueryScreen",
    "RunsScreen",
    "export_finding",
]
