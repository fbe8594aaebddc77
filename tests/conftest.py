"""Fixtures shared across test files, and cleanup of what tests leave under /tmp.

`tiny_db` is one recording made once per session for tests that only read it (a real
`magneton record` subprocess; about 10 s each time a test made its own). Tests that
change a DB must make their own.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

WORKLOADS = Path(__file__).parent / "workloads"
_RERUN_GLOB = os.path.join(tempfile.gettempdir(), "magneton-rerun-*")


@pytest.fixture(scope="session")
def tiny_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A DB holding run 'a' of workloads/tiny.py (5 operators). Read it, never write."""
    db = tmp_path_factory.mktemp("shared") / "tiny"
    proc = subprocess.run(
        [sys.executable, "-m", "magneton", "record", str(WORKLOADS / "tiny.py")]
        + ["--db", str(db), "--run", "a", "--repeat", "1", "-q"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    return db


def pytest_sessionstart(session: pytest.Session) -> None:
    session.config._magneton_rerun_dirs = set(glob.glob(_RERUN_GLOB))  # type: ignore[attr-defined]


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Remove the `magneton-rerun-*` directories the diagnosis re-runs made during this
    session (they are never removed otherwise; ~1 GB after a full run)."""
    before = getattr(session.config, "_magneton_rerun_dirs", set())
    for d in set(glob.glob(_RERUN_GLOB)) - before:
        shutil.rmtree(d, ignore_errors=True)
