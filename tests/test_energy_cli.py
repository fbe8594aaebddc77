"""`magneton report` and `magneton export-trace` on runs recorded through `magneton record`.

Everything goes through the CLI entry point (`magneton.cli.main`, in-process to avoid paying
torch's import per command; one error path runs as a real subprocess).

The two GPT-2 runs differ only in `activation_function`: HF's Python `gelu_new` (a chain of
element-wise ops) versus the fused `aten::gelu(approximate="tanh")`. The energy stage must
charge the Python chain more - the paper's GELU finding (§6.3), here from the model since
this machine has no power sensor.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
from pathlib import Path

import pytest
import warm_cli

from magneton.cli import main

WORKLOADS = Path(__file__).parent / "workloads"


def magneton(*args: str, env: dict | None = None, check: bool = True):
    proc = warm_cli.run(args, env={**os.environ, **(env or {})}, timeout=300)
    if check and proc.returncode != 0:
        raise AssertionError(f"magneton {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}")
    return proc


@pytest.fixture(scope="module")
def db(gpt2_db: Path) -> Path:
    """The session's two GPT-2 runs, gelu_new and gelu_fused (conftest.py); read only."""
    return gpt2_db


def cli(*args: str) -> tuple[int, str, str]:
    """Run `magneton ARGS` in-process; (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(list(args))
    return rc, out.getvalue(), err.getvalue()


def report_json(db: Path, run: str, *extra: str) -> dict:
    rc, out, err = cli("report", "--db", str(db), run, "--json", *extra)
    assert rc == 0, err
    return json.loads(out)


def test_report_json_contract_and_sums(db):
    r = report_json(db, "gelu_new")
    for key in (
        "run",
        "power_source",
        "energy_method",
        "energy_j",
        "time_s",
        "idle_w",
        "operators",
        "modules",
    ):
        assert key in r
    assert r["run"] == "gelu_new"
    assert r["power_source"] == "model:cpu-default" and r["energy_method"] == "estimated"
    assert r["energy_j"] > 0 and r["time_s"] > 0 and r["idle_w"] == 90.0
    ops = r["operators"]
    assert {"name", "calls", "time_s", "energy_j", "method"} <= set(ops[0])
    assert sum(o["energy_j"] for o in ops) == pytest.approx(r["energy_j"], rel=1e-9)
    assert all(o["method"] == "estimated" for o in ops)
    mods = {m["path"]: m for m in r["modules"]}
    assert mods["h.*"]["instances"] == 2  # h.0, h.1 folded
    assert mods[""]["energy_j"] == pytest.approx(r["energy_j"], rel=1e-9)
    # --top keeps the sum with an "(other N)" row
    top = report_json(db, "gelu_new", "--top", "3")
    assert len(top["operators"]) == 4 and top["operators"][-1]["name"].startswith("(other")
    assert sum(o["energy_j"] for o in top["operators"]) == pytest.approx(r["energy_j"], rel=1e-9)


def test_python_gelu_region_costs_more_than_fused_gelu(db):
    slow = {m["path"]: m for m in report_json(db, "gelu_new")["modules"]}["h.*.mlp.act"]
    fused = {m["path"]: m for m in report_json(db, "gelu_fused")["modules"]}["h.*.mlp.act"]
    assert slow["calls"] >= 2 * 5  # a chain of at least five element-wise ops per block
    assert fused["calls"] == 2  # one aten::gelu per block
    assert slow["energy_j"] > 2 * fused["energy_j"]
    fused_ops = {o["name"] for o in report_json(db, "gelu_fused")["operators"]}
    assert "aten::gelu" in fused_ops
    assert "aten::tanh" in {o["name"] for o in report_json(db, "gelu_new")["operators"]}


def test_report_table_states_method_and_idle(db):
    out = cli("report", "--db", str(db), "gelu_new")[1]
    assert "aten::addmm" in out and "J/call" in out and "avg W" in out
    assert "idle baseline ~ 90.0 W" in out
    assert "estimated by model:cpu-default" in out
    assert "h" in out and "×2" in out  # the folded module tree
    # by module: the folded tree (h > * ×2 > mlp > act), not flat dotted paths
    by_module = cli("report", "--db", str(db), "gelu_new", "--by", "module")[1]
    assert "* ×2" in by_module and "act ×2" in by_module and "h.0.mlp.act" not in by_module


def test_report_csv(db):
    out = cli("report", "--db", str(db), "gelu_fused", "--csv")[1]
    rows = list(csv.DictReader(io.StringIO(out)))
    assert rows and set(rows[0]) == {
        "name",
        "calls",
        "time_s",
        "energy_j",
        "j_per_call",
        "avg_w",
        "share",
        "method",
    }
    total = report_json(db, "gelu_fused")["energy_j"]
    assert sum(float(r["energy_j"]) for r in rows) == pytest.approx(total, rel=1e-9)


def test_report_errors_are_one_line(db, tmp_path):
    p = magneton("report", "--db", str(db), "nope", check=False)  # as typed in a shell
    assert p.returncode == 2 and p.stderr.startswith("magneton: no run 'nope'")
    assert p.stderr.count("\n") == 1 and "Traceback" not in p.stderr
    rc, _, err = cli("report", "--db", str(tmp_path / "none"), "x")
    assert rc == 2 and "no Magneton DB" in err


def test_export_trace_is_valid_chrome_json(db, tmp_path):
    out = tmp_path / "trace.json"
    rc, _, err = cli("export-trace", "--db", str(db), "gelu_new", "-o", str(out))
    assert rc == 0, err
    trace = json.loads(out.read_text())
    ev = trace["traceEvents"]
    ops = [e for e in ev if e.get("cat") == "cpu_op"]
    report = report_json(db, "gelu_new")
    assert len(ops) == sum(o["calls"] for o in report["operators"])
    assert all(e["ph"] == "X" and e["dur"] >= 0 and e["ts"] >= 0 for e in ops)
    assert {"module", "input_shapes", "energy_j", "method"} <= set(ops[0]["args"])
    assert sum(e["args"]["energy_j"] for e in ops) == pytest.approx(report["energy_j"], rel=1e-9)
    mods = [e for e in ev if e.get("cat") == "user_annotation"]
    assert {"h", "h.0", "h.1", "h.0.mlp.act"} <= {e["name"] for e in mods}
    op_tids = {e["tid"] for e in ops}
    assert not op_tids & {e["tid"] for e in mods}  # modules on their own track
    h0 = next(e for e in mods if e["name"] == "h.0")
    act = next(e for e in mods if e["name"] == "h.0.mlp.act")
    assert h0["ts"] <= act["ts"] and act["ts"] + act["dur"] <= h0["ts"] + h0["dur"] + 1e-3
    counters = [e for e in ev if e["ph"] == "C"]
    assert counters and all("W" in e["args"] for e in counters)
    assert trace["otherData"]["energy_method"] == "estimated"
