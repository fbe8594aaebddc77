"""The root line is the divergence's own user line (examples/cases/root_line_below).

The region opens with a statement both sides share (the class weights normalized, which
the matcher attaches to the region of its first data-dependent consumer); the sides part
one line below. The root cause must name that line, and the patch must apply with
`git apply` and leave the shared line alone.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from fixcheck import assert_no_noop_fix

CASE = Path(__file__).resolve().parents[1] / "examples" / "cases" / "root_line_below"


def magneton(*args: str) -> str:
    env = dict(os.environ, KINETO_LOG_LEVEL="5")
    res = subprocess.run(
        [sys.executable, "-m", "magneton", *args], capture_output=True, text=True, env=env
    )
    assert res.returncode == 0, f"magneton {' '.join(args)} failed:\n{res.stderr[-2000:]}"
    return res.stdout


def test_root_line_is_the_first_diverging_line_and_the_patch_applies(tmp_path):
    work = tmp_path / "case"
    shutil.copytree(CASE, work)
    db = str(tmp_path / "db")
    for side in ("a", "b"):
        magneton("record", str(work / f"{side}.py"), "--db", db, "--run", side, "--repeat", "3")
    findings = json.loads(magneton("diff", "--db", db, "a", "b", "--json"))["findings"]
    assert_no_noop_fix(findings)
    code = [f for f in findings if (f.get("root_cause") or {}).get("kind") == "code"]
    assert code, [f.get("root_cause") for f in findings]
    f = code[0]
    lines = (work / "a.py").read_text().splitlines()
    sum_line = next(i for i, ln in enumerate(lines, 1) if ".sum(-1)" in ln)
    rc = f["root_cause"]
    assert f["wasteful"] == "a" and f["category"] == "api-misuse"
    assert (os.path.basename(rc["file"]), rc["line"]) == ("a.py", sum_line)
    assert "F.normalize" not in rc["code"]  # the shared line above is not the cause
    assert rc["origins"]["b"]["code"] == "return F.linear(x, w)"
    patch = tmp_path / "fix.patch"
    magneton("export-patch", "--db", db, "a", "b", "--finding", str(f["id"]), "-o", str(patch))
    subprocess.run(["git", "init", "-q"], cwd=work, check=True)
    subprocess.run(["git", "apply", str(patch)], cwd=work, check=True)
    patched = (work / "a.py").read_text().splitlines()
    assert patched[sum_line - 1].strip() == "return F.linear(x, w)"
    assert patched[sum_line - 2] == lines[sum_line - 2]  # the normalization kept
