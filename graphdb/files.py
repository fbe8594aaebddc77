"""Writing a file the user names (`export-patch -o`, `export-trace -o`) without following
a symbolic link out of the directory it is in.

`export-patch -o fix.patch`, with `fix.patch` a link to a file outside the repository
(planted by whoever could write there), overwrote that file. A write here goes only to a
path inside the directory the user named (the file's own folder, or for a job's folder of
per-rank files that folder): a link whose target resolves inside it is written through,
one that leads out is refused in one line. The text is written whole to a temporary file
beside the target and renamed over it: a failed write never leaves half a file, and a
link put in place between the check and the write is replaced, never followed.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

from magneton.model import MagnetonError


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def confined_target(path: str | Path, root: str | Path | None = None) -> Path:
    """Where a write of `path` lands: `path` itself, or the target of the link `path` is
    when that target lies inside `root` (default: `path`'s own folder); MagnetonError
    when it would leave it."""
    p = Path(os.path.abspath(path))
    base = os.path.realpath(root if root is not None else p.parent)
    real = os.path.realpath(p)
    if not _inside(real, base):
        raise MagnetonError(
            f"refusing to write {path}: it is a symbolic link to {real}, outside {base} "
            "(a write never follows a link out of the folder it names); remove the link or "
            "name another file"
        )
    return Path(real)


def write_confined(
    path: str | Path, text: str, root: str | Path | None = None, encoding: str = "utf-8"
) -> Path:
    """Write `text` to `path` in `encoding` (see the module doc); returns the file written."""
    target = confined_target(path, root)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    except OSError as e:
        raise MagnetonError(f"cannot write {path}: {e.strerror or e}") from None
    try:
        with os.fdopen(fd, "w", encoding=encoding) as fh:
            os.fchmod(fh.fileno(), 0o666 & ~_umask())  # as open() would have made it
            fh.write(text)
        os.replace(tmp, target)  # replaces a link put there meanwhile, never follows it
    except OSError as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise MagnetonError(f"cannot write {path}: {e.strerror or e}") from None
    return target


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def check_db_files(file: Path, suffixes: tuple[str, ...]) -> None:
    """Refuse a writer's open of the DB file `file` when it, or a file the writer makes
    beside it (`file` + each suffix), is a link out of the DB's folder: the engine, the
    lock and the seal would write through it."""
    for suffix in ("", *suffixes):
        part = file.with_name(file.name + suffix)
        if part.is_symlink():
            try:
                confined_target(part, file.parent)
            except MagnetonError as e:
                raise MagnetonError(
                    f"{e}; the DB in {file.parent} is not written through it (--db names "
                    "the folder Magneton writes in)"
                ) from None
