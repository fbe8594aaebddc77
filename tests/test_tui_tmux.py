"""magneton-tui in a real terminal: tmux runs the installed console script, as over ssh.

Pilot tests drive the app in-process with a headless driver; this one checks what they
cannot: the `magneton-tui` entry point starts in a real pty, the findings are drawn on
the screen (read back with `capture-pane`), nothing the diff/diagnosis child prints
scribbles over it, and `q` quits at once although diagnosis (which re-runs both scripts
with line tracing) is still running — leaving no child process behind.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from tui_support import recorded_gelu

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")

WIDTH, HEIGHT = 100, 30
# a private tmux server (socket name), started without any user config: a server shared
# with other sessions of this user keeps the environment and options it was started with
SOCKET = f"magneton-tui-test-{os.getpid()}"


def _tmux(*args: str) -> str:
    return subprocess.run(
        ["tmux", "-L", SOCKET, "-f", os.devnull, *args],
        capture_output=True,
        text=True,
        check=True,
        timeout=10,
    ).stdout


def _pane(session: str) -> str:
    return _tmux("capture-pane", "-p", "-t", session)


def _children_of(db: Path) -> list[int]:
    """PIDs of diff/diagnosis children working on this DB (from /proc)."""
    pids = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"magneton.tui.jobs" in cmd and str(db).encode() in cmd:
            pids.append(int(d.name))
    return pids


def test_findings_on_screen_in_tmux_and_q_quits_during_diagnosis(tmp_path_factory) -> None:
    case, db = recorded_gelu(tmp_path_factory.getbasetemp())
    exe = shutil.which("magneton-tui")
    assert exe, "the magneton-tui console script is not installed (pip install -e .)"
    session = "tui"
    status = tmp_path_factory.mktemp("tmux") / "status"
    # the shell writes the exit status once the TUI has quit, then the session ends;
    # COLUMNS/LINES from the environment would override the pane's real size
    # --rerun: a new diff, so the diagnosis runs (the shared DB may hold a stored diff)
    cmd = f"env -u COLUMNS -u LINES {exe} --db {db} --rerun a b; echo $? > {status}"
    _tmux("new-session", "-d", "-s", session, "-x", str(WIDTH), "-y", str(HEIGHT), cmd)
    try:

        def finding_row() -> str:
            """The first cause's row: its two lines (A's operators, then B's)."""
            lines = _pane(session).splitlines()
            for i, line in enumerate(lines[:-1]):
                if line.lstrip().startswith("1") and "waste" in line:
                    return line + "\n" + lines[i + 1]
            return ""

        deadline = time.monotonic() + 60
        # finding 1: gelu_new's chain of element-wise ops on A, one fused gelu on B
        while not ("mul pow mul add mul tanh" in (row := finding_row()) and "B gelu ×4" in row):
            if time.monotonic() > deadline:
                raise AssertionError(f"finding 1 not on screen within 60 s:\n{_pane(session)}")
            time.sleep(0.5)
        screen = _pane(session)
        assert "estimated by model:work-only" in screen
        assert "Traceback" not in screen and "profiler" not in screen  # child output kept off
        diagnosing = "diagnosing" in screen
        if diagnosing:
            assert _children_of(db), "diagnosis shown as running but no child process"
        _tmux("send-keys", "-t", session, "q")
        deadline = time.monotonic() + 10
        while not status.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert status.exists(), f"q did not quit within 10 s:\n{_pane(session)}"
        assert status.read_text().strip() == "0"
        deadline = time.monotonic() + 10  # a bound on a hang, not a timing assertion
        while _children_of(db) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _children_of(db) == [], "a diff/diagnosis child outlived the TUI"
    finally:
        subprocess.run(["tmux", "-L", SOCKET, "kill-server"], capture_output=True, timeout=10)
