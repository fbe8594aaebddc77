"""Opening the DB file safely: the in-process registry of open paths, the engine open
with its crash recovery, and the checks that name each failure (graphdb/db.py's
`open_db` composes them with the lock and the damage probe).

- Within a process a registry of open paths refuses a second writer, which no file lock
  can see (graphdb/lock.py is the cross-process lock).
- A commit cut in its checkpoint (`.shadow`, a kill -9 or a full disk) is finished by a
  writable open before anything reads the DB (graphdb/recovery.py, which runs that open
  here as `python -m magneton.graphdb.opening --recover FILE`), or set aside beside the
  DB when a full disk cut the shadow pages short (`_set_aside_unfinished`): the DB opens
  as of its last finished commit instead of being called corrupt.
- A writer keeps 8 MB of disk back (`Reserve`) and frees it before the engine closes or
  after a write fails: a disk that another process filled mid-write made the engine's
  close throw from a destructor (rc 134) and leave its checkpoint pending.
- Failure modes are named, never lumped as "corrupt": in use (`DBLocked`), not writable
  (`DBNotWritable`), out of disk (checked before writing, `check_space`: Kùzu aborted,
  segfaulted or spun in close when the disk filled mid-write), out of memory or address
  space (`ulimit -v`). A message that calls a healthy DB corrupt leads a user to delete
  good data.
"""

from __future__ import annotations

import contextlib
import errno
import os
import resource  # at import: when memory has run out, importing it can fail
import shutil
import sys
import threading
import time
from pathlib import Path

from magneton.model import MagnetonError

from . import engine, lock, recovery
from .lock import DBLocked, DBNotWritable

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


def _open_kuzu(file: Path, read_only: bool) -> engine.Database:
    try:
        return _kuzu_database(file, read_only) if read_only else _kuzu_writable(file)
    except RuntimeError as e:  # the engine raises RuntimeError for everything
        if read_only and recovery.says_pending(e):  # open_db recovers it and retries
            raise recovery.RecoveryPending(_first_line(e)) from None
        raise _open_error(file, e, read_only) from None


def _kuzu_writable(file: Path) -> engine.Database:
    """A writable open, which replays an unfinished commit; one that cannot be finished
    is set aside first, and a WAL torn by a kill is replayed up to the tear (a copy of
    it kept aside)."""
    try:
        return _kuzu_database(file, read_only=False)
    except RuntimeError as e:
        if _torn(e):
            _set_aside_unfinished(file, keep_wal=True)
            return engine.open_database(file, read_only=False, drop_torn_tail=True)
        if not _shadow_cut(e):
            raise
    _set_aside_unfinished(file)
    return _kuzu_database(file, read_only=False)


def _torn(e: BaseException) -> bool:
    msg = str(e).lower()
    return any(w in msg for w in recovery.TORN_WORDS)


def _shadow_cut(e: BaseException) -> bool:
    """The engine cannot finish a commit whose shadow file is shorter than its WAL says:
    the disk filled while the checkpoint wrote it (reproduced on Kùzu in
    tests/test_faults.py; the writer then spun and was killed). No later open can finish
    that commit. Kùzu said "Reading past the end of the file"; LadybugDB says "Cannot
    replay shadow file ...: file is too small" or "invalid shadow page count"."""
    msg = str(e).lower()
    cut = ("past the end of the file", "file is too small", "invalid shadow page count")
    return "shadow" in msg and any(c in msg for c in cut)


def _set_aside_unfinished(file: Path, keep_wal: bool = False) -> None:
    """Move the WAL and the cut shadow pages of a commit that cannot be finished into a
    folder beside the DB (kept, never deleted), so the DB opens as of its last finished
    commit. The commit was the write that ran out of disk; the runs before it stay, and
    their checksums are still verified when loaded (graphdb/integrity.py). With
    `keep_wal` the WAL is copied instead (a torn one: the engine replays what precedes
    the tear)."""
    aside = file.with_name(f"{file.name}.unfinished-{time.strftime('%Y%m%d-%H%M%S')}")
    aside.mkdir(exist_ok=True)
    for suffix in (".wal", *recovery.PENDING_SUFFIXES):
        part = file.with_name(file.name + suffix)
        if part.exists() and keep_wal and suffix == ".wal":
            shutil.copy2(part, aside / part.name)
        elif part.exists() and not keep_wal:
            part.rename(aside / part.name)
    what = (
        "its WAL was torn by a kill mid-write; the writes before the tear were replayed"
        if keep_wal
        else "its shadow pages were cut short, by a full disk or a kill"
    )
    print(
        f"magneton: the last commit to {file.parent} could not be finished ({what}); it was "
        f"set aside in {aside} and the DB is as of the commit before it",
        file=sys.stderr,
    )


def _kuzu_database(file: Path, read_only: bool) -> engine.Database:
    return engine.open_database(file, read_only)


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
    if out_of_memory(e):
        return MagnetonError(memory_message(f"to open the Magneton DB {file}", e))
    if "not a valid" in msg and "database" in msg:
        return MagnetonError(
            f"{file} is not a {engine.NAME} database (corrupt or another kind of file); "
            "move it away or use another --db"
        )
    return MagnetonError(
        f"cannot open the Magneton DB {file} (corrupt, or written by another {engine.NAME} "
        f"version than {engine.version()}): {_first_line(e)}"
    )


# how the engine words a failed allocation or mapping (ulimit -v, a full memory cgroup)
_OUT_OF_MEMORY = (
    "cannot allocate memory",
    "out of memory",
    "bad_alloc",
    "mmap",
    "buffer manager",
    "unable to allocate memory",
)


def out_of_memory(e: BaseException) -> bool:
    """Whether an error is a failed allocation or mapping (said by the engine, or a
    Python MemoryError)."""
    return isinstance(e, MemoryError) or any(m in str(e).lower() for m in _OUT_OF_MEMORY)


def memory_message(what: str, e: BaseException) -> str:
    """One line for running out of memory or address space `what` ("to open ..."),
    naming the address-space limit when there is one."""
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    limit = "" if soft in (resource.RLIM_INFINITY, -1) else f"; ulimit -v allows {soft >> 20} MB"
    return (
        f"not enough memory or address space {what} ({_first_line(e)}{limit}); the DB is "
        "intact. Raise the limit (ulimit -v) or free memory"
    )


def _not_writable(file: Path, e: BaseException) -> DBNotWritable:
    return DBNotWritable(
        f"the Magneton DB {file} is not writable ({_first_line(e)}); read-only commands "
        "(runs, query, report) still work on it"
    )


# why a file cannot be created in the DB's folder: the folder is not writable
_FOLDER_REFUSES = {
    errno.EROFS: "it is on a read-only file system",
    errno.EACCES: "its folder is read-only for this user",
    errno.EPERM: "its folder is read-only for this user",
}


def check_folder_writable(file: Path) -> None:
    """Refuse a writer's open when no file can be created beside the DB file. The engine
    creates its WAL there at the first write: in a folder the user may not write (an
    existing DB whose lock file was already there) the open succeeded, the workload
    ran, and the save failed with "IO exception: Cannot open file .../profile.lbug.wal",
    which `record` then blamed on the user's script. A file made and removed here finds
    that before anything runs."""
    probe = file.with_name(f".{file.name}.probe-{os.getpid()}-{threading.get_ident()}")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        os.close(os.open(probe, flags, 0o600))
    except FileExistsError:
        pass  # a probe a killed process of this pid left: the folder takes files
    except OSError as e:
        why = _FOLDER_REFUSES.get(e.errno or 0)
        if why is None:
            return  # said by the open or the write that meets it, in their words
        raise DBNotWritable(
            f"the Magneton DB {file} is not writable: {why} ({file.parent}: "
            f"{e.strerror}); read-only commands (runs, query, report) still work on it"
        ) from None
    with contextlib.suppress(OSError):
        probe.unlink()


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


# Disk space a writer keeps back while it has the DB open (`Reserve`), freed before the
# engine closes or after a write fails. 8 MB: the engine's WAL flush in close needs a few
# pages; a 4 MB reserve sufficed in every full-disk test (tests/test_recovery.py).
RESERVE_B = 8 * 1024 * 1024
# Free space below which a failed engine write is taken for a full disk: the engine does
# not always say so ("Cannot write to file ... No such file or directory" from a cut
# write, "post-commit checkpoint failed")
_FULL_B = 1024 * 1024


class Reserve:
    """A file of `RESERVE_B` bytes beside the DB (`profile.lbug.reserve`), held while a
    writer has the DB open. When another process filled the disk during a write, the
    engine's close still had to flush its WAL, and that flush threw from a destructor:
    `terminate called ... IOException`, the process aborted (rc 134) and the DB was left
    with a pending checkpoint. Freeing the reserve first gives the close room to finish."""

    def __init__(self, file: Path):
        self.path = file.with_name(file.name + ".reserve")
        self.held = False

    def claim(self) -> None:
        """Best effort: no reserve where the space or `posix_fallocate` is missing."""
        try:  # a killed writer's reserve, or a link planted there (unlink never follows)
            self.path.unlink(missing_ok=True)
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
            fd = os.open(self.path, flags, 0o600)
        except OSError:
            return
        try:
            os.posix_fallocate(fd, 0, RESERVE_B)
            self.held = True
        except OSError:
            self._drop()
        finally:
            os.close(fd)

    def release(self) -> None:
        if self.held:
            self.held = False
            self._drop()

    def release_stale(self) -> None:
        """Remove the reserve a killed writer left (call only under the DB's lock)."""
        if self.path.exists() or self.path.is_symlink():
            self._drop()

    def _drop(self) -> None:
        try:
            self.path.unlink(missing_ok=True)
        except OSError:
            pass


def disk_full(file: Path, error: BaseException) -> bool:
    """Whether a failed engine write ran out of disk (said, or nearly no space left)."""
    if "no space left" in str(error).lower() or getattr(error, "errno", 0) == errno.ENOSPC:
        return True
    try:
        return shutil.disk_usage(file.parent).free < _FULL_B
    except OSError:
        return False


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


def _recover_child(file: Path) -> int:
    """`python -m magneton.graphdb.opening --recover FILE` (graphdb/recovery.py): one
    read-write open, which replays a commit cut in its checkpoint, and a clean close."""
    try:
        _kuzu_writable(file).close()
    except RuntimeError as e:
        err = _open_error(file, e, read_only=False)
        unfinished = (
            f"the Magneton DB {file} has an unfinished commit (a checkpoint left pending by a "
            "writer that was killed or ran out of disk; its data is intact)"
        )
        if isinstance(err, DBNotWritable):
            err = MagnetonError(
                f"{unfinished} and finishing it needs write access ({_first_line(e)}); run "
                f"`magneton rm --db {file.parent}` where it can write, then retry"
            )
        elif disk_full(file, e):
            err = MagnetonError(
                f"{unfinished} and finishing it needs free disk space: "
                + out_of_space_message(file).split("; ")[0]
                + "; free some there, then retry"
            )
        print(f"magneton: {err}", file=sys.stderr)
        return recovery.SAID
    return 0


if __name__ == "__main__" and sys.argv[1:2] == ["--recover"]:
    sys.exit(_recover_child(Path(sys.argv[2])))
