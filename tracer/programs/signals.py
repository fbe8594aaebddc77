"""Ctrl-C and SIGTERM for every command: a one-line message and 130/143, never a silent
death or a half-done write.

Python's default SIGTERM kills the process where it stands: `diff` and `import-trace`
exited 143 with no word (and a diff's confirmation workers were stopped only by their
own parent-death signal). `interruptible` turns SIGTERM into `Terminated`, a
KeyboardInterrupt, so it unwinds through every `finally` (workers stopped, temporary
directories removed) and the CLI prints what happened; `magneton/cli.py` holds it around
every command, and the recorders (tracer/programs/record.py, tracer/programs/program.py) hold it around the
workload to mark the run failed. `defer_sigint` holds both signals back while the DB is
written, so a bulk load is never cut half-way.

Torch-free: the CLI imports it for every command, `magneton runs` included.
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import signal
import sys
import threading
from collections.abc import Iterator
from typing import Any

from magneton.model import MagnetonError


class Terminated(KeyboardInterrupt):
    """SIGTERM (a CI cancel, `timeout`, `kill`): handled like Ctrl-C, exit 143."""


class InterruptedAfterSave(MagnetonError):
    """A Ctrl-C or SIGTERM held back during the DB write, which then completed."""


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


# how long the unwinding after a SIGTERM may take (marking the run failed, stopping
# workers) before the process exits anyway: a SIGTERM that leaves a process running is
# what `timeout`, systemd and CI cancels answer with SIGKILL, which says nothing at all
STOP_GRACE_S = 60.0


# A stop signal whose KeyboardInterrupt CPython discarded. A handler runs wherever the
# main thread is, and an exception raised inside a weakref callback or a `__del__` goes
# to `sys.unraisablehook` ("Exception ignored in ...") instead of up the stack: 1 of 12
# Ctrl-Cs sent during a structure pass landed in the capture's weakref callback, and the
# recording ran on until killed. `interruptible` notes such a discard here (an interrupt
# the program caught itself is not one); the recorders' dispatch modes raise it again at
# the next operator and when they exit, both ordinary frames. They read it inline: a call
# per operator would cost the timing pass more than the read.
undelivered: int | None = None


def _raise_interrupt(signum: int, frame: Any) -> None:
    _arm_stop_watchdog(signum)
    raise Terminated if signum == signal.SIGTERM else KeyboardInterrupt


def _noting_discards(previous: Any) -> Any:
    """A `sys.unraisablehook` that notes a discarded stop signal instead of printing it
    (it is raised again, and ends in the one-line message; its "Exception ignored ...
    Traceback" would only bury that line); anything else goes to `previous`."""

    def hook(unraisable: Any) -> None:
        global undelivered
        exc_type = unraisable.exc_type
        if exc_type is not None and issubclass(exc_type, KeyboardInterrupt):
            undelivered = signal.SIGTERM if issubclass(exc_type, Terminated) else signal.SIGINT
            return
        previous(unraisable)

    return hook


def raise_undelivered() -> None:
    """Raise a stop signal's exception again if CPython discarded it (see `undelivered`)."""
    global undelivered
    signum, undelivered = undelivered, None
    if signum is not None:
        raise Terminated if signum == signal.SIGTERM else KeyboardInterrupt


def settle(exc_type: type[BaseException] | None) -> None:
    """At the end of a block: raise a discarded stop signal again if the block ends
    normally, forget it if the block ends by an exception anyway."""
    global undelivered
    if exc_type is None:
        raise_undelivered()
    else:
        undelivered = None


def _arm_stop_watchdog(signum: int) -> None:
    """Exit with the signal's status if the unwinding has not ended `STOP_GRACE_S` after
    the signal. Once, in a fresh-clone CI run (a loaded 2-core runner), a recording
    stopped by SIGTERM was still running 240 s later, and nothing said where; the stacks
    written here say where the next one is stuck. Nothing stored is at risk: a DB write
    holds the signals back (`defer_sigint`) and a `--replace` swaps its new file in only
    on success, so this exit leaves what a SIGKILL would, and earlier."""

    def give_up() -> None:
        how, code = stop_message(Terminated() if signum == signal.SIGTERM else KeyboardInterrupt())
        sys.stderr.write(
            f"magneton: {how}, but still unwinding after {STOP_GRACE_S:.0f} s; "
            "exiting without the rest of the cleanup (the stacks below show where it was)\n"
        )
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
        sys.stderr.flush()
        os._exit(code)

    timer = threading.Timer(STOP_GRACE_S, give_up)
    timer.daemon = True  # a normal exit never waits for it
    timer.start()


def stop_message(e: KeyboardInterrupt) -> tuple[str, int]:
    """What stopped the command, in words, and its exit status (143 SIGTERM, 130 Ctrl-C)."""
    if isinstance(e, Terminated):
        return "terminated (SIGTERM)", 143
    return "interrupted (Ctrl-C)", 130


@contextlib.contextmanager
def interruptible() -> Iterator[None]:
    """Turn SIGTERM into `Terminated` (a KeyboardInterrupt) inside the block, so a
    `timeout` or a CI cancel leaves the same record as Ctrl-C instead of dying silently,
    and note either one CPython discards (`undelivered`). Handlers can only be set from
    the main thread; elsewhere the block runs as is."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.signal(signal.SIGTERM, _raise_interrupt)
    old_hook, sys.unraisablehook = sys.unraisablehook, _noting_discards(sys.unraisablehook)
    exc_type: type[BaseException] | None = None
    try:
        yield
    except BaseException as e:
        exc_type = type(e)
        raise
    finally:
        signal.signal(signal.SIGTERM, old)
        sys.unraisablehook = old_hook
        # none stays noted for a later block (`magneton.record` called again in the same
        # process); one discarded after the last operator is raised now
        settle(exc_type)


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
