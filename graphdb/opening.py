"""Opening the DB file safely: the in-process registry of open paths, the engine open
with its crash recovery, and the checks that name each failure (graphdb/db.py's
`open_db` composes them with the lock and the damage probe).

- Within a process a registry of open paths refuses a second writer, which no file lock
  can see (graphdb/lock.py is the cross-process lock).
- A commit cut in its checkpoint (`.shadow`, a kill -9 or a full disk) is finished by a
  writable open (`_finish_commit`), or set aside beside the DB when a full disk cut the
  shadow pages short (`_set_aside_unfinished`): the DB opens as of its last finished
  commit instead of being called corrupt.
- Failure modes are named, never lumped as "corrupt": in use (`DBLocked`), not writable
  (`DBNotWritable`), out of disk (checked before writing, `check_space`: Kùzu aborted,
  segfaulted or spun in close when the disk filled mid-write), out of memory or address
  space (`ulimit -v`). A message that calls a healthy DB corrupt leads a user to delete
  good data.
"""

from __future__ import annotations

import shutil
import sys
import threading
import time
from pathlib import Path

from magneton.model import MagnetonError

from . import engine, lock
from .lock import DBLocked

# Resolved DB file → modes currently open in this process ("rw" / "ro").
_OPEN: dict[Path, list[str]] = {}
_OPEN_LOCK = threading.Lock()


def _register_open(file: Path, mode: str) -> None:
    with _OPEN_LOCK:
        modes = _OPEN.setdefault(file, [])
        if modes and (mode == "rw" or "rw" in modes):
            raise MagnetonError(
                f"the Magneton DB {file} is already open in this process "
                f"({'for writing' if 'rw' in modes else 'read-only'}); close it first"
            )
        modes.append(mode)


def _unregister_open(file: Path, mode: str) -> None:
    with _OPEN_LOCK:
        modes = _OPEN.get(file, [])
        if mode in modes:
            modes.remove(mode)
        if not modes:
            _OPEN.pop(file, None)


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def _release(key: Path, mode: str, held: lock.DBFileLock) -> None:
    held.release()
    _unregister_open(key, mode)


def ghost_message(run: str, file: Path) -> str:
    """What every command says about a run left "loading" (one wording everywhere)."""
    return (
        f"run '{run}' is incomplete: its recording was killed (or ran out of disk) while writing it; "
        f"`magneton rm --db {file.parent}` removes it (so does the next recording)"
    )


class DBNotWritable(MagnetonError):
    """The DB file or its directory cannot be written (read-only mount, permissions)."""


def _open_kuzu(file: Path, read_only: bool) -> engine.Database:
    try:
        return _kuzu_database(file, read_only) if read_only else _kuzu_writable(file)
    except RuntimeError as e:  # kuzu raises RuntimeError for everything
        if read_only and "shadow" in str(e).lower():
            return _finish_commit(file)
        raise _open_error(file, e, read_only) from None


def _kuzu_writable(file: Path) -> engine.Database:
    """A writable open, which replays an unfinished commit; one that cannot be finished
    is set aside first."""
    try:
        return _kuzu_database(file, read_only=False)
    except RuntimeError as e:
        if not _shadow_cut(e):
            raise
    _set_aside_unfinished(file)
    return _kuzu_database(file, read_only=False)


def _shadow_cut(e: BaseException) -> bool:
    """The engine cannot finish a commit whose shadow file is shorter than its WAL says:
    the disk filled while the checkpoint wrote it (reproduced on Kùzu in
    tests/test_faults.py; the writer then spun and was killed). No later open can finish
    that commit. Kùzu said "Reading past the end of the file"; LadybugDB says "Cannot
    replay shadow file ...: file is too small" or "invalid shadow page count"."""
    msg = str(e).lower()
    cut = ("past the end of the file", "file is too small", "invalid shadow page count")
    return "shadow" in msg and any(c in msg for c in cut)


def _set_aside_unfinished(file: Path) -> None:
    """Move the WAL and the cut shadow pages of a commit that cannot be finished into a
    folder beside the DB (kept, never deleted), so the DB opens as of its last finished
    commit. The commit was the write that ran out of disk; the runs before it stay, and
    their checksums are still verified when loaded (graphdb/integrity.py)."""
    aside = file.with_name(f"{file.name}.unfinished-{time.strftime('%Y%m%d-%H%M%S')}")
    aside.mkdir(exist_ok=True)
    for suffix in (".wal", ".shadow"):
        part = file.with_name(file.name + suffix)
        if part.exists():
            part.rename(aside / part.name)
    print(
        f"magneton: the last commit to {file.parent} could not be finished (its shadow "
        f"pages were cut short, by a full disk or a kill); it was set aside in {aside} "
        "and the DB is as of the commit before it",
        file=sys.stderr,
    )


def _kuzu_database(file: Path, read_only: bool) -> engine.Database:
    return engine.open_database(file, read_only)


def _finish_commit(file: Path) -> engine.Database:
    """Open read-only a DB whose last commit was cut (kill -9 or a full disk during a
    checkpoint leaves `profile.kuzu.shadow`). Kùzu replays the shadow pages only in a
    writable open, so one is made and closed first; when that is impossible the user
    is told the one command that finishes it, and never that the DB is corrupt."""
    try:
        _kuzu_writable(file).close()
    except RuntimeError as e:
        err = _open_error(file, e, read_only=False)
        if isinstance(err, DBLocked):
            raise err from None
        raise MagnetonError(
            f"the Magneton DB {file} has an unfinished commit ({file.name}.shadow, left by a "
            f"writer that was killed or ran out of disk) and finishing it needs write "
            f"access ({_first_line(e)}); run `magneton rm --db {file.parent}` where it can "
            "write, then retry"
        ) from None
    return _kuzu_database(file, read_only=True)


def _open_error(file: Path, e: BaseException, read_only: bool) -> MagnetonError:
    """The one-line error for a failed engine open; "corrupt" only when nothing else fits
    (a message that calls a healthy DB corrupt leads a user to delete good data)."""
    msg = str(e).lower()
    if "lock" in msg:
        return DBLocked(lock.busy_message(file))
    if "no space left" in msg:
        return MagnetonError(out_of_space_message(file))
    if "read-only file system" in msg or "permission denied" in msg:
        return _not_writable(file, e)
    if any(m in msg for m in _OUT_OF_MEMORY):
        return MagnetonError(
            f"not enough memory or address space to open the Magneton DB {file} "
            f"({_first_line(e)}); the DB is intact. Raise the limit (ulimit -v) or free memory"
        )
    if "not a valid" in msg and "database" in msg:
        return MagnetonError(
            f"{file} is not a {engine.NAME} database (corrupt or another kind of file); "
            "move it away or use another --db"
        )
    return MagnetonError(
        f"cannot open the Magneton DB {file} (corrupt, or written by another {engine.NAME} "
        f"version than {engine.VERSION}): {_first_line(e)}"
    )


# how the engine words a failed allocation or mapping (ulimit -v, a full memory cgroup)
_OUT_OF_MEMORY = ("cannot allocate memory", "out of memory", "bad_alloc", "mmap", "buffer manager")


def _not_writable(file: Path, e: BaseException) -> DBNotWritable:
    return DBNotWritable(
        f"the Magneton DB {file} is not writable ({_first_line(e)}); read-only commands "
        "(runs, query, report) still work on it"
    )


# Free space a write needs beyond its rows: a new DB's uncompressed pages of every table
# (~24 MB measured) plus Kùzu's WAL and shadow pages during the checkpoint. Below it,
# Kùzu 0.11.3 aborted, segfaulted or spun in close when the disk filled mid-write.
_SPACE_RESERVE_B = 64 * 1024 * 1024
# Stored bytes per byte of Arrow input, with the WAL copy and the checkpoint's shadow pages.
_SPACE_PER_ROW_BYTE = 8


def check_space(file: Path, row_bytes: int = 0, rewrite: bool = False) -> None:
    """Refuse, before writing anything, a write the disk cannot hold (see above)."""
    where = file.parent if file.parent.exists() else Path(file.parent.anchor or "/")
    try:
        free = shutil.disk_usage(where).free
    except OSError:
        return
    need = _SPACE_RESERVE_B + _SPACE_PER_ROW_BYTE * row_bytes
    if rewrite and file.exists():
        need += file.stat().st_size  # the fresh copy exists beside the old file
    if free < need:
        raise MagnetonError(out_of_space_message(file, need))


def out_of_space_message(file: Path, need_b: int | None = None) -> str:
    """One line naming the disk that is full, and what became of the DB."""
    where = file.parent if file.parent.exists() else Path(file.parent.anchor or "/")
    try:
        free = f"{shutil.disk_usage(where).free / 1e6:.1f} MB free"
    except OSError:
        free = "free space unknown"
    if need_b:
        free += f", this write needs about {need_b / 1e6:.0f} MB"
    return (
        f"no space left on the disk holding {where.resolve()} ({free}); the DB "
        f"{file.name} is as it was before this write. Free space there or use another --db"
    )
