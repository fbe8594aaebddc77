"""Interpreter time end to end: a script that builds an attention mask in a Python loop
against a copy that builds it with two tensor ops, recorded and diffed through the CLI as
a user does, and shown in the TUI. The Python loop is a finding of its own that names the
function and line; recorded twice, the same script gives no interpreter finding."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json

import pytest
from rich.console import Console

from magneton.cli import main as cli
from magneton.tui.app import MagnetonApp
from magneton.tui.data import Store
from magneton.tui.screens import EnergyScreen, FindingScreen, FindingsScreen

SCRIPT_A = """import torch

N = 96


def setup():
    g = torch.Generator().manual_seed(0)
    return torch.randn(N, 64, generator=g), torch.randn(64, 64, generator=g) / 8


def mask_loop(n):
    rows = [[0.0 if j <= i else -1e4 for j in range(n)] for i in range(n)]
    return torch.tensor(rows)


def main(x, w):
    h = x @ w
    s = h @ h.T / 8 + mask_loop(N)
    return s.softmax(-1) @ h
"""

SCRIPT_B = (
    SCRIPT_A.replace("def mask_loop(n):", "def mask_vectorized(n):")
    .replace(
        "    rows = [[0.0 if j <= i else -1e4 for j in range(n)] for i in range(n)]\n"
        "    return torch.tensor(rows)\n",
        "    return torch.full((n, n), -1e4).triu(1)\n",
    )
    .replace("mask_loop(N)", "mask_vectorized(N)")
)

LOOP_LINE = SCRIPT_A.splitlines().index("    return torch.tensor(rows)") + 1


def run(*argv: str, code: int = 0) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert cli(list(argv)) == code
    return out.getvalue()


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    d = tmp_path_factory.mktemp("interp")
    (d / "a.py").write_text(SCRIPT_A)
    (d / "b.py").write_text(SCRIPT_B)
    for name, script in (("a", "a.py"), ("a2", "a.py"), ("b", "b.py")):
        run(
            "record",
            str(d / script),
            "--db",
            str(d / "db"),
            "--run",
            name,
            "--power",
            "model",
            "--repeat",
            "10",
        )
    return d / "db"


@pytest.fixture(scope="module")
def diff_ab(db) -> dict:
    return json.loads(run("diff", "--db", str(db), "a", "b", "--no-rerun", "--json"))


def interpreter(res: dict) -> list[dict]:
    return [f for f in res["findings"] if f["kind"] == "interpreter"]


def test_python_loop_is_a_finding_that_names_its_line(diff_ab):
    res = diff_ab
    found = interpreter(res)
    assert len(found) == 1, found
    f = found[0]
    assert f["wasteful"] == "a" and f["verdict"] == "waste"
    assert f["frames"]["a"][0] == f"a.py:{LOOP_LINE} mask_loop"
    assert any("mask_vectorized" in fr for fr in f["frames"]["b"])
    assert f["energy_j"]["a"] > 2 * f["energy_j"]["b"]
    assert f["interval"]["saving_j_low"] > 0
    assert f["fix"]["patch"] is None and "none mechanical" in f["fix"]["summary"]
    # its own cause: a group of one
    assert [f["id"]] in [g["finding_ids"] for g in res["groups"]]
    # and the mask's operators are not charged the loop: no region finding holds it
    for g in res["findings"]:
        if g["kind"] == "region":
            assert g["saving_j"] < f["saving_j"] / 2, g


def test_diff_table_labels_interpreter_rows(db, monkeypatch):
    monkeypatch.setenv("COLUMNS", "240")  # one line per row: the label is not wrapped
    text = run("diff", "--db", str(db), "a", "b", "--no-rerun")
    assert f"python: a.py:{LOOP_LINE}" in text  # the table cell
    line = next(ln for ln in text.splitlines() if "interpreter time:" in ln)
    assert "the Python in main in the script (a.py, b.py)" in line
    assert f"in 'a' (a.py:{LOOP_LINE} mask_loop" in line and "mask_vectorized" in line


def test_interpreter_finding_has_no_patch_to_export(db, diff_ab, tmp_path, capsys):
    fid = interpreter(diff_ab)[0]["id"]
    out = tmp_path / "fix.patch"
    run("export-patch", "--db", str(db), "a", "b", "--finding", str(fid), "-o", str(out), code=1)
    assert "none mechanical" in capsys.readouterr().err
    assert not out.exists()


def test_same_script_twice_gives_no_interpreter_finding(db):
    res = json.loads(run("diff", "--db", str(db), "a", "a2", "--no-rerun", "--json"))
    assert res["matched_pairs"] > 0
    assert interpreter(res) == [], interpreter(res)


def test_report_shows_the_loop_as_a_python_row(db):
    rep = json.loads(run("report", "--db", str(db), "a", "--json"))
    py = [o for o in rep["operators"] if o["kind"] == "python"]
    assert py[0]["name"] == f"python: a.py:{LOOP_LINE} mask_loop", py


def rendered(renderable) -> str:
    console = Console(width=200, record=True, color_system=None, file=io.StringIO())
    console.print(renderable)
    return " ".join(console.export_text().split())


def test_tui_lists_the_interpreter_finding_and_the_python_rows(db):
    store = Store(db)
    app = MagnetonApp(store, store.check(), "a", "b", diagnose=False)

    async def scenario(pilot) -> None:
        screen = app.screen
        assert isinstance(screen, FindingsScreen)
        table = screen.query_one("#findings")

        def rows() -> list[list[str]]:
            return [[str(c) for c in table.get_row_at(i)] for i in range(table.row_count)]

        for _ in range(1200):  # the diff runs in a child process
            if table.row_count:
                break
            await pilot.pause(0.1)
        py = [k for k, r in enumerate(rows()) if r[3] == "python"]  # the kind column
        assert len(py) == 1, rows()
        # the regions column: the wasteful side marked, then the loop's line
        assert f"A python: a.py:{LOOP_LINE} mask_loop" in rows()[py[0]][4], rows()
        table.move_cursor(row=py[0])
        await pilot.press("enter")  # its detail: what ran, and why there is no patch
        detail = app.screen
        assert isinstance(detail, FindingScreen)
        summary = " ".join(str(detail.query_one("#finding-summary").content).split())
        assert "python between ops" in summary  # the two-line header; details in tab 3
        cause = rendered(detail.query_one("#rootcause").content)
        flat_cause = " ".join(cause.split())
        assert f"interpreter time between operators, a: python: a.py:{LOOP_LINE}" in flat_cause
        assert "mask_vectorized" in cause, cause
        await pilot.press("escape")
        assert app.screen is screen
        await pilot.press("v")
        energy = app.screen
        assert isinstance(energy, EnergyScreen)
        ops = energy.query_one("#op-table")
        for _ in range(600):
            if ops.row_count:
                break
            await pilot.pause(0.1)
        names = [str(ops.get_row_at(i)[0]) for i in range(ops.row_count)]
        assert names[0] == f"python: a.py:{LOOP_LINE} mask_loop", names
        header = str(energy.query_one("#energy-run").content)
        assert "interpreter time between operators" in header

    async def go() -> None:
        async with app.run_test(size=(120, 30)) as pilot:
            await scenario(pilot)

    asyncio.run(go())
