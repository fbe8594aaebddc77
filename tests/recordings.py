"""Helpers for recordings that tests share (the session fixtures are in conftest.py)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

WORKLOADS = Path(__file__).parent / "workloads"


def record_once(db: Path, script: Path, run: str, *extra: str) -> None:
    """`magneton record SCRIPT --db DB --run RUN EXTRA` in a subprocess; fails the
    fixture that asked with the recorder's own message."""
    proc = subprocess.run(
        [sys.executable, "-m", "magneton", "record", str(script)]
        + ["--db", str(db), "--run", run, "-q", *extra],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def copy_db(src: Path, dst: Path) -> Path:
    """A private, writable copy of a shared (closed) DB directory."""
    shutil.copytree(src, dst)
    return dst
