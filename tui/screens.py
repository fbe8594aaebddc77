"""The screens of `magneton-tui`: runs → findings → finding detail, energy view, Cypher, help.

Flow: `RunsScreen` is always the bottom of the stack (pick two runs), `FindingsScreen`
diffs them in a child process (see jobs.py) and shows findings as soon as detection is
done while diagnosis continues behind a progress bar, `FindingScreen` walks one finding
from regions to call paths to root cause and patch. Every screen is keyboard-driven;
`escape` goes back one screen, `q` quits from anywhere outside a text field.

Slow work (loading profiles, queries, breakdowns) runs in thread workers and the results
come back through `call_from_thread`, so no key press ever waits on the DB.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from magneton.graphdb.model import DiffResult, Finding, MagnetonError, Profile, RunSummary
from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen, Screen
from textual.widgets import (
    DataTable,
    Footer,
    Header,
    Input,
    Label,
    ProgressBar,
    Static,
    TabbedContent,
    TabPane,
    Tree,
)
from textual.worker import get_current_worker

from .data import (
    Store,
    cell,
    default_patch_path,
    describe_energy,
    error_text,
    finding_runs,
    fmt_j,
    fmt_pct,
    fmt_s,
    power_over,
)
from .export import check_applies, write_patch
from .jobs import DiffJob
from .widgets import (
    FINDING_COLUMNS,
    Note,
    PowerView,
    cause_text,
    divergence_view,
    energy_header,
    fill_region_table,
    finding_row,
    finding_summary,
    fix_view,
    keys_table,
    root_cause_view,
)

if TYPE_CHECKING:
    from magneton.graphdb.db import RunRow

    from .app import MagnetonApp


def _summary(row: RunRow) -> RunSummary:
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
        key = table.coordinate_to_cell_key((table.cursor_row, 0)).row_key.value
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
        self.sub_title = "findings, largest saving first"
        self.query_one("#energy-header", Static).update(
            energy_header(DiffResult(_summary(self.row_a), _summary(self.row_b)))
        )
        table = self.query_one("#findings", DataTable)
        for label, key in FINDING_COLUMNS:
            table.add_column(label, key=key)
        cached = self.store.cached_diff(self.run_a, self.run_b)
        if cached is not None:
            self.show_result(cached)
            self.set_progress("")
        else:
            self.set_progress("matching the two graphs…")
            self.run_job()
        self.set_interval(0.5, self._tick)
        self.preload_profiles()

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
                if ev.kind in ("diagnosed", "error", "diagnosis-error"):
                    break
                if ev.kind == "diff" and (not app.diagnose or not ev.result.findings):
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
                self.store.remember_diff(self.run_a, self.run_b, result)
        elif kind == "progress" and result is not None:
            self.show_result(result)
            done, _, total = message.partition("/")
            self.set_progress(self.status_text, int(done), int(total))
        elif kind == "diagnosed" and result is not None:
            self.diagnosing = False
            self.show_result(result)
            self.set_progress("")
            self.store.remember_diff(self.run_a, self.run_b, result)
            self.notify("diagnosis done", timeout=3)
        elif kind == "diagnosis-error" or (kind == "error" and self.result is not None):
            # the findings arrived before the failure (even a crash of the child): keep them
            self.diagnosing = False
            self.set_progress("")
            self.show_msg(f"diagnosis failed: {message} (the findings stand)", "error")
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

    def show_result(self, result: DiffResult) -> None:
        self.result = result
        self.query_one("#energy-header", Static).update(energy_header(result))
        table = self.query_one("#findings", DataTable)
        cursor = table.cursor_row
        selected = None  # keep the selected finding, not the row number: rows reorder
        if 0 <= cursor < table.row_count:
            selected = table.coordinate_to_cell_key((cursor, 0)).row_key.value
        table.clear()
        # noise last, as `diff` prints them: the verdict column is off-screen at 80-120
        # columns, and interleaved noise rows buried the findings worth acting on
        rows = result.ordered()
        for f in rows:
            table.add_row(*finding_row(f, self.diagnosing), key=str(f.id))
        if result.findings:
            keys = [str(f.id) for f in rows]
            row = keys.index(selected) if selected in keys else min(max(cursor, 0), len(rows) - 1)
            table.move_cursor(row=row)
            n = len(result.findings)
            noise = sum(f.verdict == "noise" for f in result.findings)
            self.show_msg(
                f"{n} finding{'s' if n != 1 else ''} over the {fmt_pct(result.threshold)} energy "
                f"threshold among {result.matched_pairs} matched regions"
                + (f" ({noise} judged noise: same code, arguments and settings)" if noise else "")
                + " · enter: open",
                "info",
            )
        else:
            why = result.message or (
                f"{result.matched_pairs} matched regions, none differs by more than "
                f"{fmt_pct(result.threshold)} in energy"
            )
            self.show_msg(f"No findings: {why}", "info")
        if self.detail is not None and self.detail.is_attached:
            f = self.finding(self.detail.finding.id)
            if f is not None:
                self.detail.update_finding(result, f)

    def _refresh_causes(self) -> None:
        if self.result is None:
            return
        table = self.query_one("#findings", DataTable)
        for f in self.result.findings:
            table.update_cell(str(f.id), "cause", cause_text(f, self.diagnosing))

    def finding(self, fid: int) -> Finding | None:
        if self.result is None:
            return None
        return next((f for f in self.result.findings if f.id == fid), None)

    def selected(self) -> Finding | None:
        table = self.query_one("#findings", DataTable)
        if self.result is None or not self.result.findings or table.row_count == 0:
            return None
        key = table.coordinate_to_cell_key((table.cursor_row, 0)).row_key.value
        return self.finding(int(key))

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

    def action_export(self) -> None:
        f = self.selected()
        if f is not None and self.result is not None:
            export_finding(self, self.result, f)

    def action_energy(self) -> None:
        self.app.push_screen(EnergyScreen([self.run_a, self.run_b]))

    def action_swap(self) -> None:
        self.mapp.replace_diff(self, self.run_b, self.run_a)

    def action_back(self) -> None:
        self.app.pop_screen()


def export_finding(screen: Screen, result: DiffResult, f: Finding) -> None:
    """Ask where to write the finding's patch (default next to the wasteful script)."""
    app: MagnetonApp = screen.app  # type: ignore[assignment]
    if f.fix is None or not f.fix.patch:
        if f.category is None:
            screen.notify("no patch yet: diagnosis is still running", severity="warning")
        else:
            screen.notify("this finding has no patch to export", severity="warning")
        return
    run = finding_runs(result, f)[0 if f.wasteful == "a" else 1]
    script = next((r.script for r in app.runs if r.name == run), "")
    # the patch's paths are relative to fix.base_dir (the wasteful script's folder)
    base = f.fix.base_dir or (str(Path(script).parent) if script else "")
    base_dir = Path(base) if base else None
    default = default_patch_path(base_dir, f.id)

    def done(path: str | None) -> None:
        if not path:
            return
        check = check_applies(Path(path), base_dir)
        text = f"{path} (not applied; {check.message})"
        if check.command:
            text += f"\napply with: {check.command}"
        owner = screen if isinstance(screen, FindingsScreen) else getattr(screen, "owner", None)
        if owner is not None:
            owner.exported[f.id] = text
        if isinstance(screen, FindingScreen):
            screen.exported = text
            screen.render_fix()
        screen.notify(
            f"patch written to {text}",
            severity="warning" if check.ok is False else "information",
            timeout=8,
        )

    app.push_screen(ExportScreen(f, default, base_dir), done)


# --------------------------------------------------------------------------------------
# One finding
# --------------------------------------------------------------------------------------


class FindingScreen(BaseScreen):
    BINDINGS = [
        Binding("escape", "back", "Findings"),
        Binding("x", "export", "Export patch"),
        Binding("1", "tab('regions')", "Regions"),
        Binding("2", "tab('paths')", "Call paths"),
        Binding("3", "tab('cause')", "Cause & fix"),
    ]

    def __init__(self, owner: FindingsScreen, result: DiffResult, finding: Finding) -> None:
        super().__init__()
        self.owner = owner
        self.result = result
        self.finding = finding
        self.prof: dict[str, Profile | None] = {"a": None, "b": None}
        self.exported: str | None = owner.exported.get(finding.id)

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static("", id="finding-summary")
        with TabbedContent(id="tabs"):
            with TabPane("1 Regions", id="regions"):
                with Horizontal(id="sides"):
                    for side in ("a", "b"):
                        with Vertical(classes="side"):
                            yield Label("", id=f"side-{side}-title", classes="side-title")
                            yield DataTable(id=f"ops-{side}", cursor_type="row", classes="ops")
                            yield PowerView(id=f"power-{side}", classes="power")
            with TabPane("2 Call paths", id="paths"):
                with VerticalScroll(id="paths-scroll"):
                    yield Static("", id="callpaths")
            with TabPane("3 Root cause & fix", id="cause"):
                with VerticalScroll(id="cause-scroll"):
                    yield Static("", id="rootcause")
                    yield Static("", id="fix")
        yield Footer()

    def on_mount(self) -> None:
        self.title = f"{self.result.a.run} vs {self.result.b.run}"
        self.sub_title = f"finding {self.finding.id}"
        self.render_all()
        self.query_one("#ops-a").focus()
        self.load_profiles()

    @work(thread=True, exclusive=True, group="profiles")
    def load_profiles(self) -> None:
        try:
            run_a, run_b = finding_runs(self.result, self.finding)
            pa = self.store.profile(run_a)
            pb = self.store.profile(run_b)
        except Exception as e:
            self.from_thread(
                self.notify, f"cannot load profiles: {error_text(e)}", severity="error"
            )
            return
        self.from_thread(self._profiles_loaded, pa, pb)

    def _profiles_loaded(self, pa: Profile, pb: Profile) -> None:
        self.prof = {"a": pa, "b": pb}
        self.render_all()

    def update_finding(self, result: DiffResult, f: Finding) -> None:
        self.result, self.finding = result, f
        self.render_all()

    def render_all(self) -> None:
        f, r = self.finding, self.result
        self.query_one("#finding-summary", Static).update(finding_summary(r, f))
        for side, run, region, names in (
            ("a", r.a, f.region_a, f.ops_a),
            ("b", r.b, f.region_b, f.ops_b),
        ):
            title = Text()
            title.append(f" {side.upper()} ", style="bold reverse")
            title.append(f" {run.run}  {fmt_j(region.energy_j)}  {fmt_s(region.time_s)}  ")
            title.append(
                "wasteful" if f.wasteful == side else "efficient",
                style="bold red" if f.wasteful == side else "bold green",
            )
            self.query_one(f"#side-{side}-title", Label).update(title)
            table = self.query_one(f"#ops-{side}", DataTable)
            prof = self.prof[side]
            fill_region_table(table, prof, region, names)
            pv = self.query_one(f"#power-{side}", PowerView)
            if prof is not None:
                slices = power_over(prof, region.ops)
                pv.show(slices, prof.run.energy_method, prof.run.power_source)
        self.query_one("#callpaths", Static).update(
            divergence_view(f, self.prof["a"], self.prof["b"], r.a.run, r.b.run)
        )
        self.query_one("#rootcause", Static).update(root_cause_view(f, r.a.run, r.b.run))
        self.render_fix()

    def render_fix(self) -> None:
        self.query_one("#fix", Static).update(fix_view(self.finding, self.exported))

    def action_tab(self, tab: str) -> None:
        self.query_one("#tabs", TabbedContent).active = tab
        # focus the tab's content so ↑/↓/pgup/pgdn scroll it right away
        target = {"regions": "#ops-a", "paths": "#paths-scroll", "cause": "#cause-scroll"}[tab]
        self.query_one(target).focus()

    def action_export(self) -> None:
        export_finding(self, self.result, self.finding)

    def action_back(self) -> None:
        self.app.pop_screen()


# --------------------------------------------------------------------------------------
# Export
# --------------------------------------------------------------------------------------


class ExportScreen(ModalScreen[str | None]):
    """Ask for the patch path; writes the file, never applies it."""

    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, finding: Finding, default: Path, script_dir: Path | None) -> None:
        super().__init__()
        self.finding = finding
        self.default = default
        self.script_dir = script_dir
        self._confirm_overwrite: str | None = None

    def compose(self) -> ComposeResult:
        with Vertical(id="export-box"):
            yield Label(Text(f"Export the patch of finding {self.finding.id}", style="bold"))
            where = f" (relative to {self.script_dir})" if self.script_dir else ""
            yield Label(f"Write to{where}:")
            yield Input(str(self.default), id="export-path")
            yield Note(
                "enter: write · escape: cancel · the patch is only written; apply it with "
                "git apply",
                id="export-note",
            )

    def on_mount(self) -> None:
        inp = self.query_one("#export-path", Input)
        inp.focus()
        inp.cursor_position = len(inp.value)

    @on(Input.Submitted, "#export-path")
    def _submit(self, event: Input.Submitted) -> None:
        raw = event.value.strip()
        note = self.query_one("#export-note", Note)
        if not raw:
            note.update("give a file path")
            note.set_classes("error")
            return
        path = Path(raw).expanduser()
        if not path.is_absolute() and self.script_dir is not None:
            path = self.script_dir / path
        if path.exists() and self._confirm_overwrite != str(path):
            self._confirm_overwrite = str(path)
            note.update(f"{path} exists: press enter again to overwrite, escape to cancel")
            note.set_classes("warning")
            return
        try:
            written = write_patch(self.finding, path)
        except (MagnetonError, OSError) as e:
            note.update(f"cannot write {path}: {error_text(e)}")
            note.set_classes("error")
            return
        self.dismiss(str(written))

    def action_cancel(self) -> None:
        self.dismiss(None)


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

    def _header(self, prof: Profile | None) -> None:
        t = Text()
        t.append(f" {self.run} ", style="bold reverse")
        if prof is not None:
            r = prof.run
            t.append(f" {fmt_j(r.energy_j)}, {fmt_s(r.time_s)} per call, {len(prof.ops)} ops — ")
            t.append(describe_energy(r.energy_method, r.power_source), style="italic")
        t.append(f"\ngrouped by {self.by}", style="dim")
        t.append(f" · layers {'folded' if self.fold else 'unfolded'}", style="dim")
        if len(self.runs) > 1:
            t.append(f" · s: show {self.runs[1 - self.index]}", style="dim")
        self.query_one("#energy-run", Static).update(t)

    @work(thread=True, exclusive=True, group="energy")
    def load(self) -> None:
        from magneton.diagnose.breakdown import module_tree, operator_table

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
        self._header(prof)
        table = self.query_one("#op-table", DataTable)
        table.clear(columns=True)
        table.add_columns(self.by, "calls", "energy", "share", "time", "J/call", "avg W", "method")
        for r in rows:
            share = Text(f"{fmt_pct(r.share):>6} ")
            share.append(_mini_bar(r.share), style="magenta")
            table.add_row(
                r.name,
                str(r.calls),
                fmt_j(r.energy_j),
                share,
                fmt_s(r.time_s),
                fmt_j(r.j_per_call),
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
            res = self.store.query(q)
        except Exception as e:
            self.from_thread(self._show_error, error_text(e))
            return
        self.from_thread(self._show_rows, res.columns, res.rows)

    def _show_error(self, text: str) -> None:
        err = self.query_one("#query-error", Note)
        err.update(Text(text, style="bold"))
        err.set_classes("error")
        err.display = True
        self.query_one("#query-info", Note).update("")

    def _show_rows(self, columns: list[str], rows: list[list]) -> None:
        self.query_one("#query-error", Note).display = False
        table = self.query_one("#query-result", DataTable)
        table.clear(columns=True)
        table.add_columns(*[str(c) for c in columns])
        for row in rows[:MAX_ROWS]:
            table.add_row(*[cell(v) for v in row])
        n = len(rows)
        shown = f" (showing the first {MAX_ROWS})" if n > MAX_ROWS else ""
        self.query_one("#query-info", Note).update(f"{n} row{'s' if n != 1 else ''}{shown}")

    def action_back(self) -> None:
        self.app.pop_screen()


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
