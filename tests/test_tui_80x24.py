"""magneton-tui fully usable at 80×24, the size the TUI promises: the walk findings →
finding → root cause → patch with no horizontal scrolling, the finding's header at most
two lines, no footer key cut off, table cells capped, and a diagnosis that failed says
so instead of "not diagnosed yet". Driven with Textual's Pilot on the gelu example pair
recorded once per session (tests/test_tui.py `recorded_gelu`)."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.containers import VerticalScroll
from textual.widgets import Footer
from tui_support import SIZE, app_for, cells, flat, recorded_gelu, run_app, text_of, wait_for

from magneton.model import DiffResult, Finding, Region, RunSummary
from magneton.tui.app import MagnetonApp
from magneton.tui.data import Store
from magneton.tui.screens import FindingScreen, FindingsScreen

assert SIZE == (80, 24)


@pytest.fixture(scope="session")
def gelu_db(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return recorded_gelu(tmp_path_factory.getbasetemp())


def columns_fit(table, last: str) -> bool:
    """Whether the table's columns up to `last` (a key) lie inside its width, so they
    show without scrolling right."""
    right = 0
    for key, column in table.columns.items():
        right += column.get_render_width(table)
        if key.value == last:
            break
    return right <= table.size.width


def footer_fits(screen) -> None:
    """Every key the footer shows lies inside the screen (none cut: "s Oth")."""
    footer = screen.query_one(Footer)
    keys = [w for w in footer.walk_children() if type(w).__name__ == "FooterKey"]
    assert keys, "no footer keys"
    assert max(k.region.right for k in keys) <= SIZE[0], [str(k.region) for k in keys]


@pytest.mark.slow  # one of the slowest end-to-end tests (pyproject.toml, markers)
def test_walk_findings_cause_patch_at_80x24(gelu_db) -> None:
    _, db = gelu_db
    app = app_for(db, "a", "b", diagnose=True)

    async def scenario(pilot) -> None:
        screen = app.screen
        assert isinstance(screen, FindingsScreen)
        await wait_for(pilot, lambda: screen.result is not None, 120, "the diff")
        await wait_for(pilot, lambda: not screen.diagnosing, 300, "the diagnosis")
        await pilot.pause()
        footer_fits(screen)
        row = cells(screen.query_one("#findings"))[0]
        assert row[0].startswith("1") and row[2] == "waste" and row[3] == "misconfiguration"
        table = screen.query_one("#findings")
        assert columns_fit(table, "ops"), "verdict, saving, cause or ops off screen"
        await pilot.press("enter")  # no ← → anywhere in this walk
        detail = app.screen
        assert isinstance(detail, FindingScreen) and detail.finding.id == 1
        await pilot.pause()
        summary = detail.query_one("#finding-summary")
        assert summary.region.height <= 2
        head = text_of(summary)
        assert head.startswith("#1") and " waste · misconfiguration · " in head
        assert "…" not in head  # parts are left out whole, never cut
        footer_fits(detail)
        await pilot.press("3")
        await pilot.pause()
        scroll = detail.query_one("#cause-scroll", VerticalScroll)
        assert scroll.max_scroll_x == 0  # nothing to the right to scroll to
        assert "Root cause" in flat(text_of(detail.query_one("#rootcause")))
        await pilot.press("f")  # the fix and its patch, brought to the top
        await pilot.pause()
        fix = detail.query_one("#fix")
        assert scroll.region.y <= fix.region.y < scroll.region.bottom, (fix.region, scroll.region)
        text = flat(text_of(fix))
        assert "gelu" in text and "+" in text  # the patch preview is on screen
        assert scroll.max_scroll_x == 0
        await pilot.press("escape")
        assert isinstance(app.screen, FindingsScreen)

    run_app(app, scenario)


def _interpreter_finding() -> Finding:
    frames = [f"modeling_{'x' * 60}.py:{n} build_{'mask' * 20}" for n in range(3)]
    # ops of its own: sharing the region finding's would make it join that cause's row
    return Finding(
        1, "a", "waste", Region([5], energy_j=2.0, time_s=0.002),
        Region([6], energy_j=1.0, time_s=0.001), 1.0, 0.1, 0.0,
        ops_a=["aten::add"], ops_b=["aten::add"], kind="interpreter",
        frames_a=frames, frames_b=frames[:1],
    )  # fmt: skip


def _region_finding(fid: int) -> Finding:
    return Finding(
        fid, "a", "waste", Region([1], energy_j=2.0, time_s=0.002),
        Region([2], energy_j=1.0, time_s=0.001), 1.0, 0.1, 0.0,
        ops_a=["aten::tanh"], ops_b=["aten::gelu"], occurrences=12,
    )  # fmt: skip


def test_a_python_cell_is_capped_and_a_failed_diagnosis_says_so(gelu_db) -> None:
    _, db = gelu_db
    store = Store(db)
    result = DiffResult(
        RunSummary("a", 10, 1, "model:cpu-default", "estimated"),
        RunSummary("b", 9, 1, "model:cpu-default", "estimated"),
        [_region_finding(2), _interpreter_finding()],
        5,
    )
    store.remember_diff("a", "b", result)
    app = MagnetonApp(store, store.check(), "a", "b")

    async def scenario(pilot) -> None:
        screen = app.screen
        rows = {r[0]: r for r in cells(screen.query_one("#findings"))}
        assert rows["1"][4].startswith("◀A python: modeling_")
        # cut to the column (hundreds of characters before), the verdict and cause before it
        assert all(len(line) <= screen._ops_width() for line in rows["1"][4].split("\n"))
        assert columns_fit(screen.query_one("#findings"), "ops")
        # the diagnosis child fails after the findings arrived
        screen.on_job_event("diagnosis-error", None, "the diff/diagnosis process stopped")
        await pilot.pause()
        rows = {r[0]: r for r in cells(screen.query_one("#findings"))}
        assert rows["2"][3] == "failed" and rows["1"][3] == "python"
        ids = [r[0] for r in cells(screen.query_one("#findings"))]
        screen.query_one("#findings").move_cursor(row=ids.index("2"))
        await pilot.press("enter")
        detail = app.screen
        assert isinstance(detail, FindingScreen) and detail.finding.id == 2
        # a repeat is "places", not "(e.g. one per layer)": it may be decode steps
        head = text_of(detail.query_one("#finding-summary"))
        assert "12 places" in head and "per layer" not in head
        await pilot.press("2")
        paths = flat(text_of(detail.query_one("#callpaths")))
        assert "diagnosis failed" in paths and "not diagnosed yet" not in paths
        await pilot.press("3")
        cause = flat(text_of(detail.query_one("#rootcause")))
        assert "diagnosis failed: the diff/diagnosis process stopped" in cause
        assert "not diagnosed yet" not in cause
        assert "diagnosis failed" in flat(text_of(detail.query_one("#fix")))

    run_app(app, scenario)


def test_operators_take_the_width_left_and_are_recut_on_resize(gelu_db) -> None:
    """The columns before the operators keep their place at any width; the operator
    cell takes what is left, and a wider terminal shows more of the list."""
    _, db = gelu_db
    store = Store(db)
    f = _region_finding(1)
    f.ops_a = [f"aten::op_{'x' * 12}_{i}" for i in range(8)]
    result = DiffResult(
        RunSummary("a", 10, 1, "model:cpu-default", "estimated"),
        RunSummary("b", 9, 1, "model:cpu-default", "estimated"),
        [f],
        5,
    )
    store.remember_diff("a", "b", result)
    app = MagnetonApp(store, store.check(), "a", "b")

    async def scenario(pilot) -> None:
        screen = app.screen
        table = screen.query_one("#findings")
        narrow = cells(table)[0][4].split("\n")[0]
        assert narrow.endswith("…") and columns_fit(table, "ops")
        await pilot.resize_terminal(140, 30)
        await pilot.pause()
        wide = cells(table)[0][4].split("\n")[0]
        assert len(wide) > len(narrow) and columns_fit(table, "ops")
        assert cells(table)[0][2] == "waste"  # the rows came back with the columns

    run_app(app, scenario)
