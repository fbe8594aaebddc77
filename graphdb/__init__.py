"""magneton.graphdb: the data model and its Kùzu store.

`model` is importable without kuzu (diagnosis and reports work on loaded profiles);
the DB names below are imported lazily for the same reason.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .model import SCHEMA_VERSION, MagnetonError, Profile

if TYPE_CHECKING:
    from .db import ProfileDB, QueryResult, RunRow, find_write_clause, open_db

__all__ = [
    "SCHEMA_VERSION",
    "MagnetonError",
    "Profile",
    "ProfileDB",
    "QueryResult",
    "RunRow",
    "find_write_clause",
    "load_profile",
    "open_db",
]

_DB_NAMES = {"ProfileDB", "QueryResult", "RunRow", "find_write_clause", "open_db"}


def __getattr__(name: str) -> Any:
    if name in _DB_NAMES:
        from . import db

        return getattr(db, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def load_profile(db_dir: str, run: str) -> Profile:
    """Open the DB in `db_dir` read-only and load one run (convenience for scripts)."""
    from .db import open_db

    with open_db(db_dir, read_only=True) as pdb:
        return pdb.load_profile(run)
