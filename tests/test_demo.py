"""`magneton demo` as a newcomer runs it: in an empty directory, then the printed hint."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

CASE = Path(__file__).resolve().parents[1] / "examples" / "cases" / "gelu_backend"


def test_demo_works_in_its_scratch_dir_and_its_hint_applies_as_printed(tmp_path: Path) -> None:
    shipped = (CASE / "a.py").read_text()
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    demo = subprocess.run(
        [sys.executable, "-m", "magneton", "demo", "--case", str(CASE), "--power", "model"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        # narrow: the hint line must come out whole however wide the console (not wrapped)
        env={**env, "COLUMNS": "60"},
        timeout=900,
    )
    assert demo.returncode == 0, demo.stderr
    hint = next(ln for ln in demo.stdout.splitlines() if ln.startswith("Next: "))[6:]
    assert "git apply fix.patch" in hint
    # the hint, run as printed by a shell in the directory the demo ran in
    applied = subprocess.run(
        hint, shell=True, cwd=tmp_path, capture_output=True, text=True, env=env, timeout=900
    )
    assert applied.returncode == 0, applied.stdout + applied.stderr
    scratch = tmp_path / "magneton-demo"
    assert 'activation_function="gelu_new"' not in (scratch / "a.py").read_text()
    # the scratch repository committed the example as shipped: `git diff` is the patch
    shown = subprocess.run(["git", "diff", "--stat"], cwd=scratch, capture_output=True, text=True)
    assert "a.py" in shown.stdout and "1 file changed" in shown.stdout, shown
    assert (CASE / "a.py").read_text() == shipped  # the shipped example is untouched
