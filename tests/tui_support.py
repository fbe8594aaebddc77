"""What the TUI tests share: the gelu example pair recorded once per session (in a git
copy of examples/cases/gelu_backend, so an exported patch meets a real `git apply
--check`), the app at 80×24 (the size the TUI promises to be usable at) and helpers that
read what it shows."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from rich.console import Console

from magneton.tui.app import MagnetonApp
from magneton.tui.data import Store

ROOT = Path(__file__).resolve().parents[1]
CASE = ROOT / "examples" / "cases" / "gelu_backend"
SIZE = (80, 24)


def git(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True)


def _record(script: Path, db: Path, run: str) -> None:
    """Record through the Python API (`record_script`, what `magneton record` calls), in
    this process: a subprocess per side would import torch and transformers again, and
    neither script sets a global flag that could leak into the other's recording.

    FLOPs and bytes only: the default model adds static power x measured time, and
    wall-time noise on a shared 2-core CI box can out-rank the GELU finding. Energy then
    does not depend on time, so the timing pass runs its 2 calls and stops (no adaptive
    iterations until the time is stable)."""
    from magneton.tracer.programs.record import RecordOptions, record_script

    opts = RecordOptions(warmup=1, repeat=2, power="model:work-only", adaptive=False)
    record_script(script, db=str(db), run=run, options=opts)


def recorded_gelu(base: Path) -> tuple[Path, Path]:
    """(case dir, db dir) under `base`, recorded on first use and reused after.

    Both TUI test files call this with the session's base temp dir, so the pair is
    recorded once per pytest session (a marker file says the recording completed).
    """
    case, db, done = base / "gelu_case", base / "gelu_db", base / "gelu_recorded"
    if not done.exists():
        shutil.rmtree(case, ignore_errors=True)
        shutil.rmtree(db, ignore_errors=True)
        shutil.copytree(CASE, case, ignore=shutil.ignore_patterns("__pycache__"))
        git(case, "init", "-q")
        git(case, "-c", "user.email=t@example.com", "-c", "user.name=t", "add", ".")
        git(case, "-c", "user.email=t@example.com", "-c", "user.name=t", "commit", "-qm", "case")
        _record(case / "a.py", db, "a")
        _record(case / "b.py", db, "b")
        done.write_text("ok")
    return case, db


def run_app(app: MagnetonApp, scenario: Callable[..., Awaitable[None]]) -> None:
    async def go() -> None:
        async with app.run_test(size=SIZE, notifications=True) as pilot:
            await scenario(pilot)

    asyncio.run(go())


async def wait_for(pilot, cond: Callable[[], bool], timeout: float = 60.0, what: str = "") -> None:
    """Let the app run until `cond()` holds; fail after `timeout` seconds."""
    t0 = time.monotonic()
    while not cond():
        if time.monotonic() - t0 > timeout:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        await pilot.pause(0.1)


def text_of(widget) -> str:
    """The plain text a Static shows, rendered at the app's width."""
    console = Console(width=SIZE[0], record=True, color_system=None, file=open(os.devnull, "w"))
    console.print(widget.content)
    return console.export_text()


def flat(text: str) -> str:
    """Text with line wraps and runs of spaces collapsed (wrapping depends on width)."""
    return " ".join(text.split())


def cells(table) -> list[list[str]]:
    return [[str(c) for c in table.get_row_at(i)] for i in range(table.row_count)]


def app_for(db: Path, *runs: str, diagnose: bool = False) -> MagnetonApp:
    """The app as `magneton-tui --db DB RUNS` starts it (`--no-diagnose` unless asked:
    only one test pays for the diagnosis, which re-runs both scripts). A test that asks
    for the diagnosis watches it run, so it also asks for a new diff (`--rerun`): the
    app would otherwise show the diff an earlier test stored in the shared DB."""
    store = Store(db)
    return MagnetonApp(store, store.check(), *runs, diagnose=diagnose, fresh=diagnose)
