"""A workload's changes to the recording process do not misplace or lose its run: a
script that changes directory at import still saves into the DB the user named, and one
that replaces `sys.stdout` still gets its one-line summary, and a module beside it that
shadows the standard library does not break the save (tracer/programs/record.py
`_no_exit`)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BODY = """
import torch
def setup():
    return (torch.randn(16, 16),)
def main(x):
    return (x @ x).relu()
"""


def _record(tmp_path: Path, script: str) -> subprocess.CompletedProcess:
    (tmp_path / "s.py").write_text(script)
    return subprocess.run(
        [sys.executable, "-m", "magneton", "record", "s.py", "--db", "db", "--run", "a", "-q"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _runs(db: Path) -> list[str]:
    out = subprocess.run(
        [sys.executable, "-m", "magneton", "runs", "--db", str(db), "--json"],
        capture_output=True,
        text=True,
        check=True,
    )
    return [r["name"] for r in json.loads(out.stdout)]


def test_a_script_that_changes_directory_saves_where_the_user_said(tmp_path):
    moved = 'import os\nos.makedirs("sub", exist_ok=True)\nos.chdir("sub")\n' + BODY
    out = _record(tmp_path, moved)
    assert out.returncode == 0, out.stderr
    assert "recorded run 'a'" in out.stdout and "-> db\n" in out.stdout
    assert _runs(tmp_path / "db") == ["a"]
    assert not (tmp_path / "sub" / "db").exists()


def test_a_script_that_drops_stdout_still_gets_its_summary(tmp_path):
    dropped = BODY.replace("def setup():\n", "def setup():\n    import sys; sys.stdout = None\n")
    out = _record(tmp_path, dropped)
    assert out.returncode == 0, out.stderr
    assert "Traceback" not in out.stderr
    assert "recorded run 'a'" in out.stdout


def test_a_module_beside_the_script_that_shadows_the_standard_library_loses_nothing(tmp_path):
    """A `secrets.py` beside the script, which the script never imports: the recorder's
    own imports after the workload (the save) must still get the standard module, so
    the run is stored and nothing is blamed on the script."""
    (tmp_path / "secrets.py").write_text('raise ImportError("the shadowing module ran")\n')
    out = _record(tmp_path, BODY)
    assert out.returncode == 0, out.stderr
    assert "shadowing" not in out.stderr and "raised" not in out.stderr
    assert _runs(tmp_path / "db") == ["a"]
