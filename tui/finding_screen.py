"""One finding, from its regions to its call paths to its root cause and patch, and the
dialog that exports the patch."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Group
from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen, Screen
from textual.widgets import DataTable, Footer, Header, Input, Label, Static, TabbedContent, TabPane

from magneton.model import DiffResult, Finding, MagnetonError, Profile

from .base import BaseScreen
from .data import default_patch_path, error_text, finding_runs, fmt_j, fmt_s, power_over
from .export import check_applies, write_patch
from .widgets import (
    Note,
    PowerView,
    divergence_view,
    fill_region_table,
    finding_details,
    finding_summary,
    fix_view,
    root_cause_view,
)

if TYPE_CHECKING:
    from .app import MagnetonApp
    from .findings_screen import FindingsScreen


def export_finding(
    screen: Screen, result: DiffResult, f: Finding, exported: dict[int, str]
) -> None:
    """Ask where to write the finding's patch (default next to the wasteful script);
    `exported` is the findings list's record of written patches (FindingsScreen.exported),
    handed down by the caller so this module need not import the list's screen."""
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
        exported[f.id] = text
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
        # the tabs show their numbers: 1-3 stay off the footer, which at 80 columns cut
        # its last keys ("s Oth")
        Binding("1", "tab('regions')", "Regions", show=False),
        Binding("2", "tab('paths')", "Call paths", show=False),
        Binding("3", "tab('cause')", "Cause & fix", show=False),
        Binding("f", "fix", "Fix"),
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
        # a screen pushed but not yet built has no widgets to update: `on_mount` renders
        # what is set here (the diff's last event can come in just as a finding opens)
        if self.is_mounted:
            self.render_all()

    def render_all(self) -> None:
        f, r = self.finding, self.result
        self.query_one("#finding-summary", Static).update(
            finding_summary(r, f, self.owner.row_of(f))
        )
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
        self.query_one("#rootcause", Static).update(
            Group(finding_details(f), root_cause_view(f, r.a.run, r.b.run))
        )
        self.render_fix()

    def render_fix(self) -> None:
        self.query_one("#fix", Static).update(fix_view(self.finding, self.exported))

    def action_tab(self, tab: str) -> None:
        self.query_one("#tabs", TabbedContent).active = tab
        # focus the tab's content so ↑/↓/pgup/pgdn scroll it right away
        target = {"regions": "#ops-a", "paths": "#paths-scroll", "cause": "#cause-scroll"}[tab]
        self.query_one(target).focus()

    def action_fix(self) -> None:
        """The fix and its patch preview, at the top of the view (tab 3 scrolled). The
        scroll waits for the tab's layout: pressed right after the screen opened, the
        tab had no size yet and the view stayed at the root cause."""
        self.action_tab("cause")
        self.call_after_refresh(self._scroll_to_fix)

    def _scroll_to_fix(self) -> None:
        scroll = self.query_one("#cause-scroll", VerticalScroll)
        fix = self.query_one("#fix")
        if fix.region.height == 0:  # not laid out yet: try again after the next refresh
            self.call_after_refresh(self._scroll_to_fix)
            return
        scroll.scroll_to_widget(fix, animate=False, top=True)

    def action_export(self) -> None:
        export_finding(self, self.result, self.finding, self.owner.exported)

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
