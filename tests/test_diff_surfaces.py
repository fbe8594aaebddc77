"""One diff, stored once, shown alike by every surface, on a real-size pair.

For one BERT eager-vs-sdpa pair the CLI once showed one cause row (5.2%), `diff --html`
two findings with the same patch (4.29% + 0.70%, from a second, re-measured diff) and
the TUI a third pair of numbers (its own diff). Here the pair is BERT-base's real
structure (12 layers, hidden 768: long operator names, a cause in two regions of every
layer; tests/workloads/bert_attn, one short sequence so it records in seconds), diffed
once by `magneton diff`; then the table, `--json`, `--csv`, `--html`, `export-patch` and
the TUI must show the same causes, figures and patch, and none may make a diff of its
own (the stored diff's creation time stays the same).

The TUI is also driven in a real tmux pane at 80×24 on that pair: the cause's verdict,
saving and cause read on screen without scrolling right, the finding's header is whole,
and the patch preview shows its changed lines first.

Recorded once per session in this process with FLOPs-and-bytes pricing (energies that do
not depend on the load of a shared CI box) and diffed with `--no-rerun` (no
re-measurement, a static diagnosis): the test is about what the surfaces show, not about
measuring.
"""

from __future__ import annotations

import contextlib
import csv
import html
import io
import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from tui_support import SIZE, cells, flat, run_app, text_of, wait_for

from magneton.cli import main as cli
from magneton.graphdb import load_diff, open_db
from magneton.render.view import DiffView, changed_lines, diff_view, share_text
from magneton.tui.app import MagnetonApp
from magneton.tui.data import Store
from magneton.tui.screens import FindingScreen, FindingsScreen

PAIR = Path(__file__).parent / "workloads" / "bert_attn"
# the recording costs 50-90 s of a shared 2-core box; the tests then take 10-20 s each
pytestmark = pytest.mark.slow


@pytest.fixture(scope="session")
def bert_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Runs 'eager' and 'sdpa' of the BERT pair, and their diff stored by `magneton diff`."""
    from magneton.tracer.programs.record import RecordOptions, record_script

    db = tmp_path_factory.mktemp("surfaces") / "db"
    opts = RecordOptions(warmup=1, repeat=2, power="model:work-only", adaptive=False)
    for side, run in (("a", "eager"), ("b", "sdpa")):
        record_script(PAIR / f"{side}.py", db=str(db), run=run, options=opts)
    rc, _, err = magneton("diff", "--db", str(db), "eager", "sdpa", "--no-rerun")
    assert rc == 0, err
    return db


def magneton(*argv: str) -> tuple[int, str, str]:
    """`magneton ARGV` in this process (a subprocess would import torch again)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = cli(list(argv))
    return rc, out.getvalue(), err.getvalue()


def stored(db: Path) -> tuple[DiffView, str]:
    """The stored diff's view and when it was made (a new diff would change it)."""
    with open_db(db, read_only=True) as pdb:
        loaded = load_diff(pdb, "eager", "sdpa")
        made = pdb.query("MATCH (d:Diff) RETURN d.created_at").rows[0][0]
    assert loaded is not None
    return diff_view(loaded[0]), made


def test_every_surface_shows_the_stored_diff(bert_db: Path, tmp_path: Path) -> None:
    view, made = stored(bert_db)
    rows = view.real
    # the pair's cause: eager attention, found in more than one region of each layer
    assert rows and rows[0].cause == "misconfiguration" and len(rows[0].ids) >= 2
    lead = rows[0]
    assert lead.patch and 'attn_implementation="sdpa"' in lead.patch
    args = ("diff", "--db", str(bert_db), "eager", "sdpa", "--no-rerun")

    # the table: one row per cause, its ids, share of the run and cause
    rc, text, err = magneton(*args)
    assert rc == 0 and "the stored diff of 'eager' and 'sdpa'" in err, err
    assert f"{len(rows)} finding(s) among" in text
    assert lead.ids_text() in text and lead.share_of() in text
    assert f"#{','.join(map(str, lead.ids))} misconfiguration:" in text

    # JSON: the same groups, figures and patch
    rc, out, _ = magneton(*args, "--json")
    doc = json.loads(out)
    real = [g for g in doc["groups"] if g["verdict"] != "noise"]
    assert [g["finding_ids"] for g in real] == [r.ids for r in rows]
    assert [share_text(g["saving_share"]) for g in real] == [
        share_text(r.saving_share) for r in rows
    ]
    assert [g["cause"] for g in real] == [r.cause for r in rows]
    by_id = {f["id"]: f for f in doc["findings"]}
    assert by_id[lead.lead.id]["fix"]["patch"] == lead.patch

    # CSV: every finding names its cause's lead
    rc, out, _ = magneton(*args, "--csv")
    leads = {int(r["id"]): int(r["cause_group"]) for r in csv.DictReader(io.StringIO(out))}
    assert all(leads[i] == lead.lead.id for i in lead.ids)

    # HTML: one row and one section per cause, the patch once
    page = tmp_path / "diff.html"
    rc, _, err = magneton(*args, "--html", str(page))
    assert rc == 0, err
    doc_html = page.read_text(encoding="utf-8")
    table = doc_html.split("<table id=findings>")[1].split("</table>")[0]
    assert table.count("<tr>") == 1 + len(view.rows)
    assert f"#{','.join(map(str, lead.ids))}</a>" in table
    assert f"<td class=num>{share_text(lead.saving_share)}</td>" in table
    patches = re.findall(r'<pre class="patch">(.*?)</pre>', doc_html, flags=re.S)
    assert [html.unescape(p) for p in patches] == [r.patch for r in rows if r.patch]

    # export-patch: the stored patch of the lead finding
    rc, out, err = magneton("export-patch", "--db", str(bert_db), "eager", "sdpa",
                            "--finding", str(lead.lead.id))  # fmt: skip
    assert rc == 0 and out == lead.patch, err

    # the TUI: the stored diff, no job of its own, the same rows
    store = Store(bert_db)
    app = MagnetonApp(store, store.check(), "eager", "sdpa", diagnose=True)

    async def scenario(pilot) -> None:
        screen = app.screen
        assert isinstance(screen, FindingsScreen)
        await wait_for(pilot, lambda: screen.result is not None, 30, "the stored diff")
        assert screen.job is None and screen.stored
        shown = cells(screen.query_one("#findings"))
        assert [r[0] for r in shown] == [r.ids_text() for r in view.rows]
        first = shown[0]
        assert first[1].split()[0] == share_text(lead.saving_share)
        assert first[2] == lead.verdict and first[3] == lead.cause
        await pilot.press("enter", "f")
        detail = app.screen
        assert isinstance(detail, FindingScreen) and detail.finding.id == lead.lead.id
        fix = flat(text_of(detail.query_one("#fix")))
        assert all(flat(line) in fix for line in changed_lines(lead.patch))

    run_app(app, scenario)
    # nothing above made a diff of its own
    assert stored(bert_db)[1] == made


# --------------------------------------------------------------------------------------
# The TUI in a real terminal at 80×24
# --------------------------------------------------------------------------------------

SOCKET = f"magneton-surfaces-{os.getpid()}"


def _tmux(*args: str) -> str:
    return subprocess.run(
        ["tmux", "-L", SOCKET, "-f", os.devnull, *args],
        capture_output=True,
        text=True,
        check=True,
        timeout=10,
    ).stdout


def _screen_until(session: str, cond, what: str, timeout: float = 30.0) -> list[str]:
    deadline = time.monotonic() + timeout
    while True:
        lines = _tmux("capture-pane", "-p", "-t", session).splitlines()
        if cond(lines):
            return lines
        if time.monotonic() > deadline:
            raise AssertionError(f"no {what} within {timeout:.0f} s:\n" + "\n".join(lines))
        time.sleep(0.3)


@pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")
def test_bert_findings_fit_80x24_in_tmux(bert_db: Path, tmp_path: Path) -> None:
    view, _ = stored(bert_db)
    lead = view.real[0]
    exe = shutil.which("magneton-tui")
    assert exe, "the magneton-tui console script is not installed (pip install -e .)"
    status = tmp_path / "status"
    width, height = SIZE
    cmd = f"env -u COLUMNS -u LINES {exe} --db {bert_db} eager sdpa; echo $? > {status}"
    session = "surfaces"
    _tmux("new-session", "-d", "-s", session, "-x", str(width), "-y", str(height), cmd)
    try:
        # the cause's row: its ids, saving, verdict and cause, all on screen
        row_of = lambda lines: next(  # noqa: E731
            (x for x in lines if x.lstrip().startswith(lead.ids_text() + " ")), ""
        )
        lines = _screen_until(session, row_of, "findings row")
        row = row_of(lines)
        assert share_text(lead.saving_share) in row and lead.verdict in row, row
        assert f" {lead.cause} " in row, row  # whole, not cut ("misconfigur…")
        assert "Traceback" not in "\n".join(lines)

        # the finding: its two header lines whole, then the patch's changed lines first
        _tmux("send-keys", "-t", session, "Enter")
        is_head = lambda x: x.lstrip().startswith(f"#{lead.ids_text()} ")  # noqa: E731
        lines = _screen_until(session, lambda ls: any(map(is_head, ls)), "finding")
        head = [x for x in lines if is_head(x)]
        assert head and "misconfiguration" in head[0] and "…" not in head[0], lines[:4]
        sure = lines[lines.index(head[0]) + 1]
        assert re.search(r"(unconfirmed|confirmed in \d+ rounds)( ·|$)", sure.rstrip()), sure
        _tmux("send-keys", "-t", session, "f")
        lines = _screen_until(session, lambda ls: any("Patch preview" in x for x in ls), "patch")
        at = next(i for i, x in enumerate(lines) if "Patch preview" in x)
        change = changed_lines(lead.patch)
        # a vertical scrollbar, when the pane scrolls, ends a line in its glyphs
        shown = [
            x.rstrip().rstrip("▁▂▃▄▅▆▇█▔▕▏ ").strip() for x in lines[at + 1 : at + 1 + len(change)]
        ]
        assert [flat(x) for x in shown] == [flat(x) for x in change], lines
        _tmux("send-keys", "-t", session, "q")
        deadline = time.monotonic() + 10
        while not status.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert status.exists() and status.read_text().strip() == "0"
    finally:
        subprocess.run(["tmux", "-L", SOCKET, "kill-server"], capture_output=True, timeout=10)
