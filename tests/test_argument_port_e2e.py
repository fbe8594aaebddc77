"""Redundant copies one argument away from gone, end to end through the CLI
(examples/cases/pad_copy and contiguous_copy): record both sides, diff, export the patch,
apply it with real `git apply`, and check that the patched script computes the same
result as before with the efficient side's call.

pad_copy: F.pad writes a padded copy, b's F.conv2d call pads itself (`padding=1`).
contiguous_copy: `.contiguous()` copies a channels-last batch; b's call passes
`memory_format=torch.channels_last`, so it does no work and records no operator — its
statement is found by where it stands, not by a recorded frame.
"""

from __future__ import annotations

import json
import os
import runpy
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from fixcheck import assert_no_noop_fix

CASES = Path(__file__).resolve().parents[1] / "examples" / "cases"


def magneton(*args: str) -> str:
    env = dict(os.environ, KINETO_LOG_LEVEL="5")
    res = subprocess.run(
        [sys.executable, "-m", "magneton", *args], capture_output=True, text=True, env=env
    )
    assert res.returncode == 0, f"magneton {' '.join(args)} failed:\n{res.stderr[-2000:]}"
    return res.stdout


def run_script(path: Path):
    ns = runpy.run_path(str(path))
    return ns["main"](*ns["setup"]())


@pytest.mark.parametrize(
    ("case", "old_call", "new_call"),
    [
        (
            "pad_copy",
            "return F.conv2d(F.pad(x, (1, 1, 1, 1)), weight, stride=2, groups=CHANNELS)",
            "return F.conv2d(x, weight, stride=2, padding=1, groups=CHANNELS)",
        ),
        (
            "contiguous_copy",
            "images = images.contiguous()",
            "images = images.contiguous(memory_format=torch.channels_last)",
        ),
    ],
    ids=["pad_copy", "contiguous_copy"],
)
def test_redundant_copy_gets_an_argument_port_that_applies(tmp_path, case, old_call, new_call):
    work = tmp_path / case
    shutil.copytree(CASES / case, work)
    db = str(tmp_path / "db")
    for side in ("a", "b"):
        magneton("record", str(work / f"{side}.py"), "--db", db, "--run", side, "--repeat", "3")
    findings = json.loads(magneton("diff", "--db", db, "a", "b", "--json"))["findings"]
    assert_no_noop_fix(findings)
    lines = (work / "a.py").read_text().splitlines()
    copy_line = next(i for i, ln in enumerate(lines, 1) if ln.strip() == old_call)
    mine = [
        f
        for f in findings
        if (f.get("root_cause") or {}).get("line") == copy_line
        and (f.get("fix") or {}).get("patch")
    ]
    assert mine, [(f.get("root_cause"), f.get("fix")) for f in findings]
    # every finding rooted at the copy's line (contiguous_copy has a second one: the
    # scaling reads the other layout, followed back to the same call's memory_format)
    # ports the argument rather than adding a statement that would copy back
    for g in mine:
        assert f"+    {new_call}\n" in g["fix"]["patch"], g["fix"]
        assert "with the efficient side's arguments" in g["fix"]["summary"]
        assert g["root_cause"]["origins"]["b"]["code"] == new_call  # b's own statement
    f = next(g for g in mine if g["category"] == "redundant")
    assert f["wasteful"] == "a" and f["root_cause"]["kind"] == "code"
    assert os.path.basename(f["root_cause"]["file"]) == "a.py"
    patch = tmp_path / "fix.patch"
    magneton("export-patch", "--db", db, "a", "b", "--finding", str(f["id"]), "-o", str(patch))
    before = run_script(work / "a.py")
    subprocess.run(["git", "init", "-q"], cwd=work, check=True)
    subprocess.run(["git", "apply", str(patch)], cwd=work, check=True)
    patched = (work / "a.py").read_text().splitlines()
    # only the wasteful call changed, to the efficient side's call
    assert patched[copy_line - 1].strip() == new_call
    assert [ln for i, ln in enumerate(patched, 1) if i != copy_line] == [
        ln for i, ln in enumerate(lines, 1) if i != copy_line
    ]
    torch.testing.assert_close(run_script(work / "a.py"), before, rtol=0, atol=0)
