"""Helpers for recordings that tests share (the session fixtures are in conftest.py)."""

from __future__ import annotations

import importlib.util
import shutil
import signal
from pathlib import Path

import warm_cli

WORKLOADS = Path(__file__).parent / "workloads"


def takes_ctrl_c() -> None:
    """`preexec_fn` of a child a test sends SIGINT to: Ctrl-C's default action, as in a
    program run from a terminal. A test run started with `&` from a script inherits
    SIGINT as ignored and would pass that on: the child would ignore the test's Ctrl-C
    (rightly, as a background job), and the test would time out."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def record_once(db: Path, script: Path, run: str, *extra: str) -> None:
    """`magneton record SCRIPT --db DB --run RUN EXTRA` (tests/warm_cli.py); fails the
    fixture that asked with the recorder's own message."""
    proc = warm_cli.run(
        ["record", str(script), "--db", str(db), "--run", run, "-q", *extra], timeout=600
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def copy_db(src: Path, dst: Path) -> Path:
    """A private, writable copy of a shared (closed) DB directory."""
    shutil.copytree(src, dst)
    return dst


def load_module(path: Path, name: str):
    """Import the file `path` as module `name` (a user's script, outside sys.path)."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def record_scripts(db, proj: Path, tag: str) -> tuple:
    """Record proj/a.py and proj/b.py as a user's scripts (setup() outside the measured
    call, main() inside) into runs "a" and "b", in this process: no warm-up, one timed
    call, the model's energy (the tests pin the diagnosis, not the numbers)."""
    from magneton.tracer.programs.record import RecordOptions, record_callable

    opts = RecordOptions(warmup=0, repeat=1, power="model", call_paths=True)
    profiles = {}
    for side in ("a", "b"):
        mod = load_module(proj / f"{side}.py", f"magneton_test_{tag}_{side}")
        profiles[side] = record_callable(
            mod.main,
            mod.setup(),
            run=side,
            db=db,
            options=opts,
            script=str(proj / f"{side}.py"),
            entry="main",
            setup="setup",
        )
    return profiles["a"], profiles["b"]
