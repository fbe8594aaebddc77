"""Ctrl-C and SIGTERM for every command: a one-line message and 130/143, never a silent
death or a half-done write.

Python's default SIGTERM kills the process where it stands: `diff` and `import-trace`
exited 143 with no word (and a diff's confirmation workers were stopped only by their
own parent-death signal). `interruptible` turns SIGTERM into `Terminated`, a
KeyboardInterrupt, so it unwinds through every `finally` (workers stopped, temporary
directories removed) and the CLI prints what happened; `magneton/cli.py` holds it around
every command, and the recorders (tracer/record.py, tracer/program.py) hold it around the
workload to mark the run failed. `defer_sigint` holds both signals back while the DB is
written, so a bulk load is never cut half-way.

Torch-free: the CLI imports it for every command, `magneton runs` included.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from typing import Any

from magneton.graphdb.model import MagnetonError


class Terminated(KeyboardInterrupt):
    """SIGTERM (a CI cancel, `timeout`, `kill`): handled like Ctrl-C, exit 143."""


class InterruptedAfterSave(MagnetonError):
    """A Ctrl-C or SIGTERM held back during the DB write, which then completed."""


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise Terminated if signum == signal.SIGTERM else KeyboardInterrupt


def stop_message(e: KeyboardInterrupt) -> tuple[str, int]:
    """What stopped the command, in words, and its exit status (143 SIGTERM, 130 Ctrl-C)."""
    if isinstance(e, Terminated):
        return "terminated (SIGTERM)", 143
    return "interrupted (Ctrl-C)", 130


@contextlib.contextmanager
def interruptible() -> Iterator[None]:
    """Turn SIGTERM into `Terminated` (a KeyboardInterrupt) inside the block, so a
    `timeout` or a CI cancel leaves the same record as Ctrl-C instead of dying silently.
    Handlers can only be set from the main thread; elsewhere the block runs as is."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


@contextlib.contextmanager
def defer_sigint() -> Iterator[None]:
    """Hold Ctrl-C and SIGTERM until the block ends, so a bulk load is never cut
    half-way. A signal that arrived raises `InterruptedAfterSave` when the block
    completed (the data is stored: saying "failed" would be false), and the usual
    KeyboardInterrupt when the block raised anyway.

    Signal handlers can only be set from the main thread; elsewhere the block runs as is.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pending: list[int] = []
    old = {s: signal.signal(s, lambda signum, _f: pending.append(signum)) for s in STOP_SIGNALS}
    try:
        yield
    except BaseException:
        if pending:
            raise (Terminated if signal.SIGTERM in pending else KeyboardInterrupt) from None
        raise
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
    if pending:
        how = "terminated (SIGTERM)" if signal.SIGTERM in pending else "interrupted (Ctrl-C)"
        raise InterruptedAfterSave(
            f"{how} during the DB write, which completed",
            exit_code=143 if signal.SIGTERM in pending else 130,
        )
