"""Who may open a Magneton DB at once: one writer, or any number of readers, across
processes — and a writer that finds the DB busy waits for it instead of failing.

Why Magneton keeps its own lock (an `flock` on `profile.lbug.lock` beside the DB):
- LadybugDB locks its file for a writable open only; a read-only open in another process
  succeeds while a writer is mid-commit and may read pages the checkpoint is rewriting.
  Kùzu 0.11.3 refused such readers, and the rest of graphdb/ relies on that (a reader
  never sees a half-written run or a replace's file swap). A shared lock for readers and
  an exclusive one for writers re-establishes it.
- A busy DB used to be an immediate error: two recordings finishing a second apart lost
  one of them (its expensive recording thrown away). Here an open waits up to `wait_s`
  (default `DEFAULT_WAIT_S`, `MAGNETON_DB_WAIT_S` overrides), says so once on stderr,
  then proceeds — the way SQLite's busy timeout works. A writer holds the lock only for
  its write, so the wait is the length of one save.
- `flock` locks go away with the process (kill -9 included), so a dead writer never
  leaves the DB locked, and the lock file itself is never deleted (deleting it while
  another process waits on it would let two writers in).
- Where the lock file cannot be created (a read-only mount, a directory the user cannot
  write), a read-only open proceeds unlocked: nothing can write there through Magneton;
  a writer's open is `DBNotWritable`, so a command whose write is only a cache (`diff`
  storing its result) reads instead of failing on the lock.
"""

from __future__ import annotations

import errno
import fcntl
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

from magneton.model import MagnetonError

DEFAULT_WAIT_S = 120.0
_POLL_S = 0.05


class DBLocked(MagnetonError):
    """The DB file is held by another process (a writer, or readers while we write)."""


class DBNotWritable(MagnetonError):
    """The DB file or its directory cannot be written (read-only mount, permissions)."""


# why a lock file cannot be created: the place is not writable, not a failure to report
_NOT_WRITABLE = (errno.EROFS, errno.EACCES, errno.EPERM)


def wait_budget_s() -> float:
    """How long an open waits for a busy DB: MAGNETON_DB_WAIT_S, else the default."""
    raw = os.environ.get("MAGNETON_DB_WAIT_S", "")
    try:
        return max(0.0, float(raw)) if raw else DEFAULT_WAIT_S
    except ValueError:
        return DEFAULT_WAIT_S


def lock_file(db_file: Path) -> Path:
    return db_file.with_name(db_file.name + ".lock")


def busy_message(db_file: Path) -> str:
    return (
        f"the Magneton DB {db_file} is in use by another process (one writer, or readers "
        "while nobody writes; a recording holds it only for its final write); retry when it "
        "has finished, or set MAGNETON_DB_WAIT_S to wait longer"
    )


class DBFileLock:
    """A held shared (reader) or exclusive (writer) lock on one DB; `release()` frees it."""

    def __init__(self, fd: int | None):
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor drops the flock
            self._fd = None


def _open_lock_fd(path: Path, exclusive: bool) -> int | None:
    # O_NOFOLLOW: a lock file planted as a link out of the DB's folder is not created or
    # opened through (a writer's open refuses such links first: graphdb/files.py)
    flags = os.O_CLOEXEC | os.O_NOFOLLOW
    try:
        return os.open(path, os.O_RDWR | os.O_CREAT | flags, 0o666)
    except OSError:
        if exclusive:
            raise
    try:
        return os.open(path, os.O_RDONLY | flags)
    except OSError:
        return None  # read-only place without a lock file: nobody writes here


def acquire(
    db_file: Path,
    exclusive: bool,
    wait_s: float | None = None,
    say: Callable[[str], None] | None = None,
) -> DBFileLock:
    """Take the DB's lock, waiting up to `wait_s` (None: `wait_budget_s()`) while another
    process holds it; `say` (default: stderr) hears once that we wait. Raises DBLocked."""
    wait_s = wait_budget_s() if wait_s is None else wait_s
    try:
        fd = _open_lock_fd(lock_file(db_file), exclusive)
    except OSError as e:
        if e.errno in _NOT_WRITABLE:  # a writer's open on a read-only mount: say so, so
            raise DBNotWritable(  # `open_db_prefer_write` falls back to reading
                f"the Magneton DB {db_file} is not writable ({e.strerror}: cannot create its "
                "lock file); read-only commands (runs, query, report) still work on it"
            ) from None
        raise MagnetonError(f"cannot lock the Magneton DB {db_file}: {e}") from None
    if fd is None:
        return DBFileLock(None)
    mode = (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB
    deadline = time.monotonic() + wait_s
    told = False
    while True:
        try:
            fcntl.flock(fd, mode)
            return DBFileLock(fd)
        except BlockingIOError:
            if time.monotonic() >= deadline:
                os.close(fd)
                raise DBLocked(busy_message(db_file)) from None
            if not told:
                told = True
                (say or _stderr)(
                    f"magneton: the DB {db_file.parent} is in use by another process; "
                    f"waiting up to {wait_s:.0f} s for it (MAGNETON_DB_WAIT_S)"
                )
            time.sleep(_POLL_S)
        except OSError as e:  # a file system without flock: proceed as before (engine lock)
            os.close(fd)
            if e.errno in (errno.ENOLCK, errno.EOPNOTSUPP):
                return DBFileLock(None)
            raise MagnetonError(f"cannot lock the Magneton DB {db_file}: {e}") from None


def _stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)
