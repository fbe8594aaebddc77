"""Shared parts of the TUI's screens: `BaseScreen` (thread-safe callbacks, the app and
the DB store) and the run summary a screen shows before its diff arrives."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from textual.screen import Screen

from magneton.model import RunSummary

from .data import Store

if TYPE_CHECKING:
    from magneton.graphdb import RunRow

    from .app import MagnetonApp


def row_summary(row: RunRow) -> RunSummary:
    return RunSummary(row.name, row.energy_j, row.time_s, row.power_source, row.energy_method)


class BaseScreen(Screen):
    def from_thread(self, fn: Any, *args: Any, **kwargs: Any) -> None:
        """Run `fn` on the UI thread, unless this screen has gone in the meantime (a
        worker finishing after `escape` must not touch widgets that no longer exist)."""

        def call() -> None:
            if self.is_attached:
                fn(*args, **kwargs)

        try:
            self.app.call_from_thread(call)
        except RuntimeError:
            if self.app.is_running:
                raise
            # the app has shut down meanwhile: nothing left to update

    @property
    def mapp(self) -> MagnetonApp:
        return self.app  # type: ignore[return-value]

    @property
    def store(self) -> Store:
        return self.mapp.store
