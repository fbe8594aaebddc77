"""Finishing a commit that a writer left cut short in its checkpoint, before anything
else reads the DB (graphdb/db.py `open_db` calls `recover_if_pending`).

A writer killed (kill -9, the OOM killer, a power cut) or stopped by a full disk while
the engine checkpoints leaves `profile.lbug.shadow` (and `.wal.checkpoint`) beside the
DB. Its committed writes are intact, but LadybugDB refuses every read-only open until a
read-write open has replayed them ("Cannot open database in read-only mode while
checkpoint recovery is pending"), and every Magneton command starts with a read-only
open: the damage probe (graphdb/integrity.py) reads an unsealed file read-only first,
`rm` included. Each command then called a healthy DB corrupt, which leads a user to
delete good data. Choices and the failures they prevent:

- The pending state is recognised by its files, before the probe and the open, so every
  command recovers it — read-only ones too — and says on stderr that it did. A read-only
  open that the engine still refuses for a pending recovery (a file name this module does
  not know) raises `RecoveryPending`, and `open_db` recovers and retries once.
- Recovery writes, so it runs under the DB's exclusive lock (a reader upgrades its
  shared lock, then takes it back): two readers never replay the same commit at once,
  and no reader sees the replay half done.
- The read-write open that replays runs in a child process (`python -m
  magneton.graphdb.opening --recover FILE`): a damaged WAL or shadow page can crash the engine
  where nothing can catch it, as graphdb/integrity.py's probe guards against, and a crash
  costs the child. Cost: one interpreter start, paid only when a commit was cut.
- A shadow file cut short by the full disk itself cannot be replayed; it is set aside
  beside the DB (graphdb/opening.py `_set_aside_unfinished`) and the DB opens as of the
  commit before. A WAL whose last records a kill tore mid-write fails its checksum
  ("the WAL file is corrupted", which every command then printed as a corrupt DB): a
  copy of it is set aside the same way, and the replay stops at the torn record — what
  was cut there had not committed. Where the DB cannot be written (a read-only mount) the user is told the
  one command that finishes it where it can.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

from magneton.model import MagnetonError

from . import lock

# Files of a checkpoint cut short: the shadow pages and the frozen WAL (a `.wal` alone is
# an ordinary WAL, which a read-only open replays in memory; engine.SIDE_SUFFIXES)
PENDING_SUFFIXES = (".shadow", ".wal.checkpoint")
# how the engine says so on a read-only open; a WAL whose tail a kill tore mid-write
# ("Checksum verification failed, the WAL file is corrupted") is finished the same way
_PENDING_WORDS = ("recovery is pending", "shadow", "wal file is corrupted")
TORN_WORDS = ("wal file is corrupted",)
# the child's exit status for a one-line MagnetonError on its stderr
SAID = 3


class RecoveryPending(MagnetonError):
    """A read-only open the engine refused until a read-write open replays a commit."""


def pending(file: Path) -> bool:
    """Whether a writer left a checkpoint of `file` unfinished (see the module doc)."""
    return any(file.with_name(file.name + s).exists() for s in PENDING_SUFFIXES)


def says_pending(error: BaseException | str) -> bool:
    """Whether an engine error of a read-only open (or its message) means a recovery is
    pending."""
    msg = str(error).lower()
    return any(w in msg for w in _PENDING_WORDS)


def recover_if_pending(
    file: Path, read_only: bool, held: lock.DBFileLock, wait_s: float | None, force: bool = False
) -> lock.DBFileLock:
    """Finish `file`'s cut checkpoint if there is one (or `force`), holding its exclusive
    lock while doing so; returns the lock in the mode the caller asked for."""
    if not (force or pending(file)):
        return held
    if read_only:
        held.release()
        held = _exclusive(file, wait_s)
    try:
        if force or pending(file):  # another process may have finished it meanwhile
            _recover_in_child(file)
    finally:
        if read_only:
            held.release()
    return lock.acquire(file, False, wait_s) if read_only else held


def _exclusive(file: Path, wait_s: float | None) -> lock.DBFileLock:
    """The exclusive lock, or none where no lock file can be written (a read-only mount:
    nobody can write there through Magneton, and the recovery fails with the reason)."""
    try:
        return lock.acquire(file, True, wait_s)
    except lock.DBNotWritable:
        return lock.DBFileLock(None)


def _recover_in_child(file: Path) -> None:
    cmd = [sys.executable, "-m", "magneton.graphdb.opening", "--recover", str(file)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    said = [ln for ln in proc.stderr.splitlines() if ln.startswith("magneton: ")]
    if proc.returncode == SAID and said:
        raise MagnetonError(said[-1].removeprefix("magneton: "))
    if proc.returncode != 0:
        raise MagnetonError(
            f"the Magneton DB {file} is damaged: finishing its last commit (left by a writer "
            f"that was killed or ran out of disk) {_how(proc)} the database engine; "
            "restore it from a copy, or record into a new --db"
        )
    for line in said:  # a set-aside: what the child told the user
        print(line, file=sys.stderr)
    if not any("set aside" in ln for ln in said):
        print(
            f"magneton: recovered the DB in {file.parent}: its last writer was killed (or ran "
            "out of disk) while checkpointing, and its committed writes were replayed",
            file=sys.stderr,
        )


def _how(proc: subprocess.CompletedProcess) -> str:
    if proc.returncode < 0:
        try:
            return f"crashed ({signal.Signals(-proc.returncode).name})"
        except ValueError:
            return f"crashed (signal {-proc.returncode})"
    last = proc.stderr.strip().splitlines()[-1:] or [f"exit {proc.returncode}"]
    return f"failed in ({last[0]})"
