"""The store boundary: what the other stages pass around as "the DB".

Recording, diagnosis and the front ends take `db: ProfileDB` (an open handle) or, at the
few entry points that also serve scripts and tests, `DBArg` (a handle or a `--db` path).
`opened` turns a `DBArg` into a handle for one block. Whether `db` is a path is decided
by its type (`str` or `os.PathLike`), not by probing for a method (`hasattr(db,
"load_profile")` took any object with that attribute for a DB, and a typo'd handle for a
path). Importing this module does not import the engine (graphdb/engine.py): diagnosis
runs on loaded profiles without it.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Union

if TYPE_CHECKING:
    from .db import ProfileDB

# an open DB, or the directory (or file) of one: a `--db` argument
DBArg = Union["ProfileDB", str, "os.PathLike[str]"]


def is_path(db: DBArg) -> bool:
    """True when `db` names a DB on disk rather than being an open handle."""
    return isinstance(db, (str, os.PathLike))


@contextlib.contextmanager
def opened(db: DBArg, read_only: bool = False) -> Iterator[ProfileDB]:
    """`db` as is when it is an open handle (the caller closes it), or the DB at the path
    `db` opened for the block and closed after it. A writable open waits while another
    process holds the DB (graphdb/lock.py)."""
    if not isinstance(db, (str, os.PathLike)):
        yield db
        return
    from .db import open_db

    handle = open_db(Path(db), read_only=read_only)
    try:
        yield handle
    finally:
        handle.close()
