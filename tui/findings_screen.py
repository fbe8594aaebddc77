"""The findings of one diff, one row per cause (render/view.py `diff_view`, the rows of
`magneton diff`'s table and of its HTML page).

The diff shown is the one stored in the DB (`Store.stored_diff`), read in a worker
thread: a TUI that diffed on its own re-measured both scripts and showed numbers of its
own (3.4% + 0.7% where `magneton diff` said 5.2%). Only when no usable diff is stored,
or `--rerun` asks for a new one, does the job run the diff pipeline in a child process
(jobs.py), which stores its result; the table then fills as soon as detection is done,
while diagnosis continues behind a progress bar.

The table is laid out for the terminal it is in (`widgets.ops_width`): the verdict,
saving and cause come first, and the operator lists take only the width that is left,
re-cut when the terminal is resized."""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.coordinate import Coordinate
from textual.widgets import DataTable, Footer, Header, Label, ProgressBar, Static
from textual.worker import get_current_worker

from magneton.model import DiffResult, Finding, RootCause
from magneton.render.view import DiffView, diff_view

from .base import BaseScreen, row_summary
from .data import fmt_pct
from .energy_screen import EnergyScreen
from .finding_screen import FindingScreen, export_finding
from .jobs import DiffJob
from .widgets import FINDING_COLUMNS, Note, energy_header, finding_row, ops_width

if TYPE_CHECKING:
    from magneton.graphdb import RunRow


# --------------------------------------------------------------------------------------
# Findings
# --------------------------------------------------------------------------------------


class FindingsScreen(BaseScreen):
    """Findings of run A vs run B ranked by energy saved, diagnosis filling in live."""

    BINDINGS = [
        Binding("escape", "back", "Runs"),
        Binding("enter", "open", "Open", show=True),
        Binding("x", "export", "Export patch"),
        Binding("v", "energy", "Energy view"),
        Binding("s", "swap", "Swap A/B"),
    ]

    def __init__(self, a: RunRow, b: RunRow) -> None:
        super().__init__()
        self.row_a, self.row_b = a, b
        self.result: DiffResult | None = None
        self.view: DiffView | None = None
        self.stored = False  # the result is the DB's stored diff
        self.diagnosing = False
        self.status_text = ""
        self.job: DiffJob | None = None
        self.detail: FindingScreen | None = None
        self.exported: dict[int, str] = {}

    @property
    def run_a(self) -> str:
        return self.row_a.name

    @property
    def run_b(self) -> str:
        return self.row_b.name

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static("", id="energy-header")
        with Horizontal(id="progress"):
            yield ProgressBar(total=None, show_percentage=False, show_eta=False, id="progress-bar")
            yield Label("", id="progress-label")
        yield Note("", id="findings-msg")
        yield DataTable(id="findings", cursor_type="row", zebra_stripes=True)
        yield Footer()

    def on_mount(self) -> None:
        self.title = f"{self.run_a} vs {self.run_b}"
        self.sub_title = "findings, one row per cause"
        self.query_one("#energy-header", Static).update(
            energy_header(DiffResult(row_summary(self.row_a), row_summary(self.row_b)))
        )
        self._add_columns()
        cached = self.store.cached_diff(self.run_a, self.run_b)
        if cached is not None:
            self.show_result(cached)
            self.set_progress("")
        elif self.mapp.fresh:
            self._start_job("a new diff (--rerun)")
        else:
            self.set_progress("reading the stored diff…")
            self.load_stored()
        self.set_interval(0.5, self._tick)
        self.preload_profiles()

    def _add_columns(self) -> None:
        table = self.query_one("#findings", DataTable)
        width = self._ops_width()
        for label, key, w in FINDING_COLUMNS:
            table.add_column(label, key=key, width=w or width)

    def _ops_width(self) -> int:
        return ops_width(self.size.width or self.app.size.width)

    def on_resize(self) -> None:
        """Re-cut the operator lists to the new width (the columns before them stay)."""
        table = self.query_one("#findings", DataTable)
        width = self._ops_width()
        column = table.columns.get("ops")  # type: ignore[call-overload]
        if column is not None and column.width != width:
            table.clear(columns=True)
            self._add_columns()
            if self.result is not None:
                self.show_result(self.result)

    @work(thread=True, exclusive=True, group="diff")
    def load_stored(self) -> None:
        """The stored diff of A and B (module docstring), or the job when there is none."""
        try:
            result, why = self.store.stored_diff(self.run_a, self.run_b, self.mapp.threshold)
        except Exception as e:  # an unreadable DB: make the diff instead
            result, why = None, str(e)
        self.from_thread(self._stored_loaded, result, why)

    def _stored_loaded(self, result: DiffResult | None, why: str) -> None:
        if result is None:
            self._start_job(why)
            return
        self.stored = True
        self.store.remember_diff(self.run_a, self.run_b, result)
        self.set_progress("")
        self.show_result(result)

    def _start_job(self, why: str) -> None:
        confirm = ", re-measuring candidates" if self.mapp.rerun else ""
        self.set_progress(f"{why}: matching the two graphs{confirm}…")
        self.run_job()

    @work(thread=True, group="preload")
    def preload_profiles(self) -> None:
        """Load both profiles while the diff runs, so opening a finding is instant."""
        for run in (self.run_a, self.run_b):
            try:
                self.store.profile(run)
            except Exception:
                return  # the finding screen loads again and shows the error

    def on_unmount(self) -> None:
        # end the child now (quitting must not wait for a diagnosis); the worker thread
        # sees the cancellation and cleans up the pipe itself
        self.workers.cancel_node(self)
        if self.job is not None:
            self.job.terminate()

    # ---- the job ---------------------------------------------------------------------

    @work(thread=True, exclusive=True, group="diff")
    def run_job(self) -> None:
        worker = get_current_worker()
        app = self.mapp
        job = DiffJob(
            self.store.path, self.run_a, self.run_b, app.threshold, app.diagnose, app.rerun
        )
        self.job = job
        job.start()
        try:
            while not worker.is_cancelled:
                ev = job.poll(0.2)
                if ev is None:
                    continue
                if worker.is_cancelled:  # the screen went away: nobody to tell
                    break
                self.from_thread(self.on_job_event, ev.kind, ev.result, ev.message)
                if ev.kind in ("done", "error", "diagnosis-error"):
                    break
        finally:
            if worker.is_cancelled:
                job.cancel()
            else:
                job.finish()

    def on_job_event(self, kind: str, result: DiffResult | None, message: str) -> None:
        if kind == "diff" and result is not None:
            self.diagnosing = self.mapp.diagnose and bool(result.findings)
            self.show_result(result)
            if self.diagnosing:
                how = "re-running the scripts" if self.mapp.rerun else "no re-run"
                self.set_progress(f"diagnosing ({how})", 0)
            else:
                self.set_progress("")
        elif kind == "progress" and result is not None:
            self.show_result(result)
            done, _, total = message.partition("/")
            self.set_progress(self.status_text, int(done), int(total))
        elif kind == "diagnosed" and result is not None:
            self.diagnosing = False
            self.show_result(result)
            self.set_progress("")
            self.notify("diagnosis done", timeout=3)
        elif kind == "done":
            self.diagnosing = False
            self.set_progress("")
            if self.result is not None:
                self.store.remember_diff(self.run_a, self.run_b, self.result)
                self.show_result(self.result)
            if message:  # why the diff was not stored; the findings stand
                self.notify(message, severity="warning", timeout=8)
        elif kind == "diagnosis-error" or (kind == "error" and self.result is not None):
            # the findings arrived before the failure (even a crash of the child): keep them
            self.diagnosing = False
            self.set_progress("")
            self.show_msg(f"diagnosis failed: {message} (the findings stand)", "error")
            self._mark_failed(message)
            self._refresh_causes()
        else:
            self.diagnosing = False
            self.set_progress("")
            self.show_msg(message, "error")

    def set_progress(self, text: str, done: int | None = None, total: int | None = None) -> None:
        """Show `text` with a progress bar (indeterminate until `total` is known)."""
        self.status_text = text
        self.query_one("#progress").display = bool(text)
        bar = self.query_one("#progress-bar", ProgressBar)
        if total:
            bar.update(total=total, progress=done or 0)
        elif done == 0:
            bar.update(total=None)
        self._tick()

    def _tick(self) -> None:
        if not self.status_text:
            return
        bar = self.query_one("#progress-bar", ProgressBar)
        done = f" {int(bar.progress)}/{int(bar.total)} done" if bar.total else ""
        secs = (
            f", {self.job.elapsed_s():.0f} s" if self.job is not None and self.job.started else ""
        )
        self.query_one("#progress-label", Label).update(f"{self.status_text}{done}{secs}")

    def show_msg(self, text: str, kind: str = "info") -> None:
        note = self.query_one("#findings-msg", Note)
        note.update(text)
        note.set_classes(kind)
        note.display = bool(text)

    # ---- showing ---------------------------------------------------------------------

    def show_result(self, result: DiffResult, note: bool = True) -> None:
        """Fill the table with `result`'s causes; with `note`, the line above it says
        how many (False keeps a line that says something else, a failure)."""
        self.result = result
        self.view = view = diff_view(result)
        self.query_one("#energy-header", Static).update(energy_header(result))
        table = self.query_one("#findings", DataTable)
        cursor = table.cursor_row
        selected = None  # keep the selected cause, not the row number: rows reorder
        if 0 <= cursor < table.row_count:
            selected = int(table.coordinate_to_cell_key(Coordinate(cursor, 0)).row_key.value or 0)
        table.clear()
        width = self._ops_width()
        # noise last, as `diff` prints it: a row per cause, keyed by its lead finding
        for row in view.rows:
            table.add_row(*finding_row(row, self.diagnosing, width), key=str(row.lead.id), height=2)
        if view.rows:
            # the selection follows its finding, also into the group it joined
            held = view.row_of(selected) if selected is not None else None
            index = (
                view.rows.index(held)
                if held is not None
                else min(max(cursor, 0), len(view.rows) - 1)
            )
            table.move_cursor(row=index)
            if note:
                self.show_msg(self._summary(view), "info")
        elif note:
            why = result.message or (
                f"{result.matched_pairs} matched regions, none differs by more than "
                f"{fmt_pct(result.threshold)} in energy"
            )
            self.show_msg(f"No findings: {why}", "info")
        if self.detail is not None and self.detail.is_attached:
            f = self.finding(self.detail.finding.id)
            if f is not None:
                self.detail.update_finding(result, f)

    def _summary(self, view: DiffView) -> str:
        result = view.result
        real, noise = len(view.real), len(view.noise)
        n = len(result.findings)
        text = (
            f"{real} cause{'s' if real != 1 else ''} ({n} finding{'s' if n != 1 else ''}) "
            f"over the {fmt_pct(result.threshold)} threshold, {result.matched_pairs} "
            "matched regions"
            + (f"; {noise} judged noise: same code, arguments and settings" if noise else "")
        )
        if self.stored:
            text += " · the stored diff (--rerun measures again)"
        return text + " · enter: open"

    def _mark_failed(self, message: str) -> None:
        """Findings the failed diagnosis left without a cause carry its error, so the
        table and the finding screen say "diagnosis failed", not "not diagnosed yet"."""
        if self.result is None:
            return
        for f in self.result.findings:
            if f.category is None and f.kind != "interpreter" and f.root_cause is None:
                f.root_cause = RootCause(kind="unknown", error=message)
        if self.detail is not None and self.detail.is_attached:
            self.detail.render_all()

    def _refresh_causes(self) -> None:
        if self.result is not None:  # the note above says why diagnosis stopped
            self.show_result(self.result, note=False)

    def finding(self, fid: int) -> Finding | None:
        if self.result is None:
            return None
        return next((f for f in self.result.findings if f.id == fid), None)

    def selected(self) -> Finding | None:
        """The highlighted cause's lead finding (it carries the diagnosis and patch)."""
        table = self.query_one("#findings", DataTable)
        if self.result is None or not self.result.findings or table.row_count == 0:
            return None
        key = table.coordinate_to_cell_key(Coordinate(table.cursor_row, 0)).row_key.value
        return self.finding(int(key or 0))

    # ---- actions ---------------------------------------------------------------------

    @on(DataTable.RowSelected, "#findings")
    def _row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        self.action_open()

    def action_open(self) -> None:
        f = self.selected()
        if f is None or self.result is None:
            return
        self.detail = FindingScreen(self, self.result, f)
        self.app.push_screen(self.detail)

    def row_of(self, f: Finding):  # -> CauseRow | None
        """The cause row finding `f` belongs to (the detail view shows its figures)."""
        return self.view.row_of(f.id) if self.view is not None else None

    def action_export(self) -> None:
        f = self.selected()
        if f is not None and self.result is not None:
            export_finding(self, self.result, f, self.exported)

    def action_energy(self) -> None:
        self.app.push_screen(EnergyScreen([self.run_a, self.run_b]))

    def action_swap(self) -> None:
        self.mapp.replace_diff(self, self.run_b, self.run_a)

    def action_back(self) -> None:
        self.app.pop_screen()
