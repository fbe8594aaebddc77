"""Output for the tools people use beside Magneton, driven through the CLI: CSV of `diff`
and `runs` (spreadsheets, pandas), folded stacks of any run (flamegraph.pl, speedscope),
`diff --html` (one self-contained page), and `diff`'s progress line, which appears on a
terminal and never in a pipe or a log."""

from __future__ import annotations

import csv
import html
import io
import json
import os
import pty
import re
import subprocess
import sys
import threading
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path

import pytest
import warm_cli
from recordings import copy_db

from magneton.commands.diff import CSV_COLUMNS

SVG = "{http://www.w3.org/2000/svg}"


def magneton(*argv: str, stderr_tty: bool = False) -> tuple[int, str, str]:
    """Run `magneton`; with `stderr_tty` its stderr is a pseudo-terminal (read while it
    runs: a full pty buffer would block the child)."""
    cmd = [sys.executable, "-m", "magneton", *argv]
    if not stderr_tty:
        r = warm_cli.run(argv, timeout=600)
        return r.returncode, r.stdout, r.stderr
    master, slave = pty.openpty()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=slave, text=True)
    os.close(slave)
    buf = bytearray()

    def pump() -> None:
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                return
            if not chunk:
                return
            buf.extend(chunk)

    t = threading.Thread(target=pump, daemon=True)
    t.start()
    out = p.stdout.read() if p.stdout else ""
    p.wait(timeout=600)
    t.join(10)
    os.close(master)
    return p.returncode, out, buf.decode(errors="replace")


@pytest.fixture(scope="module")
def db(gpt2_db: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return copy_db(gpt2_db, tmp_path_factory.mktemp("outputs") / "db")


def test_diff_csv_has_one_row_per_finding_with_full_names(db: Path) -> None:
    args = ("diff", "--db", str(db), "gelu_new", "gelu_fused", "--no-rerun")
    rc, out, err = magneton(*args, "--json")
    assert rc == 0, err
    res = json.loads(out)
    findings = res["findings"]
    assert findings
    rc, out, err = magneton(*args, "--csv")
    assert rc == 0, err
    rows = list(csv.DictReader(io.StringIO(out)))
    assert tuple(rows[0].keys()) == CSV_COLUMNS
    # the findings, then those diagnosis dismissed as noise (whether a recording has
    # any depends on its noise), as `--json` lists them
    assert [int(r["id"]) for r in rows] == [f["id"] for f in findings + res["dismissed"]]
    assert [r["verdict"] for r in rows[len(findings) :]] == ["noise"] * len(res["dismissed"])
    first, f = rows[0], findings[0]
    assert first["verdict"] == f["verdict"] and first["wasteful"] == f["wasteful"]
    assert float(first["saving_j"]) == pytest.approx(f["saving_j"], rel=1e-5)
    assert first["ops_a"].split(" ") == f["ops"]["a"]  # full names, `aten::` kept
    # a run with itself: the header, and the one line on stderr
    rc, out, err = magneton("diff", "--db", str(db), "gelu_new", "gelu_new", "--csv")
    assert rc == 0 and out.strip() == ",".join(CSV_COLUMNS) and "with itself" in err


def test_runs_csv_lists_every_run(db: Path) -> None:
    rc, out, err = magneton("runs", "--db", str(db), "--csv")
    assert rc == 0, err
    rows = list(csv.DictReader(io.StringIO(out)))
    assert {r["name"] for r in rows} == {"gelu_new", "gelu_fused"}
    rc, js, _ = magneton("runs", "--db", str(db), "--json")
    by_name = {r["name"]: r for r in json.loads(js)}
    for r in rows:
        assert float(r["energy_j"]) == pytest.approx(by_name[r["name"]]["energy_j"])
        assert r["status"] == "ok" and int(r["iterations"]) >= 2


def test_folded_stacks_add_up_to_the_run_and_name_frames_ops_and_python(
    db: Path, tmp_path: Path
) -> None:
    out = tmp_path / "gelu_new.folded"
    rc, text, err = magneton(
        "export-trace", "--db", str(db), "gelu_new", "-o", str(out), "--folded"
    )
    assert rc == 0, err
    lines = out.read_text().splitlines()
    assert lines
    total = 0
    for line in lines:
        stack, value = line.rsplit(" ", 1)
        assert value.isdigit() and int(value) > 0, line  # integer µJ, as the format wants
        total += int(value)
        frames = stack.split(";")
        assert all(frames), line
    rc, js, _ = magneton("report", "--db", str(db), "gelu_new", "--json")
    energy_uj = json.loads(js)["energy_j"] * 1e6
    assert total == pytest.approx(energy_uj, abs=len(lines))  # rounding, one µJ a line
    leaves = {line.rsplit(" ", 1)[0].split(";")[-1] for line in lines}
    assert "aten::tanh" in leaves and "[python]" in leaves  # gelu_new's chain, its Python
    assert any(line.startswith("main (gpt2_small.py:") for line in lines)
    assert "stacks" in text


def test_diff_progress_only_on_a_terminal(db: Path) -> None:
    # --rerun: the diff is made (not read from the store), so there is progress to show
    args = ("diff", "--db", str(db), "gelu_new", "gelu_fused", "--no-rerun", "--rerun")
    rc, out_tty, err_tty = magneton(*args, stderr_tty=True)
    assert rc == 0, err_tty
    assert "loading the runs" in err_tty or "matching regions" in err_tty
    rc, out_pipe, err_pipe = magneton(*args)
    assert rc == 0 and "loading the runs" not in err_pipe and "matching" not in err_pipe
    assert "\x1b[" not in out_tty  # stdout (piped) gets the table only, no progress


class _Page(HTMLParser):
    """What a browser would fetch and what the page shows, read with the stdlib parser
    (no headless browser here: playwright/Chromium are not installed offline)."""

    def __init__(self) -> None:
        super().__init__()
        self.fetches: list[str] = []  # every URL an element would load
        self.tags: list[str] = []
        self.sections: dict[str, list[str]] = {}  # finding section id -> svg classes in it
        self.rows = 0
        self.text: list[str] = []
        self._section = ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        self.tags.append(tag)
        for key in ("src", "href", "xlink:href", "data"):
            v = a.get(key) or ""
            if v and not v.startswith("#"):
                self.fetches.append(v)
        if tag in ("script", "link", "iframe", "img", "object", "embed"):
            self.fetches.append(f"<{tag}>")
        if tag == "section":
            self._section = a.get("id") or ""
            self.sections[self._section] = []
        if tag == "svg" and self._section:
            self.sections[self._section].append(a.get("class") or "")
        if tag == "tr":
            self.rows += 1

    def handle_endtag(self, tag: str) -> None:
        if tag == "section":
            self._section = ""

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def test_diff_html_is_one_self_contained_page_of_the_diff(db: Path, tmp_path: Path) -> None:
    page = tmp_path / "diff.html"
    args = ("diff", "--db", str(db), "gelu_new", "gelu_fused", "--no-rerun")
    rc, out, err = magneton(*args, "--json", "--html", str(page))
    assert rc == 0, err
    doc = json.loads(out)  # stdout stays the JSON contract
    findings = [f for f in doc["findings"] if f["verdict"] != "noise"]
    assert findings
    text = page.read_text(encoding="utf-8")
    p = _Page()
    p.feed(text)
    # self-contained: nothing is fetched (no CDN script, style sheet, font or image)
    assert p.fetches == [], p.fetches
    assert text.startswith("<!DOCTYPE html>") and "<style>" in text
    # the findings table: a header and one row per cause, as `diff` prints them
    assert p.rows == 1 + len(doc["groups"])
    # each shown cause: its lead finding's two icicles side by side, its cause (the
    # largest cause first; its lead need not be the lowest-numbered finding)
    lead_id = next(g["finding_ids"][0] for g in doc["groups"] if g["verdict"] != "noise")
    top = next(f for f in findings if f["id"] == lead_id)
    assert p.sections[f"f{top['id']}"] == ["icicle", "icicle"]
    body = " ".join(p.text)
    assert "Root cause" in body and "Power timeline" in body
    if top.get("fix") and top["fix"].get("patch"):
        assert html.escape(top["fix"]["patch"].splitlines()[0]) in text
    # every SVG is well-formed XML, and both sides of a finding share one joule scale:
    # the wasteful side's region box spans the full width, the other side's less
    svgs = [ET.fromstring(m) for m in re.findall(r"<svg .*?</svg>", text, flags=re.S)]
    icicles = [s for s in svgs if s.get("class") == "icicle"]
    power = [s for s in svgs if s.get("class") == "power"]
    assert len(power) == 2 and all(s.find(f"{SVG}polyline") is not None for s in power)
    a_side, b_side = icicles[0], icicles[1]
    width = {s: float(s.find(f"{SVG}g/{SVG}rect").get("width")) for s in (a_side, b_side)}
    wasteful, lean = (a_side, b_side) if top["wasteful"] == "a" else (b_side, a_side)
    assert width[wasteful] == pytest.approx(float(wasteful.get("width")), abs=0.1)
    assert width[lean] < width[wasteful]
    # the boxes name modules of the region (hover titles carry the full path and joules)
    titles = [t.text or "" for t in wasteful.iter(f"{SVG}title")]
    assert any("mlp" in t and "J" in t for t in titles), titles[:5]
    # an unwritable path is one line and a non-zero exit
    rc, out, err = magneton(*args, "--html", str(tmp_path / "no" / "such" / "dir.html"))
    assert rc != 0 and len(err.strip().splitlines()) == 1 and "cannot write" in err


def test_job_diff_page_draws_each_finding_from_its_rank_pair() -> None:
    """A job diff has no profile per side: a finding's icicles come from the rank runs
    its `job` names, and text from a trace (C++ templates) is escaped."""
    from magneton.model import (
        DiffResult,
        Finding,
        Fix,
        JobInfo,
        OpRecord,
        Profile,
        Region,
        RunInfo,
        RunSummary,
    )
    from magneton.render.html import diff_html

    def rank(name: str, joules: float) -> Profile:
        ops = [
            OpRecord(0, "void gemm<float, 128>(T*)", module="layer.mlp", energy_j=joules),
            OpRecord(1, "aten::add", module="layer.out", energy_j=0.1),
        ]
        return Profile(run=RunInfo(name=name), ops=ops)

    pa, pb = rank("ja/rank1", 0.9), rank("jb/rank1", 0.3)
    f = Finding(
        id=1,
        wasteful="a",
        verdict="waste",
        region_a=Region(ops=[0, 1], energy_j=1.0),
        region_b=Region(ops=[0, 1], energy_j=0.4),
        saving_j=0.6,
        saving_share=0.3,
        output_rel_diff=0.0,
        job=JobInfo(rank=1, runs={"a": "ja/rank1", "b": "jb/rank1"}),
        fix=Fix(
            summary="use the fused op", patch="--- a/t.py\n+++ b/t.py\n@@ -1 +1 @@\n-x<y\n+z\n"
        ),
    )
    result = DiffResult(
        a=RunSummary("ja", 2.0, 1.0, "model"), b=RunSummary("jb", 1.4, 1.0, "model")
    )
    result.findings = [f]
    page = diff_html(result, rank_sides={1: (pa, pb)})
    svgs = [ET.fromstring(m) for m in re.findall(r"<svg .*?</svg>", page, flags=re.S)]
    assert [s.get("class") for s in svgs] == ["icicle", "icicle"]
    titles = [t.text or "" for t in svgs[0].iter(f"{SVG}title")]
    assert "layer.mlp.void gemm<float, 128>(T*) — 900 mJ" in titles
    assert "gemm&lt;float, 128&gt;" in page and "gemm<float" not in page.replace("<title>", "")
    assert "Power timeline" not in page  # none for a job
    # the patch as a block, escaped; a finding without a diagnosis says so
    assert '<pre class="patch">--- a/t.py\n+++ b/t.py\n@@ -1 +1 @@\n-x&lt;y\n+z\n</pre>' in page
    assert "<li>not diagnosed</li>" in page
