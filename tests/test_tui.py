"""magneton-tui driven with Textual's Pilot on a DB recorded from the gelu example pair.

The DB is recorded once per session with the recorder's Python API (`record_script`,
what `magneton record` runs) from a copy of examples/cases/gelu_backend that is a git repository, so
an exported patch can be checked with a real `git apply --check` without touching the
shipped example. Every app runs at 80×24, the size the TUI promises to be usable at.
tests/test_tui_tmux.py reuses the same recording (see `gelu_db`).
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
from rich.console import Console
from tui_support import (
    app_for,
    cells,
    flat,
    git,
    recorded_gelu,
    run_app,
    text_of,
    wait_for,
)

from magneton.graphdb import open_db
from magneton.model import (
    DiffResult,
    Divergence,
    Finding,
    PathElement,
    Region,
    RunSummary,
)
from magneton.tui.app import MagnetonApp, main
from magneton.tui.data import Store, ops_summary, periodic_unit, power_over
from magneton.tui.export import check_applies
from magneton.tui.screens import (
    EnergyScreen,
    FindingScreen,
    FindingsScreen,
    HelpScreen,
    QueryScreen,
    RunsScreen,
)
from magneton.tui.widgets import divergence_view, element_text

# --------------------------------------------------------------------------------------
# Fixtures (the recording and the helpers: tests/tui_support.py)
# --------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def gelu_db(tmp_path_factory) -> tuple[Path, Path]:
    return recorded_gelu(tmp_path_factory.getbasetemp())


# --------------------------------------------------------------------------------------
# Runs → findings → finding
# --------------------------------------------------------------------------------------


def test_pick_runs_findings_diagnosis_detail_and_patch_export(gelu_db, monkeypatch) -> None:
    """The walk a user takes: pick a and b, see the gelu finding ranked first while
    diagnosis runs, open it (regions, call paths, root cause, patch), export the patch."""
    case, db = gelu_db
    patch_file = case / "magneton-fix-1.patch"
    patch_file.unlink(missing_ok=True)
    app = app_for(db, diagnose=True)
    events: list[tuple[str, str]] = []
    on_event = FindingsScreen.on_job_event

    def spy(screen, kind, result, message):
        on_event(screen, kind, result, message)
        first = cells(screen.query_one("#findings"))[:1]
        events.append((kind, first[0][3] if first else ""))  # its cause column

    # on the class, before the screen exists: the diff's first event can come before a
    # test that waits for the screen gets to see it (a CI run lost it that way)
    monkeypatch.setattr(FindingsScreen, "on_job_event", spy)

    async def scenario(pilot) -> None:
        assert isinstance(app.screen, RunsScreen)
        assert [r[1] for r in cells(app.screen.query_one("#runs"))] == ["a", "b"]
        await pilot.press("enter")  # a → A
        await pilot.press("down", "enter")  # b → B, compare
        await wait_for(pilot, lambda: isinstance(app.screen, FindingsScreen), 5, "findings")
        screen = app.screen
        await wait_for(pilot, lambda: screen.result is not None, 90, "the diff")
        header = text_of(screen.query_one("#energy-header"))
        assert "estimated by model:work-only — no power sensor" in header
        first = screen.result.findings[0]
        # the gelu_new chain on A against the fused gelu on B, A wasteful
        assert first.wasteful == "a" and first.verdict == "waste"
        assert "aten::tanh" in first.ops_a and "aten::gelu" in first.ops_b
        row = cells(screen.query_one("#findings"))[0]
        # one cell for both sides' operators, A's line then B's, cut to the width left
        # at 80 columns (the finding's Regions tab lists them all)
        side_a, side_b = row[4].split("\n")
        assert row[0].startswith("1") and side_a.startswith("◀A mul pow")
        assert side_b.strip() == "B gelu ×4"
        await wait_for(pilot, lambda: not screen.diagnosing, 240, "the diagnosis")
        # "diagnosed" ends the diagnosing; the child's "done" follows once it stored the
        # diff (a loaded CI runner once read the events in between)
        await wait_for(pilot, lambda: "done" in dict(events), 60, "done")
        # findings first (cause column "diagnosing…"), then the diagnosis filled them in,
        # and last the child's word that it stored the diff
        kinds = [k for k, _ in events]
        assert kinds[0] == "diff" and kinds[-2:] == ["diagnosed", "done"], events
        assert events[0][1] == "diagnosing…"
        assert not screen.query_one("#progress").display
        assert cells(screen.query_one("#findings"))[0][3] == "misconfiguration"

        await pilot.press("enter")
        detail = app.screen
        assert isinstance(detail, FindingScreen) and detail.finding.id == 1
        await wait_for(pilot, lambda: detail.prof["a"] is not None, 30, "profiles")
        await pilot.pause()
        ops_a = cells(detail.query_one("#ops-a"))
        assert any(r[0] == "tanh" and r[1].startswith("h.0.mlp.act") for r in ops_a)
        assert any(r[0] == "gelu" for r in cells(detail.query_one("#ops-b")))
        power = str(detail.query_one("#power-a").query_one("Label").content)
        assert power.startswith("power model (modelled)") and " W, " in power

        await pilot.press("2")
        paths = flat(text_of(detail.query_one("#callpaths")))
        assert "Divergence at the python level" in paths
        # the chosen activation: NewGELUActivation's formula vs GELUTanh's one kernel
        assert "▶ forward transformers/activations.py:66" in paths
        # the line moves between transformers releases (240, 242): the place is the point
        assert re.search(
            r"decided after forward transformers/models/gpt2/modeling_gpt2\.py:\d+", paths
        )
        assert "aten::tanh" in paths and "aten::gelu" in paths

        await pilot.press("3")
        cause = flat(text_of(detail.query_one("#rootcause")))
        assert "variable activation_function" in cause
        assert 'A a: "gelu_new"' in cause and 'B b: "gelu_pytorch_tanh"' in cause
        assert "change it at" in cause and "a.py:14" in cause
        assert 'activation_function="gelu_new")' in cause  # the origin line, read from disk
        fix = flat(text_of(detail.query_one("#fix")))
        assert "Patch preview" in fix and "+ config = GPT2Config(" in fix

        # export: x asks where (default next to the wasteful script), enter writes
        await pilot.press("x")
        await wait_for(pilot, lambda: type(app.screen).__name__ == "ExportScreen", 5, "ask")
        assert app.screen.query_one("#export-path").value == str(patch_file)
        await pilot.press("enter")
        await wait_for(pilot, lambda: app.screen is detail, 5, "the export to finish")
        assert "git apply --check passes" in flat(text_of(detail.query_one("#fix")))

    run_app(app, scenario)
    assert patch_file.exists()
    git(case, "apply", "--check", str(patch_file))
    assert 'activation_function="gelu_new"' in (case / "a.py").read_text()  # never applied


def test_energy_view_operator_table_and_folded_module_tree(gelu_db) -> None:
    _, db = gelu_db
    app = app_for(db)

    async def scenario(pilot) -> None:
        await pilot.press("v")  # highlighted run: a
        screen = app.screen
        assert isinstance(screen, EnergyScreen)
        table = screen.query_one("#op-table")
        await wait_for(pilot, lambda: table.row_count > 0, 30, "the operator table")
        names = [r[0] for r in cells(table)]
        assert "aten::addmm" in names and "aten::tanh" in names
        await pilot.press("m")
        await wait_for(
            pilot, lambda: "h.0.mlp.act" in [r[0] for r in cells(table)], 30, "by module"
        )
        await pilot.press("t")
        tree = screen.query_one("#module-tree")
        labels = [str(n.label) for n in tree.root.children]
        h = next(n for n in tree.root.children if str(n.label).startswith("h "))
        assert any(str(c.label).startswith("* ×4 GPT2Block") for c in h.children), labels
        await pilot.press("s")  # the other run... there is only one in this view
        await pilot.press("escape")
        assert isinstance(app.screen, RunsScreen)

    run_app(app, scenario)


# --------------------------------------------------------------------------------------
# Cypher console
# --------------------------------------------------------------------------------------


def _console_query(db: Path, text: str, check: Callable[[QueryScreen], None]) -> None:
    app = app_for(db)

    async def scenario(pilot) -> None:
        await pilot.press("c")
        screen = app.screen
        assert isinstance(screen, QueryScreen)
        inp = screen.query_one("#cypher")
        inp.value = text
        await pilot.press("enter")
        info = screen.query_one("#query-info")
        err = screen.query_one("#query-error")
        await wait_for(
            pilot, lambda: str(info.content) not in ("", "running…") or err.display, 30, "query"
        )
        check(screen)

    run_app(app, scenario)


def test_cypher_console_shows_rows(gelu_db) -> None:
    _, db = gelu_db

    def check(screen) -> None:
        table = screen.query_one("#query-result")
        assert [str(c.label) for c in table.ordered_columns] == ["r.name", "ops"]
        rows = cells(table)
        assert [r[0] for r in rows] == ["a", "b"] and all(int(r[1]) > 50 for r in rows)
        assert str(screen.query_one("#query-info").content) == "2 rows"

    _console_query(
        db,
        "MATCH (r:Run), (o:Operator) WHERE o.run = r.name "
        "RETURN r.name, count(o) AS ops ORDER BY r.name",
        check,
    )


def test_cypher_console_bad_query_error_inline(gelu_db) -> None:
    _, db = gelu_db

    def check(screen) -> None:
        err = screen.query_one("#query-error")
        assert err.display and str(err.content).startswith("query failed:")
        assert isinstance(screen, QueryScreen)  # still there, ready for the next query

    _console_query(db, "MATCH (r:Nope) RETURN r", check)


def test_cypher_console_refuses_writes(gelu_db) -> None:
    _, db = gelu_db

    def check(screen) -> None:
        err = screen.query_one("#query-error")
        assert err.display and "query refused: DETACH DELETE writes to the DB" in str(err.content)

    _console_query(db, "MATCH (r:Run) DETACH DELETE r", check)
    with open_db(db, read_only=True) as pdb:
        assert [r.name for r in pdb.list_runs()] == ["a", "b"]


# --------------------------------------------------------------------------------------
# Awkward DBs and names
# --------------------------------------------------------------------------------------


def test_empty_db_says_how_to_record(tmp_path) -> None:
    with open_db(tmp_path / "db"):
        pass  # a Magneton DB with the schema and no runs
    app = app_for(tmp_path / "db")

    async def scenario(pilot) -> None:
        help_text = str(app.screen.query_one("#runs-help").content)
        assert help_text.startswith("No runs in")
        assert "magneton record a.py --db" in help_text
        await pilot.press("enter", "v", "d")  # nothing to choose: no crash
        assert isinstance(app.screen, RunsScreen)
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("escape", "q")

    run_app(app, scenario)
    assert app.return_code in (0, None)


def test_missing_run_name_opens_picker_with_notice(gelu_db) -> None:
    _, db = gelu_db
    app = app_for(db, "a", "nope")

    async def scenario(pilot) -> None:
        screen = app.screen
        assert isinstance(screen, RunsScreen)
        notice = str(screen.query_one("#runs-notice").content)
        assert "no run 'nope'" in notice and "runs: a, b" in notice
        assert screen.side == {"a": "a", "b": None}
        await pilot.press("down", "b", "d")  # fix it by hand: B = b, diff
        await wait_for(pilot, lambda: isinstance(app.screen, FindingsScreen), 5, "findings")

    run_app(app, scenario)


def test_unopenable_dbs_one_line_error_and_exit_2(tmp_path, capsys) -> None:
    """Before the terminal is taken over: `magneton-tui: <one line>` on stderr, exit 2."""
    corrupt = tmp_path / "corrupt"
    corrupt.mkdir()
    (corrupt / "profile.lbug").write_bytes(bytes(range(256)) * 64)
    old = tmp_path / "old"
    with open_db(old) as pdb:
        pdb.query("MATCH (m:Meta {key: 'schema_version'}) SET m.value = '0'")
    for db, text in (
        (tmp_path / "none", "no Magneton DB at"),
        (corrupt, "not a LadybugDB database"),
        (old, "DB schema v0, this magneton needs v"),
    ):
        assert main(["--db", str(db), "a", "b"]) == 2
        out, err = capsys.readouterr()
        assert out == ""  # the UI never started
        assert err.startswith("magneton-tui: ") and text in err, err
        assert err.count("\n") == 1 and "Traceback" not in err


def test_main_rejects_bad_arguments_before_starting(gelu_db, capsys) -> None:
    _, db = gelu_db
    assert main(["--db", str(db), "a", "b", "c"]) == 2
    assert "at most two runs" in capsys.readouterr().err
    assert main(["--db", str(db), "--threshold", "0.01", "a", "b"]) == 2
    assert "--threshold must be between 0.05 and 1" in capsys.readouterr().err


# --------------------------------------------------------------------------------------
# Rendering pieces against the contract
# --------------------------------------------------------------------------------------


def test_divergence_elements_of_every_kind_render() -> None:
    assert str(element_text(PathElement("kernel", name="mkldnn_convolution"))) == (
        "kernel mkldnn_convolution"
    )
    assert str(element_text(PathElement("op", name="aten::gelu"))) == "aten op aten::gelu"
    args = element_text(
        PathElement("args", op="aten::layer_norm", kernel="k", diff={"input_contiguous": [False]})
    )
    assert str(args) == "aten::layer_norm (kernel k) with input_contiguous=[False]"
    assert "extra work" in str(element_text(PathElement("none")))
    f = Finding(
        1,
        "b",
        "waste",
        Region([0]),
        Region([0, 1]),
        1.0,
        0.5,
        0.0,
        ops_a=["aten::cat"],
        ops_b=["aten::cat", "aten::copy_"],
        category="redundant",
        divergence=Divergence.from_json(
            {
                "level": "kernel",
                "ops": {"a": 0, "b": 1},
                "a": {"kind": "none"},
                "b": {"kind": "kernel", "name": "copy_"},
                "site": {},
                "common_prefix": [{"kind": "op", "name": f"aten::x{i}"} for i in range(12)],
            }
        ),
    )
    console = Console(width=80, record=True, color_system=None, file=open(os.devnull, "w"))
    console.print(divergence_view(f, None, None, "a", "b"))
    out = console.export_text()
    assert "⋮ 4 more" in out and "aten op aten::x11" in out and "aten op aten::x3" not in out
    assert "▶ nothing here" in out and "▶ kernel copy_" in out


def test_ops_summary_folds_layers_and_drops_bookkeeping() -> None:
    unit = ["aten::view", "aten::mul", "aten::tanh"]
    assert ops_summary(unit * 4) == "mul tanh ×4"
    assert periodic_unit(["a", "b", "a"]) == (["a", "b", "a"], 1)
    assert ops_summary([f"aten::op{i}" for i in range(10)], limit=3) == "op0 op1 op2 …(+7)"


def test_power_sparkline_uses_only_the_regions_op_windows() -> None:
    from magneton.model import OpRecord, PowerSeries, Profile, RunInfo

    ops = [
        OpRecord(0, "aten::mul", start_ns=100, end_ns=200),
        OpRecord(1, "aten::add", start_ns=200, end_ns=900),
        OpRecord(2, "aten::mul", start_ns=900, end_ns=1000),
    ]
    series = PowerSeries(
        "gpu:0",
        "nvml",
        t_ns=list(range(0, 1100, 50)),
        watts=[100.0 if 200 < t < 900 else 10.0 for t in range(0, 1100, 50)],
    )
    p = Profile(RunInfo("r"), ops=ops, power=[series])
    (s,) = power_over(p, [0, 2])  # the two muls, not the add between them
    assert max(s.watts) == 10.0 and s.windows == 2 and not s.bracketing
    short = Profile(RunInfo("r"), ops=[OpRecord(0, "x", start_ns=510, end_ns=520)], power=[series])
    (b,) = power_over(short, [0])  # shorter than the sampling interval: its two neighbours
    assert b.bracketing and len(b.watts) == 2
    assert power_over(Profile(RunInfo("r"), ops=ops), [0]) == []  # no trace, no sparkline


def test_apply_check_in_a_repo_subfolder_is_real(tmp_path) -> None:
    """A patch relative to a sub-folder of a git repo: the check must really apply it
    (plain `git apply --check` there skips every path and passes vacuously)."""
    sub = tmp_path / "repo" / "case"
    sub.mkdir(parents=True)
    (sub / "a.py").write_text("x = 1\n")
    git(tmp_path / "repo", "init", "-q")
    patch = tmp_path / "fix.patch"
    patch.write_text(
        "diff --git a/a.py b/a.py\n--- a/a.py\n+++ b/a.py\n@@ -1 +1 @@\n-x = 1\n+x = 2\n"
    )
    ok = check_applies(patch, sub)
    assert ok.ok is True and "--directory=case" in ok.command
    (sub / "a.py").write_text("x = 3\n")  # edited since the recording
    stale = check_applies(patch, sub)
    assert stale.ok is False and "does not apply" in stale.message
    assert check_applies(patch, tmp_path / "gone").ok is None


def test_findings_screen_from_a_contract_result_without_a_db_diff(gelu_db) -> None:
    """A cached result is shown without starting the diff process (revisits are instant)."""
    _, db = gelu_db
    store = Store(db)
    runs = store.check()
    f = Finding(
        7,
        "b",
        "trade-off",
        Region([1], energy_j=1.0, time_s=0.001),
        Region([2, 3], energy_j=3.0, time_s=0.0009),
        2.0,
        0.2,
        0.05,
        ops_a=["aten::gelu"],
        ops_b=["aten::mul", "aten::tanh"],
    )
    result = DiffResult(
        RunSummary("a", 10, 1, "nvml:0", "measured"),
        RunSummary("b", 12, 1, "rapl:package-0", "solved"),
        [f],
        12,
    )
    store.remember_diff("a", "b", result)
    app = MagnetonApp(store, runs, "a", "b")

    async def scenario(pilot) -> None:
        screen = app.screen
        assert screen.job is None and screen.result is result
        row = cells(screen.query_one("#findings"))[0]
        assert row[0] == "7" and row[2] == "trade-off" and row[9] == "3.00×"
        header = text_of(screen.query_one("#energy-header"))
        assert "measured by nvml:0" in header
        assert "solved by least squares from rapl:package-0" in header
        await pilot.press("x")  # no patch yet: a warning, not a crash
        assert isinstance(app.screen, FindingsScreen)

    run_app(app, scenario)


def test_noise_findings_are_listed_last_and_the_selection_follows_its_finding(gelu_db) -> None:
    _, db = gelu_db
    store = Store(db)

    def finding(fid: int, verdict: str, saving_j: float) -> Finding:
        return Finding(
            fid,
            "a",
            verdict,
            Region([fid], energy_j=1.0 + saving_j, time_s=0.001),
            Region([fid], energy_j=1.0, time_s=0.001),
            saving_j,
            saving_j / 10,
            0.0,
            ops_a=["aten::addmm"],
            ops_b=["aten::addmm"],
        )

    # ids rank by saving; the largest one here is a timing blip on identical code
    result = DiffResult(
        RunSummary("a", 10, 1, "model:cpu-default", "estimated"),
        RunSummary("b", 9, 1, "model:cpu-default", "estimated"),
        [finding(1, "noise", 3.0), finding(2, "waste", 2.0), finding(3, "noise", 1.0)],
        5,
    )
    store.remember_diff("a", "b", result)
    app = MagnetonApp(store, store.check(), "a", "b")

    async def scenario(pilot) -> None:
        screen = app.screen
        table = screen.query_one("#findings")
        assert [r[0] for r in cells(table)] == ["2", "1", "3"]
        assert "2 judged noise" in str(screen.query_one("#findings-msg").content)
        undiagnosed = replace(
            result, findings=[replace(f, verdict="waste") for f in result.findings]
        )

        def selected() -> str:
            return table.coordinate_to_cell_key((table.cursor_row, 0)).row_key.value

        # before diagnosis nothing is noise yet: id order, and the selection (#2) follows
        screen.show_result(undiagnosed)
        assert [r[0] for r in cells(table)] == ["1", "2", "3"]
        assert selected() == "2" and table.cursor_row == 1
        await pilot.press("up")  # the user picks #1
        # diagnosis lands and re-sorts: the cursor stays on #1, now row 1, not on row 0
        screen.show_result(result)
        assert selected() == "1" and table.cursor_row == 1

    run_app(app, scenario)


def test_no_findings_shows_the_reason(gelu_db) -> None:
    _, db = gelu_db
    store = Store(db)
    msg = "the two runs were given different inputs: record both with the same inputs"
    empty = DiffResult(
        RunSummary("a", 1, 1, "model:cpu-default", "estimated"),
        RunSummary("b", 1, 1, "model:cpu-default", "estimated"),
        message=msg,
    )
    store.remember_diff("a", "b", empty)
    app = MagnetonApp(store, store.check(), "a", "b")

    async def scenario(pilot) -> None:
        note = str(app.screen.query_one("#findings-msg").content)
        assert note == f"No findings: {msg}"
        await pilot.press("enter", "x")  # nothing to open or export: no crash
        assert isinstance(app.screen, FindingsScreen)

    run_app(app, scenario)


def test_diagnosis_crash_keeps_the_findings(gelu_db) -> None:
    """The diagnosis child dying (a native crash, the OOM killer) must not take the
    findings or the UI with it: they stay, with one line saying what happened."""
    import signal

    _, db = gelu_db
    app = app_for(db, "a", "b", diagnose=True)

    async def scenario(pilot) -> None:
        screen = app.screen
        await wait_for(pilot, lambda: screen.result is not None, 90, "the diff")
        assert screen.diagnosing and screen.job.pid
        os.kill(screen.job.pid, signal.SIGKILL)
        await wait_for(pilot, lambda: not screen.diagnosing, 30, "the crash to be noticed")
        msg = str(screen.query_one("#findings-msg").content)
        assert msg.startswith("diagnosis failed: the diff/diagnosis process stopped")
        assert "(the findings stand)" in msg
        assert cells(screen.query_one("#findings"))[0][0] == "1"  # still listed
        # no cause: the cell says the diagnosis failed, not "diagnosing…" or "-"
        assert cells(screen.query_one("#findings"))[0][3] == "failed"
        await pilot.press("enter")  # and still usable
        assert isinstance(app.screen, FindingScreen)

    run_app(app, scenario)


def _finding(fid: int, **kw) -> Finding:
    """A finding of the GELU pair's runs `a` and `b`: A's tanh against B's gelu."""
    return Finding(
        fid, "a", "waste", Region([1], energy_j=2.0, time_s=0.002),
        Region([2], energy_j=1.0, time_s=0.001), 1.0, 0.1, 0.0,
        ops_a=["aten::tanh"], ops_b=["aten::gelu"], **kw,
    )  # fmt: skip


def _pair_diff(findings: list[Finding]) -> DiffResult:
    return DiffResult(
        RunSummary("a", 10, 1, "model:cpu-default", "estimated"),
        RunSummary("b", 9, 1, "model:cpu-default", "estimated"),
        findings,
        5,
    )  # fmt: skip


def test_finding_screen_shows_the_interval_and_whether_it_was_confirmed(gelu_db) -> None:
    """The finding screen says how sure the finding is: the saving's 95% interval, and
    whether interleaved re-measurement confirmed it (or why not)."""
    from magneton.model import SavingInterval

    _, db = gelu_db
    store = Store(db)

    sure = SavingInterval(
        2.0, 1.6, 2.4, 0.75, 1.1, 0.95, 7, 7, test="paired t", confirmed=True, rounds=7
    )
    unsure = SavingInterval(
        1.5, 1.2, 1.9, 0.4, 0.9, 0.95, 30, 30, unconfirmed="re-measurement disabled (--no-rerun)"
    )
    result = _pair_diff([_finding(1, interval=sure), _finding(2, interval=unsure)])
    store.remember_diff("a", "b", result)
    app = MagnetonApp(store, store.check(), "a", "b")

    async def scenario(pilot) -> None:
        await pilot.press("enter")
        assert isinstance(app.screen, FindingScreen) and app.screen.finding.id == 1
        # the two-line header says it short; the Root cause tab opens with the long form
        text = flat(text_of(app.screen.query_one("#finding-summary")))
        assert "95%: 750 mJ to 1.1 J/call, 1.60–2.40×" in text
        assert "confirmed in 7 rounds" in text
        details = flat(text_of(app.screen.query_one("#rootcause")))
        assert "confirmed: 7 interleaved rounds per side (paired t)" in details
        await pilot.press("escape", "down", "enter")
        assert app.screen.finding.id == 2
        text = flat(text_of(app.screen.query_one("#finding-summary")))
        assert text.endswith("unconfirmed")
        details = flat(text_of(app.screen.query_one("#rootcause")))
        assert "unconfirmed (re-measurement disabled (--no-rerun))" in details

    run_app(app, scenario)


def test_a_diff_that_ends_as_a_finding_opens_updates_it_once_it_is_shown(gelu_db) -> None:
    """The diff's last event (the child's "done") re-shows the findings and updates an
    open finding screen. When it came in the moment a finding was opened, before the
    screen had built its widgets, the update failed to find them and the TUI crashed
    (`NoMatches: #side-a-title`); the screen now shows the update when it is built."""
    _, db = gelu_db
    store = Store(db)
    first = _finding(1)
    result = _pair_diff([first])
    store.remember_diff("a", "b", result)
    app = MagnetonApp(store, store.check(), "a", "b")

    async def scenario(pilot) -> None:
        findings = app.screen
        assert isinstance(findings, FindingsScreen)
        later = dataclasses.replace(first, ops_a=["aten::tanh", "aten::mul"])
        findings.action_open()  # pushed, not yet built
        findings.show_result(dataclasses.replace(result, findings=[later]))
        await pilot.pause()
        detail = app.screen
        assert isinstance(detail, FindingScreen) and detail.finding is later
        title = flat(text_of(detail.query_one("#side-a-title")))
        assert title.startswith("A a ") and title.endswith("wasteful")

    run_app(app, scenario)
