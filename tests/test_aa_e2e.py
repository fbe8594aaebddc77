"""The same program recorded twice gives the same answer: an A/A diff has no findings.

This runs the default energy model (static power × time + FLOPs + bytes) through the CLI
as a user does - no work-only profile - so operator time decides the energies. It holds
on a shared, loaded CI machine because time is the process CPU time consumed (not wall
time another process can take), each region carries the spread of its timed iterations,
and a difference is a finding only when it exceeds the threshold with 95% confidence.
"""

from __future__ import annotations

import contextlib
import io
import json

import pytest
from recordings import record_once

from magneton.cli import main as cli

# run alone (tests/conftest.py): the diff (`--no-rerun`) has only the recordings' own
# spread to go on. The program A/A, diffed with re-measurement, runs beside other tests
# (tests/test_aa_program.py).
pytestmark = pytest.mark.alone

SCRIPT = """
import torch

def setup():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 256, generator=g)
    ws = [torch.randn(256, 256, generator=g) / 16 for _ in range(3)]
    return x, ws

def main(x, ws):
    h = x
    for w in ws:
        h = torch.nn.functional.gelu(h @ w)
        h = torch.nn.functional.layer_norm(h, (256,))
    return h.softmax(-1)
"""


def run(*argv: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert cli(list(argv)) == 0
    return out.getvalue()


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    d = tmp_path_factory.mktemp("aa")
    script = d / "mlp.py"
    script.write_text(SCRIPT)
    for name in ("a1", "a2"):
        # each in a fresh process, as `magneton record` runs for a user: recorded in this
        # process, the first recording of a fresh test worker ran cold and the second
        # warm, and their Python time between operators differed (2.3x at `main`, once).
        # --repeat 10: the per-op price is each op's cheapest iteration, steadier over more
        record_once(d / "db", script, name, "--power", "model", "--repeat", "10")
    return d / "db"


def test_aa_diff_has_no_findings(db):
    res = json.loads(run("diff", "--db", str(db), "a1", "a2", "--no-rerun", "--json"))
    assert res["matched_pairs"] > 0
    assert res["findings"] == [], [
        (f["ops"]["a"], f["energy_j"], f.get("interval")) for f in res["findings"]
    ]


def test_report_shows_spread_and_python_rows(db):
    rep = json.loads(run("report", "--db", str(db), "a1", "--json"))
    sp = rep["spread"]
    assert sp["iterations"] >= 3 and sp["min_j"] <= sp["mean_j"] <= sp["max_j"]
    assert rep["clock"] == "process-cpu"
    kinds = {o["kind"] for o in rep["operators"]}
    assert {"op", "python"} <= kinds
    py = [o for o in rep["operators"] if o["kind"] == "python"]
    assert all(o["name"].startswith("python: ") and o["calls"] == 0 for o in py)
    assert any("mlp.py" in o["name"] for o in py)  # the user's loop ran between the ops
    assert sum(o["energy_j"] for o in rep["operators"]) == pytest.approx(rep["energy_j"])
    text = run("report", "--db", str(db), "a1")
    assert "spread: ±" in text and "timed iterations" in text
